// The sum of the members' partials, the residual add and the norm of `reduce_add_rmsnorm`
// (included by it and by `reduce_add_rmsnorm_poll`, which waits first), for one workgroup of
// 256 threads. The includer declares `p` (n, eps, members, stride, offset) and the bindings
// `slots`, `w`, `x` and `y`, and includes keep_x.wgsl and norm_tail.wgsl before this file
// (includes do not nest). Each thread handles elements lid, lid + 256, lid + 512, ... in that
// order, eight at a time in scalar registers: every load of a batch is issued before the first
// store or sum (docs/BENCHMARKS.md, "The norms"). Elements past n contribute +0.0 to the sum of
// squares, which leaves its bits as they are.

// slots[at + i], or 0 past n.
fn slot(at: u32, i: u32) -> f32 {
    if (i < p.n) {
        return slots[at + i];
    }
    return 0.0;
}

// x[i], or 0 past n.
fn get_x(i: u32) -> f32 {
    if (i < p.n) {
        return x[i];
    }
    return 0.0;
}

fn reduce_add_rmsnorm_body(lid: u32) {
    var acc = 0.0;
    for (var base = lid; base < p.n; base += 2048u) {
        // r = the members' partials in member order (member 0's first), then x + r.
        var r0 = slot(p.offset, base);
        var r1 = slot(p.offset, base + 256u);
        var r2 = slot(p.offset, base + 512u);
        var r3 = slot(p.offset, base + 768u);
        var r4 = slot(p.offset, base + 1024u);
        var r5 = slot(p.offset, base + 1280u);
        var r6 = slot(p.offset, base + 1536u);
        var r7 = slot(p.offset, base + 1792u);
        for (var j = 1u; j < p.members; j++) {
            let at = j * p.stride + p.offset;
            r0 += slot(at, base);
            r1 += slot(at, base + 256u);
            r2 += slot(at, base + 512u);
            r3 += slot(at, base + 768u);
            r4 += slot(at, base + 1024u);
            r5 += slot(at, base + 1280u);
            r6 += slot(at, base + 1536u);
            r7 += slot(at, base + 1792u);
        }
        let v0 = get_x(base) + r0;
        let v1 = get_x(base + 256u) + r1;
        let v2 = get_x(base + 512u) + r2;
        let v3 = get_x(base + 768u) + r3;
        let v4 = get_x(base + 1024u) + r4;
        let v5 = get_x(base + 1280u) + r5;
        let v6 = get_x(base + 1536u) + r6;
        let v7 = get_x(base + 1792u) + r7;
        acc += keep_x(base, v0);
        acc += keep_x(base + 256u, v1);
        acc += keep_x(base + 512u, v2);
        acc += keep_x(base + 768u, v3);
        acc += keep_x(base + 1024u, v4);
        acc += keep_x(base + 1280u, v5);
        acc += keep_x(base + 1536u, v6);
        acc += keep_x(base + 1792u, v7);
    }
    norm_tail(lid, acc);
}
