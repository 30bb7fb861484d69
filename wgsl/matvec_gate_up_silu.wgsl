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

const PAIRED: bool = false;
const NORMED: bool = false;
// #include "matvec_f16_group.wgsl"
// #include "matvec_gate_up_silu.wgsl"

// Nothing pending: the input is used as it is.
fn pending_scale(lid: u32) -> f32 {
    return 1.0;
}

@compute @workgroup_size(256)
fn matvec_gate_up_silu(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    gate_up_silu(wid, nwg, lid);
}
