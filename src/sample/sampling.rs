//! The settings of a draw ([`Sampling`]), checked, and how the decoder's kernels take them
//! ([`DeviceSampling`]).

use crate::error::{Error, Result};

use super::draw::stream_key;

/// The most candidates a member keeps on the device for a top-k draw (`wgsl/select_sampled.wgsl`
/// holds them in registers).
pub(crate) const MAX_CANDIDATES: usize = 64;

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

impl Sampling {
    /// The words the decoder's sampling kernels read for these settings over a vocabulary of
    /// `vocab` tokens ([`crate::tp::TransformerOps::sample_candidates`] and
    /// [`crate::tp::TransformerOps::select_sampled`] take them as a u32 tensor): greedy where
    /// the temperature is 0 or `top_k` 1, a draw from every token where `top_k` is 0 (or the
    /// whole vocabulary) and `top_p` 1, else a top-k draw (cut to the nucleus where `top_p` <
    /// 1). The seed enters hashed ([`Sampler::sample_at`] draws the same tokens).
    ///
    /// [`Sampler::sample_at`]: super::Sampler::sample_at
    pub fn device_settings(&self, vocab: usize) -> [u32; 8] {
        DeviceSampling::of(self, vocab).words(self)
    }
}

impl Default for Sampling {
    fn default() -> Self {
        Self::greedy()
    }
}

/// A draw as the decoder's kernels make it (`wgsl/sample_candidates.wgsl`, then
/// `wgsl/select_sampled.wgsl`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DeviceSampling {
    /// Each member's largest logit; the largest of those.
    Greedy,
    /// Each member's largest perturbed value over its whole slice; the largest of those.
    EveryToken,
    /// Each member's `k` largest logits; of the `k` largest of those (cut to the nucleus when
    /// `nucleus`), the largest perturbed value.
    TopK { k: usize, nucleus: bool },
}

impl DeviceSampling {
    /// How the kernels draw as `s` says over a vocabulary of `vocab` tokens.
    pub(crate) fn of(s: &Sampling, vocab: usize) -> Self {
        let top_k = if s.top_k >= vocab { 0 } else { s.top_k };
        if s.temperature == 0.0 || top_k == 1 || !(1.0 / s.temperature).is_finite() {
            Self::Greedy
        } else if top_k == 0 && s.top_p >= 1.0 {
            Self::EveryToken
        } else {
            // top_k 0 with a nucleus: every token is a candidate (the decoder refuses this
            // on the devices, which keep at most MAX_CANDIDATES).
            Self::TopK { k: if top_k == 0 { vocab } else { top_k }, nucleus: s.top_p < 1.0 }
        }
    }

    /// Candidates each member keeps.
    pub(crate) fn candidates(&self) -> usize {
        match self {
            Self::Greedy | Self::EveryToken => 1,
            Self::TopK { k, .. } => *k,
        }
    }

    /// The words the kernels read (`wgsl/include/sample_draw.wgsl` says which is which).
    pub(crate) fn words(&self, s: &Sampling) -> [u32; 8] {
        let (flags, inv_t) = match self {
            Self::Greedy => (0, 1.0),
            Self::EveryToken => (3, 1.0 / s.temperature),
            Self::TopK { .. } => (1, 1.0 / s.temperature),
        };
        let top_p = if matches!(self, Self::TopK { nucleus: true, .. }) { s.top_p } else { 1.0 };
        let k = self.candidates() as u32;
        [flags, k, stream_key(s.seed), inv_t.to_bits(), top_p.to_bits(), 0, 0, 0]
    }
}
