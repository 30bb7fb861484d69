// The draw's settings and its random numbers, shared by sample_candidates and select_sampled.
//
// The settings sit in a small storage buffer (not immediates) so that a recorded decode step
// follows a change of settings without being recorded again: words
//   0 flags: bit 0 noise (temperature > 0), bit 1 rank the vocabulary by the perturbed value
//     (a draw from every token: each member's best perturbed value is its candidate)
//   1 k: candidates per member (1..=the tensor's room)
//   2 key: the seed's hash (the host's `stream_key`)
//   3 inv_t: 1 / temperature, f32 bits
//   4 top_p: f32 bits (1: off)
//
// A draw is the Gumbel-max trick: the token with the largest z = logit / T + g, where g =
// -ln(-ln(u)) and u is a uniform number hashed from (key, position, token id). That is an exact
// draw from softmax(logits / T) over whichever set of tokens the maximum is taken, so each
// member perturbs only its own tokens, and the members then compare values exactly.

struct Draw {
    noise: bool,
    by_z: bool,
    k: u32,
    key: u32,
    inv_t: f32,
    top_p: f32,
}

fn read_draw(w0: u32, w1: u32, w2: u32, w3: u32, w4: u32) -> Draw {
    return Draw((w0 & 1u) != 0u, (w0 & 2u) != 0u, w1, w2, bitcast<f32>(w3), bitcast<f32>(w4));
}

// Jarzynski and Olano's PCG hash (JCGT 2020): one 32-bit word to one.
fn pcg_hash(v: u32) -> u32 {
    let state = v * 747796405u + 2891336453u;
    let word = ((state >> ((state >> 28u) + 4u)) ^ state) * 277803737u;
    return (word >> 22u) ^ word;
}

// u in (0, 1) with 23 random bits, exact in f32: (h >> 9 + 0.5) / 2^23.
fn uniform_at(key: u32, position: u32, id: u32) -> f32 {
    let h = pcg_hash(id ^ pcg_hash(position ^ key));
    return (f32(h >> 9u) + 0.5) * (1.0 / 8388608.0);
}

// -ln(u) for u in (0, 1), to a few ulps of itself. A device's ln may be accurate only to an
// absolute 2^-21 for arguments in [0.5, 2] (Vulkan's bound, NVIDIA's behaviour), which for u
// near 1 — where -ln(u) is small and the token's noise largest — is no precision at all. So
// above 1/2 it is 2 atanh(w / (2 - w)) with w = 1 - u (exact) as its series: s <= 1/3, and the
// first term left out is below 2^-26 of the sum.
fn neg_ln(u: f32) -> f32 {
    if (u < 0.5) {
        return -log(u);
    }
    let w = 1.0 - u;
    let s = w / (2.0 - w);
    let s2 = s * s;
    let series = 1.0 + s2 * (1.0 / 3.0 + s2 * (1.0 / 5.0 + s2 * (1.0 / 7.0 + s2 * (1.0 / 9.0
        + s2 * (1.0 / 11.0 + s2 * (1.0 / 13.0))))));
    return 2.0 * s * series;
}

// z = logit / T + g for token `id` at `position`, g = -ln(-ln u) (its error absolute, a few
// 2^-21 at most); without noise the logit itself.
fn perturbed(d: Draw, logit: f32, position: u32, id: u32) -> f32 {
    if (!d.noise) {
        return logit;
    }
    let g = -log(neg_ln(uniform_at(d.key, position, id)));
    return logit * d.inv_t + g;
}

// Whether (v, i) comes before (bv, bi): larger value first, then lower id.
fn before(v: f32, i: u32, bv: f32, bi: u32) -> bool {
    return v > bv || (v == bv && i < bi);
}
