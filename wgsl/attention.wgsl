// attention_decode: one new token's attention over the KV cache, one workgroup per query head.
// q is [q_heads, dim]; caches are [kv_heads, max_seq, dim]; query head h reads kv head
// h / group (grouped-query attention). Scores for positions 0..=pos go to `scores`
// ([q_heads, max_seq]), then softmax (max-subtracted, fixed-order reductions) and the
// weighted sum of V into out ([q_heads, dim]).

struct AttentionParams {
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
@group(0) @binding(5) var<storage, read> position: array<u32>;
var<immediate> p: AttentionParams;

// The step's position: `p.pos` plus the counter `position[0]`, which the decoder's GPU work
// advances every token (so a recorded token can be replayed); 0 for a single call.
fn step_pos() -> u32 {
    return p.pos + position[0];
}

var<workgroup> red: array<f32, 256>;

// The two loops over the cache load sixteen values before adding any: they wait a memory
// latency per batch, not per element (a 128-wide head's dot product is 8 waits, not 128), and
// each sum keeps its order. (Staging the keys in workgroup memory, a tile of positions at a
// time, was slower on the H200: docs/BENCHMARKS.md, "The norms".) Loads past the end give +0.0; a sum that starts at +0.0 can never
// be -0.0, so adding their +0.0 products leaves its bits as the real terms alone make them.

fn k_at(i: u32, end: u32) -> f32 {
    if (i < end) {
        return k_cache[i];
    }
    return 0.0;
}

fn q_at(i: u32, end: u32) -> f32 {
    if (i < end) {
        return q[i];
    }
    return 0.0;
}

fn v_at(i: u32, ok: bool) -> f32 {
    if (ok) {
        return v_cache[i];
    }
    return 0.0;
}

fn s_at(i: u32, ok: bool) -> f32 {
    if (ok) {
        return scores[i];
    }
    return 0.0;
}

@compute @workgroup_size(256)
fn attention_decode(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let h = wid.x;
    if (h >= p.q_heads) {
        return;
    }
    let kv = h / p.group;
    // Positions 0..=pos, never past the cache (the host checks first).
    let len = min(step_pos() + 1u, p.max_seq);
    let qb = h * p.dim;
    let cb = kv * p.max_seq * p.dim;
    let sb = h * p.max_seq;

    // Scores and their maximum: one position per thread, its dot product in dimension order.
    var m = -3.4e38;
    for (var t = lid; t < len; t += 256u) {
        var dot = 0.0;
        let kb = cb + t * p.dim;
        for (var d = 0u; d < p.dim; d += 16u) {
            let k0 = k_at(kb + d, kb + p.dim);
            let k1 = k_at(kb + d + 1u, kb + p.dim);
            let k2 = k_at(kb + d + 2u, kb + p.dim);
            let k3 = k_at(kb + d + 3u, kb + p.dim);
            let k4 = k_at(kb + d + 4u, kb + p.dim);
            let k5 = k_at(kb + d + 5u, kb + p.dim);
            let k6 = k_at(kb + d + 6u, kb + p.dim);
            let k7 = k_at(kb + d + 7u, kb + p.dim);
            let k8 = k_at(kb + d + 8u, kb + p.dim);
            let k9 = k_at(kb + d + 9u, kb + p.dim);
            let k10 = k_at(kb + d + 10u, kb + p.dim);
            let k11 = k_at(kb + d + 11u, kb + p.dim);
            let k12 = k_at(kb + d + 12u, kb + p.dim);
            let k13 = k_at(kb + d + 13u, kb + p.dim);
            let k14 = k_at(kb + d + 14u, kb + p.dim);
            let k15 = k_at(kb + d + 15u, kb + p.dim);
            let qe = qb + p.dim;
            dot += q_at(qb + d, qe) * k0;
            dot += q_at(qb + d + 1u, qe) * k1;
            dot += q_at(qb + d + 2u, qe) * k2;
            dot += q_at(qb + d + 3u, qe) * k3;
            dot += q_at(qb + d + 4u, qe) * k4;
            dot += q_at(qb + d + 5u, qe) * k5;
            dot += q_at(qb + d + 6u, qe) * k6;
            dot += q_at(qb + d + 7u, qe) * k7;
            dot += q_at(qb + d + 8u, qe) * k8;
            dot += q_at(qb + d + 9u, qe) * k9;
            dot += q_at(qb + d + 10u, qe) * k10;
            dot += q_at(qb + d + 11u, qe) * k11;
            dot += q_at(qb + d + 12u, qe) * k12;
            dot += q_at(qb + d + 13u, qe) * k13;
            dot += q_at(qb + d + 14u, qe) * k14;
            dot += q_at(qb + d + 15u, qe) * k15;
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

    // Weighted sum of V, one output dimension per thread, positions in order.
    for (var d = lid; d < p.dim; d += 256u) {
        var acc = 0.0;
        for (var t = 0u; t < len; t += 16u) {
            let v0 = v_at(cb + t * p.dim + d, t < len);
            let v1 = v_at(cb + (t + 1u) * p.dim + d, t + 1u < len);
            let v2 = v_at(cb + (t + 2u) * p.dim + d, t + 2u < len);
            let v3 = v_at(cb + (t + 3u) * p.dim + d, t + 3u < len);
            let v4 = v_at(cb + (t + 4u) * p.dim + d, t + 4u < len);
            let v5 = v_at(cb + (t + 5u) * p.dim + d, t + 5u < len);
            let v6 = v_at(cb + (t + 6u) * p.dim + d, t + 6u < len);
            let v7 = v_at(cb + (t + 7u) * p.dim + d, t + 7u < len);
            let v8 = v_at(cb + (t + 8u) * p.dim + d, t + 8u < len);
            let v9 = v_at(cb + (t + 9u) * p.dim + d, t + 9u < len);
            let v10 = v_at(cb + (t + 10u) * p.dim + d, t + 10u < len);
            let v11 = v_at(cb + (t + 11u) * p.dim + d, t + 11u < len);
            let v12 = v_at(cb + (t + 12u) * p.dim + d, t + 12u < len);
            let v13 = v_at(cb + (t + 13u) * p.dim + d, t + 13u < len);
            let v14 = v_at(cb + (t + 14u) * p.dim + d, t + 14u < len);
            let v15 = v_at(cb + (t + 15u) * p.dim + d, t + 15u < len);
            acc += s_at(sb + t, t < len) * v0;
            acc += s_at(sb + t + 1u, t + 1u < len) * v1;
            acc += s_at(sb + t + 2u, t + 2u < len) * v2;
            acc += s_at(sb + t + 3u, t + 3u < len) * v3;
            acc += s_at(sb + t + 4u, t + 4u < len) * v4;
            acc += s_at(sb + t + 5u, t + 5u < len) * v5;
            acc += s_at(sb + t + 6u, t + 6u < len) * v6;
            acc += s_at(sb + t + 7u, t + 7u < len) * v7;
            acc += s_at(sb + t + 8u, t + 8u < len) * v8;
            acc += s_at(sb + t + 9u, t + 9u < len) * v9;
            acc += s_at(sb + t + 10u, t + 10u < len) * v10;
            acc += s_at(sb + t + 11u, t + 11u < len) * v11;
            acc += s_at(sb + t + 12u, t + 12u < len) * v12;
            acc += s_at(sb + t + 13u, t + 13u < len) * v13;
            acc += s_at(sb + t + 14u, t + 14u < len) * v14;
            acc += s_at(sb + t + 15u, t + 15u < len) * v15;
        }
        out[qb + d] = acc * inv;
    }
}
