// The sum of the members' partials, the residual add and the norm of `reduce_add_rmsnorm`
// (included by it and by `reduce_add_rmsnorm_poll`, which waits first), for one workgroup of
// 256 threads. The includer declares `p` (n, eps, members, stride, offset) and the bindings
// `slots`, `w`, `x` and `y`, and includes norm_tail.wgsl and keep_x.wgsl before this file
// (includes do not nest). How a thread walks the vector, and why: norm_tail.wgsl. Up to HELD
// elements, every member's loads of all four batches are issued together: over the bus from
// host memory each wait is a round trip.

// slots[at + i], or 0 past n.
fn slot(at: u32, i: u32) -> f32 {
    if (i < p.n) {
        return slots[at + i];
    }
    return 0.0;
}

// Member partials from `at` for the eight elements from base.
fn slot8(at: u32, base: u32) -> Eight {
    return Eight(slot(at, base), slot(at, base + 256u), slot(at, base + 512u), slot(at, base + 768u),
        slot(at, base + 1024u), slot(at, base + 1280u), slot(at, base + 1536u), slot(at, base + 1792u));
}

// r = the members' partials in member order (member 0's first), for the eight elements from base.
fn reduce8(base: u32) -> Eight {
    var r = slot8(p.offset, base);
    for (var j = 1u; j < p.members; j++) {
        r = add8(r, slot8(j * p.stride + p.offset, base));
    }
    return r;
}

fn reduce_add_rmsnorm_body(lid: u32) {
    var acc = 0.0;
    if (p.n <= HELD) {
        // reduce8 four times, interleaved so that each member's four batches load together.
        var r0 = slot8(p.offset, lid);
        var r1 = slot8(p.offset, lid + 2048u);
        var r2 = slot8(p.offset, lid + 4096u);
        var r3 = slot8(p.offset, lid + 6144u);
        for (var j = 1u; j < p.members; j++) {
            let at = j * p.stride + p.offset;
            r0 = add8(r0, slot8(at, lid));
            r1 = add8(r1, slot8(at, lid + 2048u));
            r2 = add8(r2, slot8(at, lid + 4096u));
            r3 = add8(r3, slot8(at, lid + 6144u));
        }
        let v0 = add8(x8(lid), r0);
        let v1 = add8(x8(lid + 2048u), r1);
        let v2 = add8(x8(lid + 4096u), r2);
        let v3 = add8(x8(lid + 6144u), r3);
        keep_held(lid, v0, v1, v2, v3);
        return;
    }
    for (var base = lid; base < p.n; base += 2048u) {
        acc = keep8(acc, base, add8(x8(base), reduce8(base)));
    }
    norm_tail(lid, acc);
}
