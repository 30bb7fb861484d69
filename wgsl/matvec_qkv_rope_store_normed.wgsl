// matvec_qkv_rope_store_normed: matvec_qkv_rope_store of h = rmsnorm(y) * nw without h, where
// the product before left the norm pending (wgsl/include/matvec_add_norm_pending.wgsl): x =
// y * nw and partial sums of y²; each dot product's finished sum is multiplied by
// s = 1 / sqrt(Σ sq / cols + eps) (wgsl/include/norm_pending.wgsl) before RoPE: the decoder's
// residual norm without its dispatch. The same loads and sums as matvec_qkv_rope_store; within
// rounding of rmsnorm then matvec_qkv_rope_store, not bitwise.

struct QkvNormedParams {
    q_rows: u32,
    kv_rows: u32,
    cols: u32,
    dim: u32,
    pos: u32,
    max_seq: u32,
    base: f32,
    eps: f32,
    squares: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<storage, read> wq: array<vec4<u32>>;
@group(0) @binding(1) var<storage, read> wk: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read> wv: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read> sq: array<f32>;
@group(0) @binding(5) var<storage, read_write> q: array<f32>;
@group(0) @binding(6) var<storage, read_write> k_cache: array<f32>;
@group(0) @binding(7) var<storage, read_write> v_cache: array<f32>;
@group(0) @binding(8) var<storage, read> position: array<u32>;
var<immediate> p: QkvNormedParams;

const LANES: u32 = 32u;
const PAIRED: bool = true;
const NORMED: bool = true;
// #include "matvec_f16_group.wgsl"
// #include "norm_pending.wgsl"
// #include "matvec_qkv_rope_store.wgsl"

@compute @workgroup_size(256)
fn matvec_qkv_rope_store_normed(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    qkv_rope_store(wid, nwg, lid);
}
