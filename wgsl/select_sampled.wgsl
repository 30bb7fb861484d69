// select_sampled: the next token from every member's candidates (sample_candidates' triples,
// gathered): the k best of them by (logit, then lower id) — or by perturbed value, drawing
// from every token — cut to the nucleus when top_p < 1 (the shortest prefix whose softmax at
// the temperature, renormalised over the k, reaches top_p), and of those the largest perturbed
// value, ties to the lowest id. Writes it to token[0] (the next step's embedding reads it) and
// to history[step + position]; with `advance`, the position counter moves on (the decoder's
// last kernel of a token). One thread: at most 64 candidates from each of at most 64 members,
// merged from the heads of the members' sorted lists.

// #include "sample_draw.wgsl"

struct SelectSampledParams {
    members: u32,
    room: u32,
    step: u32,
    advance: u32,
}

@group(0) @binding(0) var<storage, read> cand: array<f32>;
@group(0) @binding(1) var<storage, read> settings: array<u32>;
@group(0) @binding(2) var<storage, read_write> token: array<u32>;
@group(0) @binding(3) var<storage, read_write> history: array<u32>;
@group(0) @binding(4) var<storage, read_write> position: array<u32>;
var<immediate> p: SelectSampledParams;

const NONE = 0xffffffffu;

@compute @workgroup_size(1)
fn select_sampled() {
    let d = read_draw(settings[0], settings[1], settings[2], settings[3], settings[4]);
    let k = min(min(d.k, p.room), 64u);
    let members = min(p.members, 64u);
    var head: array<u32, 64>;
    var cl: array<f32, 64>;
    var cz: array<f32, 64>;
    var ci: array<u32, 64>;
    var count = 0u;
    for (var r = 0u; r < k; r++) {
        var bm = NONE;
        var bv = 0.0;
        var bi = NONE;
        for (var m = 0u; m < members; m++) {
            if (head[m] >= k) {
                continue;
            }
            let e = 3u * (m * p.room + head[m]);
            let id = cand[e + 1u];
            if (id < 0.0) {
                continue;
            }
            let v = select(cand[e], cand[e + 2u], d.by_z);
            let i = u32(id);
            if (bm == NONE || before(v, i, bv, bi)) {
                bm = m;
                bv = v;
                bi = i;
            }
        }
        if (bm == NONE) {
            break;
        }
        let e = 3u * (bm * p.room + head[bm]);
        cl[count] = cand[e];
        cz[count] = cand[e + 2u];
        ci[count] = bi;
        count++;
        head[bm]++;
    }
    // The nucleus: probabilities relative to the first (the largest logit).
    var keep = count;
    if (d.noise && !d.by_z && d.top_p < 1.0 && count > 1u) {
        var total = 0.0;
        for (var j = 0u; j < count; j++) {
            total += exp((cl[j] - cl[0]) * d.inv_t);
        }
        var acc = 0.0;
        for (var j = 0u; j < count; j++) {
            acc += exp((cl[j] - cl[0]) * d.inv_t);
            if (acc >= d.top_p * total) {
                keep = j + 1u;
                break;
            }
        }
    }
    var t = 0u;
    if (count > 0u) {
        var bz = cz[0];
        t = ci[0];
        for (var j = 1u; j < keep; j++) {
            if (before(cz[j], ci[j], bz, t)) {
                bz = cz[j];
                t = ci[j];
            }
        }
    }
    token[0] = t;
    // The step is p.step plus the counter; past the history (the host checks first) it is
    // not stored.
    let step = p.step + position[0];
    if (step < arrayLength(&history)) {
        history[step] = t;
    }
    if (p.advance != 0u) {
        position[0] = position[0] + 1u;
    }
}
