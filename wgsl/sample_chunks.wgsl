// sample_chunks: the first half of a member's candidates for the next token. Workgroup w takes
// ids w * 2048 .. (w + 1) * 2048 of the member's slice of the logits (n of them, global ids from
// index_offset on), 8 a thread held in registers, and writes its k best by (logit, then lower
// id) — or, drawing from every token, its one best perturbed value — as (logit, id, z) triples
// into entries w * room .. w * room + k of `chunks` (ids -1 past its tokens), z the perturbed
// value (the logit itself without noise) at position step + position[0]. k passes, each taking
// the best after the one before. sample_merge then merges the workgroups' lists.

// #include "sample_draw.wgsl"

struct SampleChunksParams {
    n: u32,
    index_offset: u32,
    room: u32,
    step: u32,
}

@group(0) @binding(0) var<storage, read> logits: array<f32>;
@group(0) @binding(1) var<storage, read> settings: array<u32>;
@group(0) @binding(2) var<storage, read> position: array<u32>;
@group(0) @binding(3) var<storage, read_write> chunks: array<f32>;
var<immediate> p: SampleChunksParams;

const NONE = 0xffffffffu;
const CHUNK = 2048u;

var<workgroup> best_v: array<f32, 256>;
var<workgroup> best_i: array<u32, 256>;
var<workgroup> shared_k: u32;

@compute @workgroup_size(256)
fn sample_chunks(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let d = read_draw(settings[0], settings[1], settings[2], settings[3], settings[4]);
    let pos = p.step + position[0];
    if (lid == 0u) {
        shared_k = min(d.k, p.room);
    }
    let k = workgroupUniformLoad(&shared_k);
    let base = wg.x * CHUNK;
    // This thread's values (ranked by), ids base + lid + 256 j; NONE past the slice.
    var v: array<f32, 8>;
    var ids: array<u32, 8>;
    for (var j = 0u; j < 8u; j++) {
        let i = base + lid + 256u * j;
        ids[j] = NONE;
        v[j] = 0.0;
        if (i < p.n) {
            ids[j] = i;
            v[j] = logits[i];
            if (d.by_z) {
                v[j] = perturbed(d, v[j], pos, i + p.index_offset);
            }
        }
    }
    // The last pick (pi NONE before the first): each pass takes the best after it.
    var pv = 0.0;
    var pi = NONE;
    for (var r = 0u; r < k; r++) {
        var bv = 0.0;
        var bi = NONE;
        for (var j = 0u; j < 8u; j++) {
            let i = ids[j];
            let after = pi == NONE || before(pv, pi, v[j], i);
            if (i != NONE && after && (bi == NONE || before(v[j], i, bv, bi))) {
                bv = v[j];
                bi = i;
            }
        }
        best_v[lid] = bv;
        best_i[lid] = bi;
        workgroupBarrier();
        for (var s = 128u; s > 0u; s >>= 1u) {
            if (lid < s) {
                let ov = best_v[lid + s];
                let oi = best_i[lid + s];
                if (oi != NONE && (best_i[lid] == NONE || before(ov, oi, best_v[lid], best_i[lid]))) {
                    best_v[lid] = ov;
                    best_i[lid] = oi;
                }
            }
            workgroupBarrier();
        }
        let wv = best_v[0];
        let wi = best_i[0];
        // Every invocation has read the pick before the next pass overwrites it.
        workgroupBarrier();
        if (wi != NONE) {
            pv = wv;
            pi = wi;
        }
        if (lid == 0u) {
            let e = 3u * (wg.x * p.room + r);
            if (wi == NONE) {
                chunks[e] = 0.0;
                chunks[e + 1u] = -1.0;
                chunks[e + 2u] = 0.0;
            } else {
                let id = wi + p.index_offset;
                let l = logits[wi];
                chunks[e] = l;
                chunks[e + 1u] = f32(id);
                chunks[e + 2u] = select(perturbed(d, l, pos, id), wv, d.by_z);
            }
        }
    }
}
