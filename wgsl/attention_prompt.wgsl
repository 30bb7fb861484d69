// attention_prompt: causal attention for `positions` query rows at once, row t at position
// first + t attending to cache positions 0 ..= first + t — the prompt's attention, one
// workgroup per (query head, row). q and out are [positions, q_heads, dim]; the caches
// [kv_heads, max_seq, dim]; query head h reads kv head h / group.
//
// Keys are taken 256 at a time (one score per thread, in workgroup memory) with the softmax
// kept online: a running maximum m and sum l, the weighted sum of V rescaled by exp(m_old -
// m_new) whenever the maximum grows, so no scratch the size of the cache is needed. Each thread
// owns one output dimension (dim <= 256, checked by the host) and adds a tile's keys in
// position order; every reduction is a fixed-order tree.

struct PromptAttentionParams {
    q_heads: u32,
    dim: u32,
    group: u32,
    first: u32,
    max_seq: u32,
    positions: u32,
    scale: f32,
    _pad0: u32,
}

@group(0) @binding(0) var<storage, read> q: array<f32>;
@group(0) @binding(1) var<storage, read> k_cache: array<f32>;
@group(0) @binding(2) var<storage, read> v_cache: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;
var<immediate> p: PromptAttentionParams;

const WG: u32 = 256u;

var<workgroup> probs: array<f32, WG>;
var<workgroup> red: array<f32, WG>;

// The fixed-order tree over `red` (max when `is_max`, else sum); every thread gets the result.
fn tree(lid: u32, v: f32, is_max: bool) -> f32 {
    red[lid] = v;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if (lid < s) {
            red[lid] = select(red[lid] + red[lid + s], max(red[lid], red[lid + s]), is_max);
        }
        workgroupBarrier();
    }
    let r = red[0];
    workgroupBarrier();
    return r;
}

@compute @workgroup_size(256)
fn attention_prompt(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    // Uniform per workgroup: a workgroup past the end returns as a whole.
    let h = wid.x;
    let row = wid.y;
    if (h >= p.q_heads || row >= p.positions) {
        return;
    }
    let kv = h / p.group;
    let len = min(p.first + row + 1u, p.max_seq);
    let qb = (row * p.q_heads + h) * p.dim;
    let cb = kv * p.max_seq * p.dim;
    var m = -3.4e38;
    var l = 0.0;
    var acc = 0.0;
    for (var t0 = 0u; t0 < len; t0 += WG) {
        let t = t0 + lid;
        var s = -3.4e38;
        if (t < len) {
            var dot = 0.0;
            let kb = cb + t * p.dim;
            for (var d = 0u; d < p.dim; d++) {
                dot += q[qb + d] * k_cache[kb + d];
            }
            s = dot * p.scale;
        }
        let m_new = max(m, tree(lid, s, true));
        var e = 0.0;
        if (t < len) {
            e = exp(s - m_new);
        }
        probs[lid] = e;
        let correction = exp(m - m_new);
        l = l * correction + tree(lid, e, false);
        // tree() ended in a barrier: every thread's probs[] is visible.
        acc *= correction;
        let count = min(WG, len - t0);
        if (lid < p.dim) {
            for (var i = 0u; i < count; i++) {
                acc += probs[i] * v_cache[cb + (t0 + i) * p.dim + lid];
            }
        }
        m = m_new;
        workgroupBarrier();
    }
    if (lid < p.dim) {
        out[qb + lid] = acc / l;
    }
}
