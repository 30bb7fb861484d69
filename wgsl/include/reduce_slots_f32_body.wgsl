// Phase B's sum of `reduce_slots_f32` (included by it and by `reduce_slots_f32_poll`, which
// waits first); wgsl/reduce_slots_f32.wgsl says what it computes and why the bits agree on
// every member. The includer declares `p` (n, members, stride, offset, dst_offset, self_index)
// and the bindings `slots` (`array<vec4<f32>>`) and `dst`.

fn reduce_slots_f32_body(gid: u32, workgroups: u32) {
    let quads = (p.n + 3u) / 4u;
    let step = workgroups * 256u;
    for (var q = gid; q < quads; q += step) {
        let e = 4u * q;
        let base = p.dst_offset + e;
        let live = min(p.n - e, 4u);
        var own = vec4<f32>(0.0);
        if (live == 4u) {
            own = vec4<f32>(dst[base], dst[base + 1u], dst[base + 2u], dst[base + 3u]);
        } else {
            for (var k = 0u; k < live; k++) {
                own[k] = dst[base + k];
            }
        }
        var acc: vec4<f32>;
        if (p.self_index == 0u) {
            acc = own;
        } else {
            acc = slots[p.offset / 4u + q];
        }
        for (var j = 1u; j < p.members; j++) {
            if (j == p.self_index) {
                acc += own;
            } else {
                acc += slots[(j * p.stride + p.offset) / 4u + q];
            }
        }
        if (live == 4u) {
            dst[base] = acc.x;
            dst[base + 1u] = acc.y;
            dst[base + 2u] = acc.z;
            dst[base + 3u] = acc.w;
        } else {
            for (var k = 0u; k < live; k++) {
                dst[base + k] = acc[k];
            }
        }
    }
}
