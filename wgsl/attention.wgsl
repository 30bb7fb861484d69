// attention_decode: one new token's attention over the KV cache, one workgroup per query head.
// q is [q_heads, dim]; caches are [kv_heads, max_seq, dim]; query head h reads kv head
// h / group (grouped-query attention). Scores for positions 0..=pos go to `scores`
// ([q_heads, max_seq]), then softmax (max-subtracted, fixed-order reductions) and the
// weighted sum of V into out ([q_heads, dim]).

struct Params {
    q_heads: u32,
    dim: u32,
    group: u32,
    pos: u32,
    max_seq: u32,
    scale: f32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<storage, read> q: array<f32>;
@group(0) @binding(1) var<storage, read> k_cache: array<f32>;
@group(0) @binding(2) var<storage, read> v_cache: array<f32>;
@group(0) @binding(3) var<storage, read_write> scores: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;
var<immediate> p: Params;

var<workgroup> red: array<f32, 256>;

@compute @workgroup_size(256)
fn attention_decode(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let h = wid.x;
    if (h >= p.q_heads) {
        return;
    }
    let kv = h / p.group;
    let len = p.pos + 1u;
    let qb = h * p.dim;
    let cb = kv * p.max_seq * p.dim;
    let sb = h * p.max_seq;

    // Scores and their maximum.
    var m = -3.4e38;
    for (var t = lid; t < len; t += 256u) {
        var dot = 0.0;
        let kb = cb + t * p.dim;
        // Eight loads at a time before their products are added, in the same order as one
        // at a time (so the same bits): the loop waited a memory latency per element.
        var d = 0u;
        for (; d + 8u <= p.dim; d += 8u) {
            let k0 = k_cache[kb + d];
            let k1 = k_cache[kb + d + 1u];
            let k2 = k_cache[kb + d + 2u];
            let k3 = k_cache[kb + d + 3u];
            let k4 = k_cache[kb + d + 4u];
            let k5 = k_cache[kb + d + 5u];
            let k6 = k_cache[kb + d + 6u];
            let k7 = k_cache[kb + d + 7u];
            dot += q[qb + d] * k0;
            dot += q[qb + d + 1u] * k1;
            dot += q[qb + d + 2u] * k2;
            dot += q[qb + d + 3u] * k3;
            dot += q[qb + d + 4u] * k4;
            dot += q[qb + d + 5u] * k5;
            dot += q[qb + d + 6u] * k6;
            dot += q[qb + d + 7u] * k7;
        }
        for (; d < p.dim; d++) {
            dot += q[qb + d] * k_cache[kb + d];
        }
        let s = dot * p.scale;
        scores[sb + t] = s;
        m = max(m, s);
    }
    red[lid] = m;
    workgroupBarrier();
    for (var s = 128u; s > 0u; s >>= 1u) {
        if (lid < s) {
            red[lid] = max(red[lid], red[lid + s]);
        }
        workgroupBarrier();
    }
    let mx = red[0];
    workgroupBarrier();

    // exp and their sum.
    var sum = 0.0;
    for (var t = lid; t < len; t += 256u) {
        let e = exp(scores[sb + t] - mx);
        scores[sb + t] = e;
        sum += e;
    }
    red[lid] = sum;
    workgroupBarrier();
    for (var s = 128u; s > 0u; s >>= 1u) {
        if (lid < s) {
            red[lid] += red[lid + s];
        }
        workgroupBarrier();
    }
    let inv = 1.0 / red[0];
    // Make every thread's exp() writes to `scores` visible before they are read across threads.
    storageBarrier();

    // Weighted sum of V, one output dimension per thread.
    for (var d = lid; d < p.dim; d += 256u) {
        var acc = 0.0;
        var t = 0u;
        for (; t + 8u <= len; t += 8u) {
            let v0 = v_cache[cb + t * p.dim + d];
            let v1 = v_cache[cb + (t + 1u) * p.dim + d];
            let v2 = v_cache[cb + (t + 2u) * p.dim + d];
            let v3 = v_cache[cb + (t + 3u) * p.dim + d];
            let v4 = v_cache[cb + (t + 4u) * p.dim + d];
            let v5 = v_cache[cb + (t + 5u) * p.dim + d];
            let v6 = v_cache[cb + (t + 6u) * p.dim + d];
            let v7 = v_cache[cb + (t + 7u) * p.dim + d];
            acc += scores[sb + t] * v0;
            acc += scores[sb + t + 1u] * v1;
            acc += scores[sb + t + 2u] * v2;
            acc += scores[sb + t + 3u] * v3;
            acc += scores[sb + t + 4u] * v4;
            acc += scores[sb + t + 5u] * v5;
            acc += scores[sb + t + 6u] * v6;
            acc += scores[sb + t + 7u] * v7;
        }
        for (; t < len; t++) {
            acc += scores[sb + t] * v_cache[cb + t * p.dim + d];
        }
        out[qb + d] = acc * inv;
    }
}
