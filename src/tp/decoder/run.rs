//! Running a [`Decoder`]: one token's step (recorded, or replayed where it can be), the
//! token it starts from, and generation from a first token.

use super::state::{reducer, Decoder};
use crate::comm::Comm;
use crate::error::{Error, Result};
use crate::step::{capture, submit_recorded, Capture};
use crate::tensor::Tensor;
use crate::tp::block::{Step, Warm};
use crate::tp::ops::Position;
use crate::tp::residual::{AddNorm, Normed, PendingNorm};

impl Decoder {
    /// Whether steps are recorded once and then replayed: one submit of a pre-recorded command
    /// buffer per token and member, and no recording on the host. The step's commands are the
    /// same at every position: the devices keep and advance the position, and with DevicePoll
    /// the round numbers too (each replay's rounds run as the communicator's next ones). So
    /// this holds on one member, and across members with DevicePoll where a step's rounds (two
    /// per layer and the next token's) are fused and fit one ring of slot entries. HostBridge,
    /// SyncFd and Generic need the host between a round's phases: their steps are recorded.
    pub fn replays(&self) -> bool {
        let rounds = 2 * self.cfg.layers as u64 + 1;
        self.replay
            && self.remote.is_none()
            && match &self.comm {
                None => self.members.len() == 1,
                Some(c) => c.replay_fits(rounds, self.cfg.hidden),
            }
    }

    /// Turns replaying off (every step recorded anew, as profiling needs) or back on.
    pub fn set_replay(&mut self, on: bool) {
        self.replay = on;
    }

    /// Runs one decode step: embeds the current token (on the devices), runs every layer,
    /// and leaves the next token — greedy, or drawn as [`Decoder::set_sampling`] said — in
    /// every member's token buffer and in the history.
    /// Nothing waits for the GPU. Where the decoder [replays](Decoder::replays), the first
    /// step records the step once and submits it; every later step submits that recording.
    pub fn step(&mut self) -> Result<()> {
        let t0 = std::time::Instant::now();
        self.check_usable()?;
        let r = if self.pos >= self.cfg.max_seq {
            Err(Error::InvalidArgument(format!(
                "the KV cache holds {} positions; decode fewer tokens or raise max_seq",
                self.cfg.max_seq
            )))
        } else if self.replays() {
            self.replay_step()
        } else {
            // A step that fails half-way leaves some of its commands recorded (with some
            // members' position counters advanced): the members are out of step.
            self.record_step().map_err(|e| self.broken(e))
        };
        if r.is_ok() {
            self.pos += 1;
        }
        self.step_host_time += t0.elapsed();
        r
    }

    fn replay_step(&mut self) -> Result<()> {
        if self.recorded.is_none() {
            if let Some(c) = self.comm.as_mut() {
                c.prepare_recording(self.cfg.hidden)?;
                // Rounds recorded before go out on their own: a replay's submission holds its
                // own rounds and no others (every slot entry read once per submission).
                for m in &self.members {
                    m.flush()?;
                }
            }
            // Growing the slots may leave fewer ring entries, or fall back to Generic.
            if !self.replays() {
                return self.record_step().map_err(|e| self.broken(e));
            }
            let first_round = self.comm.as_ref().map_or(0, Comm::rounds);
            let first_all_reduce = self.comm.as_ref().map_or(0, Comm::all_reduce_count);
            let members = self.members.clone();
            let recorded = capture(&members, || {
                self.record_step()?;
                if let Some(c) = self.comm.as_mut() {
                    self.rounds_per_step = c.rounds() - first_round;
                    self.all_reduces_per_step = c.all_reduce_count() - first_all_reduce;
                    c.replays()?.record_advance(self.rounds_per_step)?;
                }
                Ok(())
            });
            match recorded {
                Ok(r) => self.recorded = Some(r),
                Err(Capture::NotBegun(e)) => return Err(e),
                // The recording's rounds were counted and announced but never run.
                Err(Capture::Failed(e)) => return Err(self.broken(e)),
            }
        } else if let Some(c) = self.comm.as_mut() {
            // The recording's rounds were announced as it was recorded; each later submission
            // of it runs the next ones.
            c.replays()?.replayed(self.rounds_per_step, self.all_reduces_per_step)?;
        }
        let recorded = self.recorded.as_ref().expect("recorded above");
        // On an error the members before the failed one run a step whose rounds it never joins.
        submit_recorded(&self.members, recorded).map_err(|e| self.broken(e))
    }

    /// Marks the decoder unusable after `e` left its members out of step with each other (a
    /// partly submitted step, or rounds counted that never run), poisoning its communicator;
    /// returns `e`.
    /// An error once a failure left the members out of step ([`Decoder::broken`]).
    pub(super) fn check_usable(&self) -> Result<()> {
        match &self.broken {
            Some(why) => Err(Error::Poisoned("the decoder".into(), why.clone())),
            None => Ok(()),
        }
    }

    /// Checks that every one of `tokens` is in the vocabulary (an error naming the first that
    /// is not as `what`).
    pub(crate) fn check_tokens(&self, what: &'static str, tokens: &[u32]) -> Result<()> {
        match tokens.iter().find(|&&t| t as usize >= self.cfg.vocab) {
            Some(&t) => Err(Error::IndexOutOfRange {
                what,
                index: t as usize,
                len: self.cfg.vocab,
                of: "tokens in the vocabulary",
            }),
            None => Ok(()),
        }
    }

    /// Writes `position` into every member's position counter (in stream order), where the
    /// next step or prompt chunk starts; the host's count is the caller's to set.
    pub(super) fn write_position(&self, position: usize) -> Result<()> {
        for (m, counter) in self.members.iter().zip(self.act.position.parts()) {
            m.write_u32(counter, &[position as u32])?;
        }
        Ok(())
    }

    pub(super) fn broken(&mut self, e: Error) -> Error {
        if let Some(c) = self.comm.as_mut() {
            c.abandon(&e);
        }
        self.broken = Some(e.to_string());
        e
    }

    fn record_step<'d>(&'d mut self) -> Result<()> {
        let cfg = &self.cfg;
        let (members, act) = (&self.members, &self.act);
        let step = Step {
            position: &act.position,
            max_seq: cfg.max_seq,
            head_dim: cfg.head_dim,
            group: cfg.q_heads / cfg.kv_heads,
            rope_base: cfg.rope_base,
            warm: Warm { bytes: self.warm_l2_bytes, sink: &act.warm_sink },
            split_attention: self.split_attention,
        };
        let warm = step.warm;
        for (i, m) in members.iter().enumerate() {
            m.transformer().embed(&self.embed[i], act.token.part(i)?, act.x.part(i)?)?;
        }
        // The first norm; then each half ends in the next one: its all-reduced output is added
        // to the residual stream `x`, which is normed into `h` (`forward_add_norm`) or, folded
        // on one member, left pending by that product for the next half's to finish.
        let fold = (self.fold_norms && members.len() == 1 && self.comm.is_none() && self.remote.is_none())
            .then_some(PendingNorm { weighted: &act.norm_weighted, squares: &act.norm_squares });
        let add_norm = |weight| AddNorm { x: &act.x, weight, h: &act.h, eps: cfg.eps, fold };
        let first_norm = self.layers.first().map_or(&self.final_norm, |l| &l.attention_norm);
        let mut h = Normed::Ready(&act.h);
        for (i, m) in members.iter().enumerate() {
            let (x, w, h) = add_norm(first_norm).parts(i)?;
            m.transformer().rmsnorm(x, w, h, cfg.eps)?;
        }
        // Beside each written norm, the first weights of the product that reads it go into L2
        // (`Warm`); a pending norm has no dispatch of its own, so they go in beside the tail of
        // the product that left it pending.
        let warm_after = |first: &dyn Fn(usize) -> Result<Vec<&'d Tensor>>| -> Result<()> {
            for (i, m) in members.iter().enumerate() {
                warm.record(m, i, &first(i)?)?;
            }
            Ok(())
        };
        for (l, layer) in self.layers.iter().enumerate() {
            warm_after(&|i| layer.attention.first_weights(i))?;
            let next_norm = self.layers.get(l + 1).map_or(&self.final_norm, |n| &n.attention_norm);
            let r = reducer(&mut self.comm, &mut self.remote);
            let (scratch, partial) = (&act.attention, &act.o);
            h = layer.attention.forward(members, r, scratch, partial, step, h, add_norm(&layer.mlp_norm))?;
            warm_after(&|i| layer.mlp.first_weights(i))?;
            let r = reducer(&mut self.comm, &mut self.remote);
            h = layer.mlp.forward(members, r, &act.mlp, &act.d, h, add_norm(next_norm))?;
        }
        // The final norm in memory for the vocabulary's product.
        for (i, m) in members.iter().enumerate() {
            h.tensor(m, i)?;
        }
        warm_after(&|i| Ok(vec![self.vocab.matrix(i)?.tensor()]))?;
        // The next token: each member's candidates from its vocabulary slice, all-gathered
        // (one member writes them in place), then drawn from them all as the settings say,
        // alike on every member.
        self.vocab.forward_q8(members, &act.h.refs(), &act.q8_vocab, &act.logits.refs())?;
        let several = self.comm.is_some() || self.remote.is_some();
        let own = if several { &act.sampled } else { &act.candidates };
        for (i, m) in members.iter().enumerate() {
            let at = Position { base: 0, counter: Some(act.position.part(i)?) };
            m.transformer().sample_candidates_at(
                act.logits.part(i)?,
                act.settings.part(i)?,
                self.plan.vocab[i].start,
                act.chunks.part(i)?,
                own.part(i)?,
                0,
                self.room,
                at,
            )?;
        }
        if let Some(r) = reducer(&mut self.comm, &mut self.remote) {
            r.all_gather(&act.sampled.refs(), &mut act.candidates.refs())?;
        }
        for (i, m) in members.iter().enumerate() {
            let at = Position { base: 0, counter: Some(act.position.part(i)?) };
            m.transformer().select_sampled_at(
                act.candidates.part(i)?,
                act.settings.part(i)?,
                self.room,
                act.token.part(i)?,
                act.history.part(i)?,
                at,
                true,
            )?;
        }
        Ok(())
    }

    /// One step, submitted, after which the host waits for the step before it (`previous`
    /// holds its marks): at most two steps in flight, so command buffers do not pile up and no
    /// single wait covers more than two steps' work (a long prompt on a slow device would
    /// otherwise be one wait past `CROSSGPU_TIMEOUT_MS`). True when a previous step was waited.
    pub(crate) fn step_in_flight(&mut self, previous: &mut Option<Vec<u64>>) -> Result<bool> {
        self.step()?;
        self.wait_previous(previous, "the previous decode step")
    }

    /// Flushes what was recorded since `previous` was marked, marks it, and waits for the
    /// work `previous` marked (if any): what keeps at most two steps or prompt chunks in
    /// flight. True when there was something to wait for.
    pub(super) fn wait_previous(&self, previous: &mut Option<Vec<u64>>, what: &str) -> Result<bool> {
        let marks = self.members.iter().map(|m| m.flush().map(|()| m.mark())).collect::<Result<Vec<_>>>()?;
        match previous.replace(marks) {
            Some(prev) => {
                for (m, v) in self.members.iter().zip(prev) {
                    m.wait_mark(v, what)?;
                }
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Sets the token the next step embeds (the prompt's last token).
    pub fn set_token(&mut self, token: u32) -> Result<()> {
        self.check_tokens("token id", &[token])?;
        for (m, t) in self.members.iter().zip(self.act.token.parts()) {
            m.write(t, &[token as f32])?;
        }
        Ok(())
    }

    /// Decodes `steps` tokens from `first` (greedily unless [`Decoder::set_sampling`] said
    /// otherwise), calling `on_step(i)` after step i has
    /// finished on the devices. Keeps at most two steps in flight.
    pub fn generate(&mut self, first: u32, steps: usize, mut on_step: impl FnMut(usize)) -> Result<Vec<u32>> {
        self.set_token(first)?;
        let start = self.pos;
        let mut previous: Option<Vec<u64>> = None;
        for k in 0..steps {
            if self.step_in_flight(&mut previous)? {
                on_step(k - 1);
            }
        }
        for m in &self.members {
            m.synchronize()?;
        }
        if steps > 0 {
            on_step(steps - 1);
        }
        let history = self.act.history.part(0)?.read_u32()?;
        Ok(history[start..start + steps].to_vec())
    }
}
