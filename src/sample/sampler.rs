//! The draw on the host: the token [`DeviceSampling`] would choose, from a whole logits vector
//! read back, with the probabilities of a nucleus in f64 from the largest logit down (no
//! exponential overflows) and the perturbed values `logit / T + g` in f64.

use super::draw::{gumbel, stream_key};
use super::sampling::{DeviceSampling, Sampling};
use crate::error::{Error, Result};

/// Chooses tokens from logits as a [`Sampling`] says. A draw at a position is a function of
/// the logits, the settings and that position alone ([`Sampler::sample_at`]), the same the
/// decoder's kernels make; [`Sampler::sample`] draws at positions 0, 1, 2, … in turn.
#[derive(Debug, Clone)]
pub struct Sampler {
    sampling: Sampling,
    key: u32,
    next: u32,
}

impl Sampler {
    /// A sampler of `sampling`, checked.
    pub fn new(sampling: Sampling) -> Result<Self> {
        sampling.validate()?;
        Ok(Self { sampling, key: stream_key(sampling.seed), next: 0 })
    }

    /// Its settings.
    pub fn sampling(&self) -> &Sampling {
        &self.sampling
    }

    /// The next token of `logits`, drawn at the next of positions 0, 1, 2, …; an error for an
    /// empty vector or one holding NaN or +∞.
    pub fn sample(&mut self, logits: &[f32]) -> Result<u32> {
        let t = self.sample_at(logits, self.next as usize)?;
        self.next = self.next.wrapping_add(1);
        Ok(t)
    }

    /// The token drawn from `logits` at `position` (for a decoder, the position of the step
    /// that computed them): the largest `logit / T + g(seed, position, id)` among the top-k
    /// tokens' nucleus, ties to the lowest id; greedy at temperature 0. An error for an empty
    /// vector or one holding NaN or +∞.
    pub fn sample_at(&self, logits: &[f32], position: usize) -> Result<u32> {
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
        let draw = DeviceSampling::of(&self.sampling, logits.len());
        let mut ids: Vec<u32> = match draw {
            DeviceSampling::Greedy => return Ok(argmax(logits)),
            DeviceSampling::EveryToken => (0..logits.len() as u32).collect(),
            DeviceSampling::TopK { k, nucleus } => {
                // The k most likely, most likely first (ties by id).
                let mut ids: Vec<u32> = (0..logits.len() as u32).collect();
                let by_logit =
                    |a: &u32, b: &u32| logits[*b as usize].total_cmp(&logits[*a as usize]).then(a.cmp(b));
                if k < ids.len() {
                    ids.select_nth_unstable_by(k - 1, by_logit);
                    ids.truncate(k);
                }
                ids.sort_unstable_by(by_logit);
                if nucleus {
                    ids.truncate(self.nucleus(logits, &ids));
                }
                ids
            }
        };
        let z = |i: u32| self.perturbed(logits[i as usize], position, i);
        // The largest perturbed value, the lowest id among equals.
        ids.sort_unstable();
        let mut best = (ids[0], z(ids[0]));
        for &i in &ids[1..] {
            let zi = z(i);
            if zi > best.1 {
                best = (i, zi);
            }
        }
        Ok(best.0)
    }

    /// The value token `id` with logit `logit` competes with in a draw at `position` (the
    /// largest among the candidates wins): `logit / T + g`, the Gumbel noise `g` hashed from
    /// the seed, the position and the id. The devices compute it in f32.
    pub fn perturbed(&self, logit: f32, position: usize, id: u32) -> f64 {
        let inv_t = f64::from(1.0 / self.sampling.temperature);
        f64::from(logit) * inv_t + gumbel(self.key, position as u32, id)
    }

    /// How many of `ids` (most likely first) form the nucleus: the shortest prefix whose
    /// probability, renormalised over `ids`, reaches `top_p`.
    fn nucleus(&self, logits: &[f32], ids: &[u32]) -> usize {
        let t = f64::from(self.sampling.temperature);
        let top = f64::from(logits[ids[0] as usize]);
        let p: Vec<f64> = ids.iter().map(|&i| ((f64::from(logits[i as usize]) - top) / t).exp()).collect();
        let total: f64 = p.iter().sum();
        let top_p = f64::from(self.sampling.top_p);
        let mut sum = 0.0;
        for (n, q) in p.iter().enumerate() {
            sum += q / total;
            if sum >= top_p {
                return n + 1;
            }
        }
        p.len()
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
    use rand_chacha::rand_core::{RngCore, SeedableRng};
    use rand_chacha::ChaCha8Rng;

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
