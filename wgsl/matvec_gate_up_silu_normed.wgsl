// matvec_gate_up_silu_normed: matvec_gate_up_silu of h = rmsnorm(x) * nw, the norm computed in
// each workgroup's prologue (wgsl/include/norm_input.wgsl) instead of by a dispatch before it:
// bitwise rmsnorm then matvec_gate_up_silu. f16 weights (cols % 8 == 0), f32 x, nw and a.

struct GateUpNormedParams {
    rows: u32,
    cols: u32,
    eps: f32,
    _pad0: u32,
}

@group(0) @binding(0) var<storage, read> wg: array<vec4<u32>>;
@group(0) @binding(1) var<storage, read> wu: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> nw: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read_write> a: array<f32>;
var<immediate> p: GateUpNormedParams;

const PAIRED: bool = false;
// #include "norm_scale.wgsl"
// #include "norm_input.wgsl"
// #include "matvec_f16_group.wgsl"
// #include "matvec_gate_up_silu.wgsl"

@compute @workgroup_size(256)
fn matvec_gate_up_silu_normed(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    norm_input(lid, p.cols, p.eps);
    gate_up_silu(wid, nwg, lid);
}
