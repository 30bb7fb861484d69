// What attention_decode and attention_split share: the step's position, the loads with their
// bounds, a position's score cut over SEG threads and the weighted sum of V over a range of
// positions (why they are cut so: attention.wgsl's header). The includer declares `q`,
// `k_cache`, `v_cache`, `scores`, `position` and `p` (dim, pos).

// The step's position: `p.pos` plus the counter `position[0]`, which the decoder's GPU work
// advances every token (so a recorded token can be replayed); 0 for a single call.
fn step_pos() -> u32 {
    return p.pos + position[0];
}

var<workgroup> red: array<f32, 256>;

// Threads per position in the score pass, and positions per pass.
const SEG: u32 = 8u;
const PASS: u32 = 32u;

// Loads past the end give +0.0; a sum that starts at +0.0 can never be -0.0, so adding their
// +0.0 products leaves its bits as the real terms alone make them.

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

// This thread's part of q·k for the position whose key starts at kb: dims seg, seg + SEG, ...,
// sixteen loads of k and q issued before any is added.
fn score_part(qb: u32, kb: u32, seg: u32) -> f32 {
    var dot = 0.0;
    let ke = kb + p.dim;
    let qe = qb + p.dim;
    for (var d = seg; d < p.dim; d += 16u * SEG) {
        let k0 = k_at(kb + d, ke);
        let k1 = k_at(kb + d + SEG, ke);
        let k2 = k_at(kb + d + 2u * SEG, ke);
        let k3 = k_at(kb + d + 3u * SEG, ke);
        let k4 = k_at(kb + d + 4u * SEG, ke);
        let k5 = k_at(kb + d + 5u * SEG, ke);
        let k6 = k_at(kb + d + 6u * SEG, ke);
        let k7 = k_at(kb + d + 7u * SEG, ke);
        let k8 = k_at(kb + d + 8u * SEG, ke);
        let k9 = k_at(kb + d + 9u * SEG, ke);
        let k10 = k_at(kb + d + 10u * SEG, ke);
        let k11 = k_at(kb + d + 11u * SEG, ke);
        let k12 = k_at(kb + d + 12u * SEG, ke);
        let k13 = k_at(kb + d + 13u * SEG, ke);
        let k14 = k_at(kb + d + 14u * SEG, ke);
        let k15 = k_at(kb + d + 15u * SEG, ke);
        dot += q_at(qb + d, qe) * k0;
        dot += q_at(qb + d + SEG, qe) * k1;
        dot += q_at(qb + d + 2u * SEG, qe) * k2;
        dot += q_at(qb + d + 3u * SEG, qe) * k3;
        dot += q_at(qb + d + 4u * SEG, qe) * k4;
        dot += q_at(qb + d + 5u * SEG, qe) * k5;
        dot += q_at(qb + d + 6u * SEG, qe) * k6;
        dot += q_at(qb + d + 7u * SEG, qe) * k7;
        dot += q_at(qb + d + 8u * SEG, qe) * k8;
        dot += q_at(qb + d + 9u * SEG, qe) * k9;
        dot += q_at(qb + d + 10u * SEG, qe) * k10;
        dot += q_at(qb + d + 11u * SEG, qe) * k11;
        dot += q_at(qb + d + 12u * SEG, qe) * k12;
        dot += q_at(qb + d + 13u * SEG, qe) * k13;
        dot += q_at(qb + d + 14u * SEG, qe) * k14;
        dot += q_at(qb + d + 15u * SEG, qe) * k15;
    }
    return dot;
}

// Σ scores[sb + t] · v[cb + t·dim + d] over t = first, first + step, ... below len, sixteen
// positions' loads issued before any is added.
fn weighted_v(sb: u32, cb: u32, d: u32, first: u32, step: u32, len: u32) -> f32 {
    var acc = 0.0;
    for (var t = first; t < len; t += 16u * step) {
        let v0 = v_at(cb + t * p.dim + d, t < len);
        let v1 = v_at(cb + (t + step) * p.dim + d, t + step < len);
        let v2 = v_at(cb + (t + 2u * step) * p.dim + d, t + 2u * step < len);
        let v3 = v_at(cb + (t + 3u * step) * p.dim + d, t + 3u * step < len);
        let v4 = v_at(cb + (t + 4u * step) * p.dim + d, t + 4u * step < len);
        let v5 = v_at(cb + (t + 5u * step) * p.dim + d, t + 5u * step < len);
        let v6 = v_at(cb + (t + 6u * step) * p.dim + d, t + 6u * step < len);
        let v7 = v_at(cb + (t + 7u * step) * p.dim + d, t + 7u * step < len);
        let v8 = v_at(cb + (t + 8u * step) * p.dim + d, t + 8u * step < len);
        let v9 = v_at(cb + (t + 9u * step) * p.dim + d, t + 9u * step < len);
        let v10 = v_at(cb + (t + 10u * step) * p.dim + d, t + 10u * step < len);
        let v11 = v_at(cb + (t + 11u * step) * p.dim + d, t + 11u * step < len);
        let v12 = v_at(cb + (t + 12u * step) * p.dim + d, t + 12u * step < len);
        let v13 = v_at(cb + (t + 13u * step) * p.dim + d, t + 13u * step < len);
        let v14 = v_at(cb + (t + 14u * step) * p.dim + d, t + 14u * step < len);
        let v15 = v_at(cb + (t + 15u * step) * p.dim + d, t + 15u * step < len);
        acc += s_at(sb + t, t < len) * v0;
        acc += s_at(sb + t + step, t + step < len) * v1;
        acc += s_at(sb + t + 2u * step, t + 2u * step < len) * v2;
        acc += s_at(sb + t + 3u * step, t + 3u * step < len) * v3;
        acc += s_at(sb + t + 4u * step, t + 4u * step < len) * v4;
        acc += s_at(sb + t + 5u * step, t + 5u * step < len) * v5;
        acc += s_at(sb + t + 6u * step, t + 6u * step < len) * v6;
        acc += s_at(sb + t + 7u * step, t + 7u * step < len) * v7;
        acc += s_at(sb + t + 8u * step, t + 8u * step < len) * v8;
        acc += s_at(sb + t + 9u * step, t + 9u * step < len) * v9;
        acc += s_at(sb + t + 10u * step, t + 10u * step < len) * v10;
        acc += s_at(sb + t + 11u * step, t + 11u * step < len) * v11;
        acc += s_at(sb + t + 12u * step, t + 12u * step < len) * v12;
        acc += s_at(sb + t + 13u * step, t + 13u * step < len) * v13;
        acc += s_at(sb + t + 14u * step, t + 14u * step < len) * v14;
        acc += s_at(sb + t + 15u * step, t + 15u * step < len) * v15;
    }
    return acc;
}

// Query head h's attention over positions start..end (end <= the cache's length, start < end):
// the scores of those positions into `scores`, their softmax against their own maximum `mx`
// (exp(s - mx), summed into `total`), and for each dimension d the weighted sum `o` of V,
// handed to the includer's `emit(h, d, o, total)`; thread 0 also calls `emit_stats(h, mx,
// total)`. Every thread of the workgroup must call it (barriers).
fn attend(h: u32, start: u32, end: u32, lid: u32) {
    let kv = h / p.group;
    let qb = h * p.dim;
    let cb = kv * p.max_seq * p.dim;
    let sb = h * p.max_seq;

    // Scores and their maximum: PASS positions at a time, each over SEG threads.
    let slot = lid / SEG;
    let seg = lid % SEG;
    var m = -3.4e38;
    for (var base = start; base < end; base += PASS) {
        let t = base + slot;
        var part = 0.0;
        if (t < end) {
            part = score_part(qb, cb + t * p.dim, seg);
        }
        red[lid] = part;
        workgroupBarrier();
        if (seg == 0u && t < end) {
            var dot = 0.0;
            for (var j = 0u; j < SEG; j++) {
                dot += red[lid + j];
            }
            let s = dot * p.scale;
            scores[sb + t] = s;
            m = max(m, s);
        }
        workgroupBarrier();
    }
    // The scores were written by other threads than the ones that read them next.
    storageBarrier();
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
    for (var t = start + lid; t < end; t += 256u) {
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
    let total = red[0];
    if (lid == 0u) {
        emit_stats(h, mx, total);
    }
    // Make every thread's exp() writes to `scores` visible before they are read across threads,
    // and let every thread read the sum before `red` is used again.
    storageBarrier();
    workgroupBarrier();

    // Weighted sum of V.
    let ways = 256u / p.dim;
    if (ways >= 2u) {
        // `ways` threads per dimension, each every ways-th position; their sums meet in order.
        let d = lid % p.dim;
        let way = lid / p.dim;
        var acc = 0.0;
        if (way < ways) {
            acc = weighted_v(sb, cb, d, start + way, ways, end);
        }
        red[lid] = acc;
        workgroupBarrier();
        if (way == 0u) {
            var o = 0.0;
            for (var j = 0u; j < ways; j++) {
                o += red[d + j * p.dim];
            }
            emit(h, d, o, total);
        }
    } else {
        // One dimension per thread, positions in order.
        for (var d = lid; d < p.dim; d += 256u) {
            emit(h, d, weighted_v(sb, cb, d, start, 1u, end), total);
        }
    }
}
