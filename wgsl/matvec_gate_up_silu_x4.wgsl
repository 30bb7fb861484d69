// matvec_gate_up_silu_x4: matvec_gate_up_silu's result (its bits) from workgroups of 256 threads, 4
// rows each, a thread computing gate and up of its row and loading x once for both
// (include/matvec_gate_up_silu_shared_x.wgsl). f16 weights (cols % 8 == 0), f32 x and a.

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
const ROWS: u32 = 4u;
// #include "matvec_f16_group.wgsl"
// #include "matvec_gate_up_silu_shared_x.wgsl"

@compute @workgroup_size(256)
fn matvec_gate_up_silu_x4(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    gate_up_silu_shared_x(wid, nwg, lid);
}
