//! The random numbers of a draw, keyed by (seed, position, token id): the host's twin of
//! `wgsl/include/sample_draw.wgsl`, bit for bit up to the logarithms (which the host takes in
//! f64 and a device in f32).

/// Jarzynski and Olano's PCG hash ("Hash Functions for GPU Rendering", JCGT 2020).
pub(crate) fn pcg_hash(v: u32) -> u32 {
    let state = v.wrapping_mul(747_796_405).wrapping_add(2_891_336_453);
    let word = ((state >> ((state >> 28) + 4)) ^ state).wrapping_mul(277_803_737);
    (word >> 22) ^ word
}

/// The 32-bit key of a 64-bit seed, which the kernels take in place of the seed.
pub(crate) fn stream_key(seed: u64) -> u32 {
    pcg_hash(seed as u32 ^ pcg_hash((seed >> 32) as u32))
}

/// `u` in (0, 1) with 23 random bits for token `id` at `position`: exactly the f32 the kernels
/// compute, `((h >> 9) + 0.5) / 2^23`.
pub(crate) fn uniform_at(key: u32, position: u32, id: u32) -> f64 {
    let h = pcg_hash(id ^ pcg_hash(position ^ key));
    (f64::from(h >> 9) + 0.5) / f64::from(1u32 << 23)
}

/// The Gumbel noise `-ln(-ln u)` of token `id` at `position` (between −2.8 and 16.6: a token
/// whose `logit / T` trails the best by more than ~19 is never drawn, where the softmax gives
/// it less than 6e-9).
pub(crate) fn gumbel(key: u32, position: u32, id: u32) -> f64 {
    -(-uniform_at(key, position, id).ln()).ln()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uniform_numbers_are_in_the_open_interval_and_spread() {
        let key = stream_key(0x0123_4567_89ab_cdef);
        let (mut lo, mut hi, mut sum) = (1.0f64, 0.0f64, 0.0);
        let n = 200_000u32;
        for id in 0..n {
            let u = uniform_at(key, 7, id);
            assert!(u > 0.0 && u < 1.0);
            // Exactly an f32.
            assert_eq!(u, f64::from(u as f32));
            lo = lo.min(u);
            hi = hi.max(u);
            sum += u;
        }
        assert!(lo < 1e-4 && hi > 1.0 - 1e-4, "{lo} {hi}");
        // The mean within 5 standard deviations of 1/2 (sd of a uniform: 1/√12).
        let mean = sum / f64::from(n);
        assert!((mean - 0.5).abs() < 5.0 * (1.0 / 12f64).sqrt() / f64::from(n).sqrt(), "{mean}");
        // Neighbouring positions and seeds give other numbers.
        assert_ne!(uniform_at(key, 7, 1), uniform_at(key, 8, 1));
        assert_ne!(uniform_at(key, 7, 1), uniform_at(stream_key(1), 7, 1));
        assert_ne!(stream_key(1), stream_key(1 << 32));
    }
}
