// The body of matvec_gate_up_silu and matvec_gate_up_silu_normed (how the work is cut: the
// former's header). The includer declares the bindings `wg`, `wu`, `x` and `a`, `p` (rows,
// cols), `NORMED` and `pending_scale(lid)` (NORMED: norm_pending.wgsl's, the scale of the norm
// x is waiting for), includes matvec_f16_group.wgsl, with PAIRED = false.

var<workgroup> partial: array<f32, 256>;

// Weight group i of the up (is_up) or the gate matrix.
fn weights(is_up: bool, i: u32) -> vec4<u32> {
    if (is_up) {
        return wu[i];
    }
    return wg[i];
}

// The whole product for the workgroup `wid` of `nwg`, thread `lid`.
fn gate_up_silu(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) {
    let lane = lid % 64u;
    let dot_row = lid / 64u;
    let row = (wid.y * nwg.x + wid.x) * 2u + dot_row / 2u;
    let is_up = dot_row % 2u == 1u;
    var acc = 0.0;
    // No early return: every thread must reach the barriers below.
    if (row < p.rows) {
        let groups = p.cols / 8u;
        let base = row * groups;
        // One load at a time: four in flight, as matvec_f16_vec8_rows8_x4 issues them, made
        // this kernel slower on the H200 (docs/BENCHMARKS.md, "Matrix–vector products").
        for (var q = lane; q < groups; q += 64u) {
            acc = add_group(acc, weights(is_up, base + q), q);
        }
    }
    partial[lid] = acc;
    workgroupBarrier();
    for (var s = 32u; s > 0u; s >>= 1u) {
        if (lane < s) {
            partial[lid] += partial[lid + s];
        }
        workgroupBarrier();
    }
    let scale = pending_scale(lid);
    if (lane == 0u && !is_up && row < p.rows) {
        var g = partial[lid];
        var u = partial[lid + 64u];
        if (NORMED) {
            g = g * scale;
            u = u * scale;
        }
        a[row] = g / (1.0 + exp(-g)) * u;
    }
}
