// sample_merge: the second half of a member's candidates for the next token: the k best of the
// `lists` lists sample_chunks wrote (entries w * room .. w * room + k of `chunks`, each sorted,
// ids -1 past their tokens), by (logit, then lower id) — or by perturbed value, drawing from
// every token — as (logit, id, z) triples into entries slot * room .. (slot + 1) * room of
// `out` (ids -1 past the candidates). Each member writes its own entries of a zeroed tensor;
// an all-reduce (sum) then gives every member every member's candidates exactly. k passes,
// each taking the best after the one before. One workgroup.

// #include "sample_draw.wgsl"

struct SampleMergeParams {
    lists: u32,
    slot: u32,
    room: u32,
    _pad: u32,
}

@group(0) @binding(0) var<storage, read> chunks: array<f32>;
@group(0) @binding(1) var<storage, read> settings: array<u32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
var<immediate> p: SampleMergeParams;

const NONE = 0xffffffffu;

var<workgroup> best_v: array<f32, 256>;
var<workgroup> best_i: array<u32, 256>;
var<workgroup> best_e: array<u32, 256>;
var<workgroup> shared_k: u32;

@compute @workgroup_size(256)
fn sample_merge(@builtin(local_invocation_index) lid: u32) {
    let d = read_draw(settings[0], settings[1], settings[2], settings[3], settings[4]);
    if (lid == 0u) {
        shared_k = min(d.k, p.room);
    }
    let k = workgroupUniformLoad(&shared_k);
    let entries = p.lists * k;
    var pv = 0.0;
    var pi = NONE;
    for (var r = 0u; r < k; r++) {
        var bv = 0.0;
        var bi = NONE;
        var be = 0u;
        for (var q = lid; q < entries; q += 256u) {
            let e = 3u * ((q / k) * p.room + q % k);
            let idf = chunks[e + 1u];
            if (idf < 0.0) {
                continue;
            }
            let v = select(chunks[e], chunks[e + 2u], d.by_z);
            let i = u32(idf);
            let after = pi == NONE || before(pv, pi, v, i);
            if (after && (bi == NONE || before(v, i, bv, bi))) {
                bv = v;
                bi = i;
                be = e;
            }
        }
        best_v[lid] = bv;
        best_i[lid] = bi;
        best_e[lid] = be;
        workgroupBarrier();
        for (var s = 128u; s > 0u; s >>= 1u) {
            if (lid < s) {
                let ov = best_v[lid + s];
                let oi = best_i[lid + s];
                if (oi != NONE && (best_i[lid] == NONE || before(ov, oi, best_v[lid], best_i[lid]))) {
                    best_v[lid] = ov;
                    best_i[lid] = oi;
                    best_e[lid] = best_e[lid + s];
                }
            }
            workgroupBarrier();
        }
        let wv = best_v[0];
        let wi = best_i[0];
        let we = best_e[0];
        workgroupBarrier();
        if (wi != NONE) {
            pv = wv;
            pi = wi;
        }
        if (lid == 0u) {
            let o = 3u * (p.slot * p.room + r);
            if (wi == NONE) {
                out[o] = 0.0;
                out[o + 1u] = -1.0;
                out[o + 2u] = 0.0;
            } else {
                out[o] = chunks[we];
                out[o + 1u] = chunks[we + 1u];
                out[o + 2u] = chunks[we + 2u];
            }
        }
    }
    for (var r = k + lid; r < p.room; r += 256u) {
        let o = 3u * (p.slot * p.room + r);
        out[o] = 0.0;
        out[o + 1u] = -1.0;
        out[o + 2u] = 0.0;
    }
}
