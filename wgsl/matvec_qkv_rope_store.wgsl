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

// The step's position: `p.pos` plus the counter `position[0]`, which the decoder's GPU work
// advances every token (so a recorded token can be replayed); 0 for a single call.
fn step_pos() -> u32 {
    return p.pos + position[0];
}

var<workgroup> partial: array<f32, 256>;

// Threads per dot product (and matvec_f16_vec8_rows8's pairing of a group's two halves).
const LANES: u32 = 32u;
const PAIRED: bool = true;
// #include "matvec_f16_group.wgsl"

// Weight group i of matrix `which` (0 q, 1 k, 2 v).
fn weights(which: u32, i: u32) -> vec4<u32> {
    if (which == 0u) {
        return wq[i];
    } else if (which == 1u) {
        return wk[i];
    }
    return wv[i];
}

// Which matrix a pair belongs to (0 q, 1 k, 2 v) and its pair index within it.
fn locate(pair: u32) -> vec2<u32> {
    let q_pairs = p.q_rows / 2u;
    let kv_pairs = p.kv_rows / 2u;
    if (pair < q_pairs) {
        return vec2<u32>(0u, pair);
    }
    if (pair < q_pairs + kv_pairs) {
        return vec2<u32>(1u, pair - q_pairs);
    }
    return vec2<u32>(2u, pair - q_pairs - kv_pairs);
}

// Row of the pair's first (second when `second`) element in its matrix.
fn pair_row(j: u32, second: bool) -> u32 {
    let half = p.dim / 2u;
    let row = (j / half) * p.dim + j % half;
    return select(row, row + half, second);
}

// Where kv_store puts row `row` of k or v: [head, pos, i] of a [heads, max_seq, dim] cache.
fn cache_at(row: u32) -> u32 {
    return ((row / p.dim) * p.max_seq + step_pos()) * p.dim + row % p.dim;
}

@compute @workgroup_size(256)
fn matvec_qkv_rope_store(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let lane = lid % LANES;
    let dot_row = lid / LANES;
    let pair = (wid.y * nwg.x + wid.x) * (128u / LANES) + dot_row / 2u;
    let second = dot_row % 2u == 1u;
    let pairs = (p.q_rows + 2u * p.kv_rows) / 2u;
    let at = locate(pair);
    let row = pair_row(at.y, second);
    var acc = 0.0;
    // No early return: every thread must reach the barriers below.
    if (pair < pairs) {
        let groups = p.cols / 8u;
        let base = row * groups;
        // One load at a time: four in flight, as matvec_f16_vec8_rows8_x4 issues them, made
        // this kernel slower on the H200 (docs/BENCHMARKS.md, "Matrix–vector products").
        for (var g = lane; g < groups; g += LANES) {
            acc = add_group(acc, weights(at.x, base + g), g);
        }
    }
    partial[lid] = acc;
    workgroupBarrier();
    for (var s = LANES / 2u; s > 0u; s >>= 1u) {
        if (lane < s) {
            partial[lid] += partial[lid + s];
        }
        workgroupBarrier();
    }
    if (lane == 0u && !second && pair < pairs) {
        let a = partial[lid];
        let b = partial[lid + LANES];
        let row_b = pair_row(at.y, true);
        if (at.x != 0u && step_pos() >= p.max_seq) {
            // A counter past the cache (the host checks first) stores nothing.
        } else if (at.x == 2u) {
            v_cache[cache_at(row)] = a;
            v_cache[cache_at(row_b)] = b;
        } else {
            let i = row % p.dim;
            let theta = f32(step_pos()) * pow(p.base, -2.0 * f32(i) / f32(p.dim));
            let c = cos(theta);
            let s = sin(theta);
            let ra = a * c - b * s;
            let rb = a * s + b * c;
            if (at.x == 0u) {
                q[row] = ra;
                q[row_b] = rb;
            } else {
                k_cache[cache_at(row)] = ra;
                k_cache[cache_at(row_b)] = rb;
            }
        }
    }
}
