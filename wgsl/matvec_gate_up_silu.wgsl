// matvec_gate_up_silu: the MLP's gate and up products and SiLU(gate)·up in one dispatch:
// a[r] = silu(Wg[r, :] x) * (Wu[r, :] x), f16 weights (cols % 8 == 0), f32 x and a.
//
// Each workgroup of 256 computes two output rows as four dot products of 64 threads each
// (gate r0, up r0, gate r1, up r1), with exactly the loads, additions and tree reduction of
// matvec_f16_vec8_rows4 and the expression of silu_mul, so its result is bitwise that of those
// two kernels run one after the other (tests/kernels.rs checks it); it saves the second product's
// and silu_mul's dispatches and the round trip of gate and up through memory.

struct GateUpParams {
    rows: u32,
    cols: u32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<storage, read> wg: array<vec4<u32>>;
@group(0) @binding(1) var<storage, read> wu: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read_write> a: array<f32>;
var<immediate> p: GateUpParams;

var<workgroup> partial: array<f32, 256>;

const PAIRED: bool = false;
// #include "matvec_f16_group.wgsl"

// Weight group i of the up (is_up) or the gate matrix.
fn weights(is_up: bool, i: u32) -> vec4<u32> {
    if (is_up) {
        return wu[i];
    }
    return wg[i];
}

@compute @workgroup_size(256)
fn matvec_gate_up_silu(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
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
    if (lane == 0u && !is_up && row < p.rows) {
        let g = partial[lid];
        a[row] = g / (1.0 + exp(-g)) * partial[lid + 64u];
    }
}
