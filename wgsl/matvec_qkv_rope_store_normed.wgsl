// matvec_qkv_rope_store_normed: matvec_qkv_rope_store of h = rmsnorm(x) * nw without h: each dot
// product reads x * nw, sums x's squares in the same loop and scales its sum by
// s = 1 / sqrt(mean(x²) + eps) before RoPE (wgsl/include/matvec_f16_group_normed.wgsl): the
// decoder's residual norm without its dispatch. Within rounding of rmsnorm then
// matvec_qkv_rope_store, not bitwise.

struct QkvNormedParams {
    q_rows: u32,
    kv_rows: u32,
    cols: u32,
    dim: u32,
    pos: u32,
    max_seq: u32,
    base: f32,
    eps: f32,
}

@group(0) @binding(0) var<storage, read> wq: array<vec4<u32>>;
@group(0) @binding(1) var<storage, read> wk: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read> wv: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read> nw: array<vec4<f32>>;
@group(0) @binding(5) var<storage, read_write> q: array<f32>;
@group(0) @binding(6) var<storage, read_write> k_cache: array<f32>;
@group(0) @binding(7) var<storage, read_write> v_cache: array<f32>;
@group(0) @binding(8) var<storage, read> position: array<u32>;
var<immediate> p: QkvNormedParams;

const LANES: u32 = 32u;
const PAIRED: bool = true;
const NORMED: bool = true;
// #include "matvec_f16_group_normed.wgsl"
// #include "matvec_qkv_rope_store.wgsl"

fn dot_step(acc: vec2<f32>, v: vec4<u32>, g: u32) -> vec2<f32> {
    return add_group_normed(acc, v, g);
}

@compute @workgroup_size(256)
fn matvec_qkv_rope_store_normed(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    qkv_rope_store(wid, nwg, lid);
}
