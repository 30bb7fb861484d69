// matvec_gate_up_silu_normed: matvec_gate_up_silu of h = rmsnorm(x) * nw without h:
// a[r] = silu(s Wg[r, :] (x * nw)) * (s Wu[r, :] (x * nw)), s = 1 / sqrt(mean(x²) + eps), each
// dot product summing x's squares in the loop that reads x and scaling its sum by s at the end
// (wgsl/include/matvec_f16_group_normed.wgsl): the decoder's residual norm without its dispatch.
// Within rounding of rmsnorm then matvec_gate_up_silu, not bitwise. f16 weights (cols % 8 == 0),
// f32 x, nw and a.

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
const NORMED: bool = true;
// #include "matvec_f16_group_normed.wgsl"
// #include "matvec_gate_up_silu.wgsl"

fn dot_step(acc: vec2<f32>, v: vec4<u32>, g: u32) -> vec2<f32> {
    return add_group_normed(acc, v, g);
}

@compute @workgroup_size(256)
fn matvec_gate_up_silu_normed(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    gate_up_silu(wid, nwg, lid);
}
