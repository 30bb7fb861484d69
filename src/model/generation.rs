//! [`Generation`]: a prompt through a loaded [`Decoder`], then tokens as an iterator, each
//! drawn on the devices ([`Decoder::set_sampling`]) — or, where they cannot draw as asked,
//! by a [`Sampler`] from the step's logits read back — until a stop token or the budget.

use crate::error::{Error, Result};
use crate::sample::{Sampler, Sampling};
use crate::tp::Decoder;

/// The tokens a decoder generates after a prompt: `next()` runs one step and yields its token.
/// Ends after a stop token (not yielded) or `max_tokens` tokens; an error ends it too.
pub struct Generation<'a> {
    decoder: &'a mut Decoder,
    /// The host's draw, where the devices cannot make it (and why not).
    on_host: Option<(Sampler, String)>,
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
        sampling.validate()?;
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
        // The devices draw where they can; else they choose greedily and the host draws.
        let on_host = match decoder.device_sampling_unsupported(&sampling) {
            None => {
                decoder.set_sampling(sampling)?;
                None
            }
            Some(why) if !decoder.holds_every_logit() => {
                return Err(Error::Unsupported(format!(
                    "drawing on the devices: {why}; and the host cannot draw instead, holding only this process's logits"
                )))
            }
            Some(why) => {
                decoder.set_sampling(Sampling::greedy())?;
                Some((Sampler::new(sampling)?, why))
            }
        };
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
            on_host,
            stops: stops.to_vec(),
            max_tokens,
            produced: 0,
            pending: None,
            finished: max_tokens == 0,
        })
    }

    /// Why the tokens are drawn on the host (`None`: on the devices).
    pub fn drawn_on_host(&self) -> Option<&str> {
        self.on_host.as_ref().map(|(_, why)| why.as_str())
    }

    /// Tokens yielded so far.
    pub fn produced(&self) -> usize {
        self.produced
    }

    fn advance(&mut self) -> Result<Option<u32>> {
        if let Some(t) = self.pending.take() {
            // The devices embed the token they drew; the host's draw is written over it.
            if self.on_host.is_some() {
                self.decoder.set_token(t)?;
            }
            self.decoder.step()?;
        }
        // The step's logits were computed at the position before the one it advanced to.
        let token = match &self.on_host {
            None => self.decoder.next_token()?,
            Some((sampler, _)) => sampler.sample_at(&self.decoder.logits()?, self.decoder.position() - 1)?,
        };
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
