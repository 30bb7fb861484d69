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
        for (var d = 0u; d < p.dim; d++) {
            dot += q[qb + d] * k_cache[cb + t * p.dim + d];
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
        for (var t = 0u; t < len; t++) {
            acc += scores[sb + t] * v_cache[cb + t * p.dim + d];
        }
        out[qb + d] = acc * inv;
    }
}
