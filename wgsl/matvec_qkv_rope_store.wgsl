// matvec_qkv_rope_store: one decode step's query, key and value products, RoPE on q and k, and
// the key and value stored into the KV caches at `pos`, in one dispatch (f16 weights, cols % 8
// == 0; f32 x, q and caches):
//   q = rope(Wq x);  k_cache[h, pos, :] = rope(Wk x)[h, :];  v_cache[h, pos, :] = (Wv x)[h, :].
//
// RoPE rotates the pair (i, i + dim/2) of each head, so the work is cut into pairs of rows:
// each workgroup of 256 computes four pairs as eight dot products of LANES = 32 threads, with
// exactly the loads, additions and tree reduction of matvec_f16_vec8_rows8, then rotates each
// pair with the expressions of rope.wgsl and stores it where kv_store would: bitwise the six
// dispatches it replaces (three products, two ropes, kv_store; tests/tp_kernels.rs checks it).
// The host dispatches a workgroup per QKV_PAIRS_PER_WORKGROUP (= 128 / LANES) pairs.

struct QkvParams {
    q_rows: u32,
    kv_rows: u32,
    cols: u32,
    dim: u32,
    pos: u32,
    max_seq: u32,
    base: f32,
    _pad: u32,
}

@group(0) @binding(0) var<storage, read> wq: array<vec4<u32>>;
@group(0) @binding(1) var<storage, read> wk: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read> wv: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read_write> q: array<f32>;
@group(0) @binding(5) var<storage, read_write> k_cache: array<f32>;
@group(0) @binding(6) var<storage, read_write> v_cache: array<f32>;
@group(0) @binding(7) var<storage, read> position: array<u32>;
var<immediate> p: QkvParams;

// Threads per dot product (and matvec_f16_vec8_rows8's pairing of a group's two halves).
const LANES: u32 = 32u;
const PAIRED: bool = true;
const NORMED: bool = false;
// #include "matvec_f16_group.wgsl"
// #include "matvec_qkv_rope_store.wgsl"

// Nothing pending: the input is used as it is.
fn pending_scale(lid: u32) -> f32 {
    return 1.0;
}

@compute @workgroup_size(256)
fn matvec_qkv_rope_store(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    qkv_rope_store(wid, nwg, lid);
}
