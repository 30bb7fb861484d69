//! [`Generation`]: a prompt through a loaded [`Decoder`], then tokens as an iterator, each
//! chosen from the step's logits by a [`Sampler`] until a stop token or the budget.

use super::sampler::{Sampler, Sampling};
use crate::error::{Error, Result};
use crate::tp::Decoder;

/// The tokens a decoder generates after a prompt: `next()` runs one step and yields its token.
/// Ends after a stop token (not yielded) or `max_tokens` tokens; an error ends it too.
pub struct Generation<'a> {
    decoder: &'a mut Decoder,
    sampler: Sampler,
    stops: Vec<u32>,
    max_tokens: usize,
    produced: usize,
    /// The token the next step embeds (the one yielded last).
    pending: Option<u32>,
    finished: bool,
}

impl<'a> Generation<'a> {
    /// Runs `prompt` through `decoder` from its current position — all but the last token as
    /// a batch ([`Decoder::prefill`]; one step per token where the decoder cannot take one,
    /// [`Decoder::prefill_unsupported`]), then the last token's step — and returns the tokens
    /// that follow. Checked first: a prompt of at least one
    /// token, each in the vocabulary, the sampling settings, and room in the KV cache for the
    /// prompt and `max_tokens`.
    pub fn new(
        decoder: &'a mut Decoder,
        prompt: &[u32],
        sampling: Sampling,
        stops: &[u32],
        max_tokens: usize,
    ) -> Result<Self> {
        let sampler = Sampler::new(sampling)?;
        if prompt.is_empty() {
            return Err(Error::InvalidArgument("the prompt has no tokens".into()));
        }
        decoder.check_tokens("prompt token", prompt)?;
        // Steps: the prompt's, then one per generated token but the last.
        let steps = prompt.len() + max_tokens.saturating_sub(1);
        let room = decoder.cfg.max_seq.saturating_sub(decoder.position());
        if steps > room {
            return Err(Error::InvalidArgument(format!(
                "{} prompt tokens and {max_tokens} more need {steps} positions; the KV cache has {room} left of {}",
                prompt.len(),
                decoder.cfg.max_seq
            )));
        }
        let (last, rest) = prompt.split_last().expect("checked not empty");
        if decoder.prefill_unsupported().is_none() {
            // All but the last token as a batch; the last one's step gives the logits.
            decoder.prefill(rest)?;
        } else {
            // Two steps in flight at most: each wait covers at most two steps' work.
            let mut previous = None;
            for &t in rest {
                decoder.set_token(t)?;
                decoder.step_in_flight(&mut previous)?;
            }
        }
        decoder.set_token(*last)?;
        decoder.step()?;
        Ok(Self {
            decoder,
            sampler,
            stops: stops.to_vec(),
            max_tokens,
            produced: 0,
            pending: None,
            finished: max_tokens == 0,
        })
    }

    /// Tokens yielded so far.
    pub fn produced(&self) -> usize {
        self.produced
    }

    fn advance(&mut self) -> Result<Option<u32>> {
        if let Some(t) = self.pending.take() {
            self.decoder.set_token(t)?;
            self.decoder.step()?;
        }
        let token = self.sampler.sample(&self.decoder.logits()?)?;
        if self.stops.contains(&token) {
            return Ok(None);
        }
        self.produced += 1;
        if self.produced < self.max_tokens {
            self.pending = Some(token);
        } else {
            self.finished = true;
        }
        Ok(Some(token))
    }
}

impl Iterator for Generation<'_> {
    type Item = Result<u32>;

    fn next(&mut self) -> Option<Result<u32>> {
        if self.finished {
            return None;
        }
        match self.advance() {
            Ok(Some(t)) => Some(Ok(t)),
            Ok(None) => {
                self.finished = true;
                None
            }
            Err(e) => {
                self.finished = true;
                Some(Err(e))
            }
        }
    }
}
