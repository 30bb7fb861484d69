// The body of matvec_qkv_rope_store and matvec_qkv_rope_store_normed (how the work is cut: the
// former's header). The includer declares the bindings `wq`, `wk`, `wv`, `x`, `q`, `k_cache`,
// `v_cache` and `position`, `p` (q_rows, kv_rows, cols, dim, pos, max_seq, base), `NORMED` and
// `pending_scale(lid)` (NORMED: norm_pending.wgsl's, the scale of the norm x is waiting for),
// includes matvec_f16_group.wgsl, with LANES = 32 and PAIRED = true.

var<workgroup> partial: array<f32, 256>;

// The step's position: `p.pos` plus the counter `position[0]`, which the decoder's GPU work
// advances every token (so a recorded token can be replayed); 0 for a single call.
fn step_pos() -> u32 {
    return p.pos + position[0];
}

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

// The whole product for the workgroup `wid` of `nwg`, thread `lid`.
fn qkv_rope_store(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) {
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
    let scale = pending_scale(lid);
    if (lane == 0u && !second && pair < pairs) {
        var a = partial[lid];
        var b = partial[lid + LANES];
        if (NORMED) {
            a = a * scale;
            b = b * scale;
        }
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
