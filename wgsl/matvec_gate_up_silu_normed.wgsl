// matvec_gate_up_silu_normed: matvec_gate_up_silu of h = rmsnorm(y) * nw without h, where the
// product before left the norm pending (wgsl/include/matvec_add_norm_pending.wgsl): x = y * nw
// and partial sums of y²; a[r] = silu(s Wg[r, :] x) * (s Wu[r, :] x), the scale
// s = 1 / sqrt(Σ sq / cols + eps) multiplying each finished dot product
// (wgsl/include/norm_pending.wgsl): the decoder's residual norm without its dispatch. The same
// loads and sums as matvec_gate_up_silu; within rounding of rmsnorm then matvec_gate_up_silu,
// not bitwise. f16 weights (cols % 8 == 0), f32 x, sq and a.

struct GateUpNormedParams {
    rows: u32,
    cols: u32,
    eps: f32,
    squares: u32,
}

@group(0) @binding(0) var<storage, read> wg: array<vec4<u32>>;
@group(0) @binding(1) var<storage, read> wu: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> sq: array<f32>;
@group(0) @binding(4) var<storage, read_write> a: array<f32>;
var<immediate> p: GateUpNormedParams;

const PAIRED: bool = false;
const NORMED: bool = true;
// #include "matvec_f16_group.wgsl"
// #include "norm_pending.wgsl"
// #include "matvec_gate_up_silu.wgsl"

@compute @workgroup_size(256)
fn matvec_gate_up_silu_normed(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    gate_up_silu(wid, nwg, lid);
}
