//! The next token from a step's logits: greedy, or drawn from the softmax at a temperature,
//! restricted to the `top_k` most likely tokens and to the smallest set whose probability
//! reaches `top_p` (nucleus sampling), with a seeded random stream so that a run repeats.
//!
//! The draw is made on the host over the logits read back (one `[vocab]` f32 read per token).
//! Its probabilities are computed in f64 from the largest logit down, so that no exponential
//! overflows; a member split changes the logits by at most the decoder's rounding, which moves
//! a draw only when it falls within that distance of a boundary between two tokens.

use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::error::{Error, Result};

/// How the next token is chosen.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sampling {
    /// 0: greedy (the largest logit, the lowest id among equals); above 0, the softmax of
    /// `logits / temperature`.
    pub temperature: f32,
    /// Keep only the `top_k` most likely tokens (0: all).
    pub top_k: usize,
    /// Keep the most likely tokens whose probabilities first sum to at least `top_p` (1: all).
    pub top_p: f32,
    /// The random stream's seed.
    pub seed: u64,
}

impl Sampling {
    /// The largest logit every time.
    pub fn greedy() -> Self {
        Self { temperature: 0.0, top_k: 0, top_p: 1.0, seed: 0 }
    }

    /// Checks the settings: a finite temperature ≥ 0 and `top_p` in (0, 1].
    pub fn validate(&self) -> Result<()> {
        if !(self.temperature.is_finite() && self.temperature >= 0.0) {
            return Err(Error::InvalidArgument(format!(
                "temperature {}: a finite value of 0 (greedy) or more",
                self.temperature
            )));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(Error::InvalidArgument(format!("top_p {}: a value in (0, 1]", self.top_p)));
        }
        Ok(())
    }
}

impl Default for Sampling {
    fn default() -> Self {
        Self::greedy()
    }
}

/// Chooses tokens from logits as a [`Sampling`] says; its random stream advances with each
/// draw, so the same settings and logits give the same tokens.
#[derive(Debug, Clone)]
pub struct Sampler {
    sampling: Sampling,
    rng: ChaCha8Rng,
}

impl Sampler {
    /// A sampler of `sampling`, checked.
    pub fn new(sampling: Sampling) -> Result<Self> {
        sampling.validate()?;
        Ok(Self { sampling, rng: ChaCha8Rng::seed_from_u64(sampling.seed) })
    }

    /// Its settings.
    pub fn sampling(&self) -> &Sampling {
        &self.sampling
    }

    /// The next token of `logits`; an error for an empty vector or one holding NaN or +∞.
    pub fn sample(&mut self, logits: &[f32]) -> Result<u32> {
        if logits.is_empty() {
            return Err(Error::InvalidArgument("sampling from no logits".into()));
        }
        if let Some(i) = logits.iter().position(|x| x.is_nan() || *x == f32::INFINITY) {
            return Err(Error::InvalidArgument(format!(
                "logit {i} is {}: the step's values are broken",
                logits[i]
            )));
        }
        if logits.iter().all(|&x| x == f32::NEG_INFINITY) {
            return Err(Error::InvalidArgument("every logit is −∞: no token can be drawn".into()));
        }
        let greedy = self.sampling.temperature == 0.0 || self.sampling.top_k == 1;
        if greedy {
            return Ok(argmax(logits));
        }
        // Candidates, most likely first (ties by id): the top_k, or every token.
        let mut ids: Vec<u32> = (0..logits.len() as u32).collect();
        let by_logit = |a: &u32, b: &u32| logits[*b as usize].total_cmp(&logits[*a as usize]).then(a.cmp(b));
        let k = self.sampling.top_k;
        if k > 0 && k < ids.len() {
            ids.select_nth_unstable_by(k - 1, by_logit);
            ids.truncate(k);
        }
        ids.sort_unstable_by(by_logit);
        let t = f64::from(self.sampling.temperature);
        let top = f64::from(logits[ids[0] as usize]);
        let mut p: Vec<f64> =
            ids.iter().map(|&i| ((f64::from(logits[i as usize]) - top) / t).exp()).collect();
        let total: f64 = p.iter().sum();
        // The nucleus: the shortest prefix whose probability reaches top_p.
        let top_p = f64::from(self.sampling.top_p);
        if top_p < 1.0 {
            let mut sum = 0.0;
            let mut keep = p.len();
            for (n, q) in p.iter().enumerate() {
                sum += q / total;
                if sum >= top_p {
                    keep = n + 1;
                    break;
                }
            }
            p.truncate(keep);
        }
        let total: f64 = p.iter().sum();
        // A uniform draw in [0, total): 53 random bits.
        let u = (self.rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64) * total;
        let mut acc = 0.0;
        for (n, q) in p.iter().enumerate() {
            acc += q;
            if u < acc {
                return Ok(ids[n]);
            }
        }
        Ok(ids[p.len() - 1])
    }
}

/// The largest value's index, the lowest among equals (as the decoder's own greedy kernels).
pub(crate) fn argmax(v: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &x) in v.iter().enumerate() {
        if x > v[best] {
            best = i;
        }
    }
    best as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn softmax(logits: &[f32], t: f64) -> Vec<f64> {
        let m = logits.iter().fold(f64::NEG_INFINITY, |a, &b| a.max(f64::from(b)));
        let e: Vec<f64> = logits.iter().map(|&x| ((f64::from(x) - m) / t).exp()).collect();
        let s: f64 = e.iter().sum();
        e.into_iter().map(|x| x / s).collect()
    }

    /// Random logits of a few scales, never all equal.
    fn logits(n: usize, seed: u64) -> Vec<f32> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        (0..n).map(|_| ((rng.next_u32() % 4001) as f32 - 2000.0) / 700.0).collect()
    }

    /// Draw frequencies against the softmax: each within 5 standard deviations of a binomial.
    fn check_frequencies(logits: &[f32], sampling: Sampling, want: &[f64], draws: usize) {
        let mut s = Sampler::new(sampling).unwrap();
        let mut count = vec![0usize; logits.len()];
        for _ in 0..draws {
            count[s.sample(logits).unwrap() as usize] += 1;
        }
        for (i, (&c, &p)) in count.iter().zip(want).enumerate() {
            let sd = (draws as f64 * p * (1.0 - p)).sqrt();
            let err = (c as f64 - draws as f64 * p).abs();
            assert!(
                err <= 5.0 * sd + 1.0,
                "token {i}: {c} draws of {draws}, expected {:.1} (sd {sd:.1})",
                draws as f64 * p
            );
        }
    }

    #[test]
    fn draws_follow_the_softmax_at_each_temperature() {
        for (seed, t) in [(1, 1.0f32), (2, 0.5), (3, 2.0)] {
            let l = logits(13, seed);
            let sampling = Sampling { temperature: t, top_k: 0, top_p: 1.0, seed };
            check_frequencies(&l, sampling, &softmax(&l, f64::from(t)), 40_000);
        }
    }

    #[test]
    fn top_k_and_top_p_restrict_to_the_most_likely() {
        let l = logits(11, 9);
        let p = softmax(&l, 1.0);
        let mut order: Vec<usize> = (0..l.len()).collect();
        order.sort_by(|&a, &b| l[b].total_cmp(&l[a]).then(a.cmp(&b)));
        // top_k = 3: the softmax renormalised over the three largest.
        let mut want = vec![0.0; l.len()];
        let s3: f64 = order[..3].iter().map(|&i| p[i]).sum();
        order[..3].iter().for_each(|&i| want[i] = p[i] / s3);
        check_frequencies(&l, Sampling { temperature: 1.0, top_k: 3, top_p: 1.0, seed: 4 }, &want, 30_000);
        // top_p: the shortest prefix reaching it.
        let top_p = 0.8f32;
        let (mut sum, mut n) = (0.0, 0);
        while sum < f64::from(top_p) {
            sum += p[order[n]];
            n += 1;
        }
        let mut want = vec![0.0; l.len()];
        order[..n].iter().for_each(|&i| want[i] = p[i] / sum);
        check_frequencies(&l, Sampling { temperature: 1.0, top_k: 0, top_p, seed: 5 }, &want, 30_000);
    }

    #[test]
    fn greedy_and_degenerate_settings_choose_the_largest() {
        let l = logits(1000, 3);
        let best = argmax(&l);
        for sampling in [
            Sampling::greedy(),
            Sampling { temperature: 1.0, top_k: 1, top_p: 1.0, seed: 1 },
            Sampling { temperature: 0.7, top_k: 0, top_p: 1e-6, seed: 2 },
        ] {
            let mut s = Sampler::new(sampling).unwrap();
            for _ in 0..20 {
                assert_eq!(s.sample(&l).unwrap(), best, "{sampling:?}");
            }
        }
        // Ties: the lowest id.
        assert_eq!(argmax(&[1.0, 3.0, 3.0, -1.0]), 1);
    }

    #[test]
    fn a_seed_repeats_and_another_differs() {
        let l = logits(500, 8);
        let run = |seed| {
            let mut s = Sampler::new(Sampling { temperature: 1.5, top_k: 50, top_p: 0.95, seed }).unwrap();
            (0..64).map(|_| s.sample(&l).unwrap()).collect::<Vec<_>>()
        };
        assert_eq!(run(11), run(11));
        assert_ne!(run(11), run(12));
    }

    #[test]
    fn bad_settings_and_logits_are_errors() {
        for bad in [
            Sampling { temperature: -1.0, ..Sampling::greedy() },
            Sampling { temperature: f32::NAN, ..Sampling::greedy() },
            Sampling { top_p: 0.0, ..Sampling::greedy() },
            Sampling { top_p: 1.5, ..Sampling::greedy() },
        ] {
            assert!(Sampler::new(bad).is_err(), "{bad:?}");
        }
        let mut s = Sampler::new(Sampling { temperature: 1.0, ..Sampling::greedy() }).unwrap();
        assert!(s.sample(&[]).is_err());
        assert!(s.sample(&[0.0, f32::NAN]).is_err());
        assert!(s.sample(&[0.0, f32::INFINITY]).is_err());
        // −∞ is a token that is never drawn, not an error.
        for _ in 0..50 {
            assert_eq!(s.sample(&[f32::NEG_INFINITY, 0.0]).unwrap(), 1);
        }
    }
}
