//! A decoder-only transformer split across a group for one-token-at-a-time greedy decoding.
//!
//! Per layer: RMSNorm → Q, K, V (column-parallel, whole KV-head groups per member) → RoPE →
//! KV cache append (each member caches only its heads) → attention → output projection
//! (row-parallel, all-reduce) → residual → RMSNorm → gate and up (column-parallel, cut at 64
//! features) → SiLU(gate)·up → down (row-parallel, all-reduce) → residual. The embedding and
//! the final norm are replicated; the vocabulary projection is column-parallel and the greedy
//! choice is gathered with one more all-reduce of (value, index) pairs, so the next token's id
//! never leaves the devices: the host records step after step without waiting.
//!
//! Weights are generated on the devices from a seed, so even the 27B-class preset loads in
//! seconds and every split holds exactly the slices of the one-member model.

use super::block::{Attention, AttentionScratch, Mlp, MlpScratch, Step};
use super::config::DecoderConfig;
use super::linear::{AddNorm, ColumnParallelLinear, RowParallelLinear};
use super::ops::Position;
use super::plan::{check_fits, Plan};
use super::reduce::Reducer;
use super::sharded::Sharded;
use super::split::SplitSpec;
use super::weights::{Norm, Seeded, Weight, WeightSource};
use crate::comm::{AllReduceOptions, Comm, Precision};
use crate::error::{Error, Result};
use std::ops::Range;

use crate::group::{DeviceGroup, Member, MemberStats};
use crate::tensor::Tensor;
use vk_native::Replay;

/// One decoder layer: attention, then the MLP, each a tensor-parallel half (`block.rs`).
struct Layer {
    attention_norm: Sharded,
    attention: Attention,
    mlp_norm: Sharded,
    mlp: Mlp,
}

/// The activations of a step, each across the members, made once at load.
struct Activations {
    /// The residual stream (replicated).
    x: Sharded,
    /// The normed input of the next half (replicated).
    h: Sharded,
    attention: AttentionScratch,
    /// The attention's output, all-reduced (replicated).
    o: Sharded,
    mlp: MlpScratch,
    /// The MLP's output, all-reduced (replicated).
    d: Sharded,
    /// Each member's slice of the vocabulary's logits.
    logits: Sharded,
    /// The greedy candidates, (value, index) per member, gathered by an all-reduce.
    pairs: Sharded,
    /// The token the next step embeds, and every token chosen so far (u32).
    token: Sharded,
    history: Sharded,
    /// The position of the next step (u32), advanced on the devices by the step's last kernel.
    position: Sharded,
}

/// Counters of a decode run.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct DecodeStats {
    /// Tokens decoded so far (steps recorded).
    pub tokens: usize,
    /// All-reduces the decoder's communicator performed (0 for one member).
    pub all_reduces: u64,
    /// Queue submits per member, summed over members.
    pub submits: u64,
    /// Members the model is split over.
    pub members: usize,
    /// Host time spent in [`Decoder::step`] (recording and submitting; it never waits for the
    /// GPU except when a stream has `CROSSGPU_MAX_IN_FLIGHT` submits in flight).
    pub step_host_time: std::time::Duration,
    /// Of that, time the streams waited because `CROSSGPU_MAX_IN_FLIGHT` submits were in
    /// flight (summed over members; the rest is the host's own recording and submitting).
    pub backpressure_wait: std::time::Duration,
    /// How the host bridge released the all-reduce rounds (HostBridge mode only).
    pub bridge: Option<crate::comm::BridgeStats>,
    /// Compute dispatches recorded, summed over members.
    pub dispatches: u64,
    /// `vkQueueSubmit` calls of every member, summed.
    pub queue_submits: u64,
    /// Host time spent in those calls (queue lock included), summed over members.
    pub queue_submit_time: std::time::Duration,
}

/// The all-reduce of a decoder's partials: across ranks where there is one, else the group's.
fn reducer<'a>(
    comm: &'a mut Option<Comm>,
    remote: &'a mut Option<Box<dyn Reducer + Send>>,
) -> Option<&'a mut dyn Reducer> {
    match remote {
        Some(r) => Some(&mut **r),
        None => comm.as_mut().map(|c| c as &mut dyn Reducer),
    }
}

/// The model on a group.
pub struct Decoder {
    /// The model's shape.
    pub cfg: DecoderConfig,
    /// How the model is split across the members.
    pub plan: Plan,
    members: Vec<Member>,
    comm: Option<Comm>,
    /// The communicator across MPI ranks when this process holds one share of a model split
    /// over several processes (`comm` is then `None`).
    remote: Option<Box<dyn Reducer + Send>>,
    /// The global index of this process's first member (0 in one process).
    first: usize,
    embed: Vec<Tensor>,
    vocab: ColumnParallelLinear,
    final_norm: Sharded,
    layers: Vec<Layer>,
    act: Activations,
    /// Tokens decoded so far (the next position); the devices hold it too, in `act.position`.
    pos: usize,
    /// Host time spent in `step` so far.
    step_host_time: std::time::Duration,
    /// Whether steps are recorded once and replayed (one member only: see [`Decoder::replays`]).
    replay: bool,
    /// Each member's recording of a step, once made.
    recorded: Option<Vec<Replay>>,
    /// All-reduce rounds in the recording.
    rounds_per_step: u64,
    /// Why the decoder refuses further steps (its members were left out of step).
    broken: Option<String>,
}

impl Decoder {
    /// Loads the model on every member of `group`, split as `split` says. `comm` is created
    /// here for groups of two or more members.
    pub fn new(group: &DeviceGroup, cfg: DecoderConfig, split: &SplitSpec) -> Result<Self> {
        Self::new_with_progress(group, cfg, split, |_, _| {})
    }

    /// Like [`Decoder::new`], calling `progress(layers_loaded, layers)` as the weights are
    /// generated (see [`Decoder::load`]).
    pub fn new_with_progress(
        group: &DeviceGroup,
        cfg: DecoderConfig,
        split: &SplitSpec,
        progress: impl FnMut(usize, usize),
    ) -> Result<Self> {
        let comm = if group.len() > 1 { Some(Comm::new(group)?) } else { None };
        Self::load(group, cfg, split, comm, progress)
    }

    /// Like [`Decoder::new`] with a communicator of the caller's.
    pub fn with_comm(
        group: &DeviceGroup,
        cfg: DecoderConfig,
        split: &SplitSpec,
        comm: Option<Comm>,
    ) -> Result<Self> {
        Self::load(group, cfg, split, comm, |_, _| {})
    }

    /// Like [`Decoder::with_comm`], calling `progress(layers_loaded, layers)` as the weights
    /// are generated (large models take seconds to minutes). The model's footprint is checked
    /// against every member ([`check_fits`]) before anything is allocated.
    pub fn load(
        group: &DeviceGroup,
        cfg: DecoderConfig,
        split: &SplitSpec,
        comm: Option<Comm>,
        progress: impl FnMut(usize, usize),
    ) -> Result<Self> {
        cfg.validate()?;
        let mut source = Seeded::new(&cfg);
        Self::load_from(group, cfg, split, comm, &mut source, progress)
    }

    /// Like [`Decoder::load`], with the weights `source` makes (a checkpoint's, or
    /// [`Seeded`]'s): each member asks it for its slices only.
    pub fn load_from(
        group: &DeviceGroup,
        cfg: DecoderConfig,
        split: &SplitSpec,
        comm: Option<Comm>,
        source: &mut dyn WeightSource,
        progress: impl FnMut(usize, usize),
    ) -> Result<Self> {
        cfg.validate()?;
        let members = group.members().to_vec();
        if members.len() > 1 && comm.is_none() {
            return Err(Error::InvalidArgument("a decoder over several members needs a communicator".into()));
        }
        let weights = split.resolve(&members)?;
        Self::load_share(group, cfg, &weights, 0, (comm, None), source, progress)
    }

    /// Loads this process's share of a model split over every member of every MPI rank
    /// (feature `mpi`): `ranks` spans them (a collective call: every rank loads its share with
    /// the same `cfg` and `split`). The split is by weights, the same on every rank
    /// ([`SplitSpec::Auto`], which measures the local devices only, is refused). Every rank's
    /// steps then decode the same tokens a one-process decoder over all those members would;
    /// steps are recorded every time (no replay across ranks).
    #[cfg(feature = "mpi")]
    pub fn across_ranks(
        group: &DeviceGroup,
        cfg: DecoderConfig,
        split: &SplitSpec,
        ranks: crate::ranks::RankComm,
    ) -> Result<Self> {
        cfg.validate()?;
        if matches!(split, SplitSpec::Auto) {
            return Err(Error::Unsupported(
                "Decoder::across_ranks: SplitSpec::Auto measures this rank's devices only; give every rank the same weights (even or explicit)".into(),
            ));
        }
        let total = ranks.global_members().len();
        let own = ranks.own_members();
        if own.len() != group.len() || ranks.local().members().len() != group.len() {
            return Err(Error::InvalidArgument(format!(
                "Decoder::across_ranks: the group has {} members, the RankComm {} on this rank: pass the group the RankComm was made over",
                group.len(),
                own.len()
            )));
        }
        let weights = split.weights(total)?;
        let mut source = Seeded::new(&cfg);
        Self::load_share(
            group,
            cfg,
            &weights,
            own.start,
            (None, Some(Box::new(ranks))),
            &mut source,
            |_, _| {},
        )
    }

    /// Loads the share of `group`'s members, global members `first..first + group.len()` of a
    /// model split by `weights` (one per member of every process).
    fn load_share(
        group: &DeviceGroup,
        cfg: DecoderConfig,
        weights: &[f64],
        first: usize,
        (comm, remote): (Option<Comm>, Option<Box<dyn Reducer + Send>>),
        source: &mut dyn WeightSource,
        mut progress: impl FnMut(usize, usize),
    ) -> Result<Self> {
        let members = group.members().to_vec();
        let total = weights.len();
        if first + members.len() > total {
            return Err(Error::InvalidArgument(format!(
                "a share of members {first}..{} of a model split over {total}",
                first + members.len()
            )));
        }
        let whole = Plan::new(&cfg, weights)?;
        // This process's members' shares (ranges in the whole model's coordinates).
        let mine = first..first + members.len();
        let plan = Plan {
            weights: whole.weights[mine.clone()].to_vec(),
            kv_heads: whole.kv_heads[mine.clone()].to_vec(),
            ffn: whole.ffn[mine.clone()].to_vec(),
            vocab: whole.vocab[mine].to_vec(),
        };
        check_fits(&members, &cfg, &plan)?;
        // A share of a model split over other processes' members too.
        let share = members.len() < total;
        let group_size = cfg.q_heads / cfg.kv_heads;
        let d = cfg.head_dim;
        let q_rows: Vec<_> =
            plan.kv_heads.iter().map(|r| r.start * group_size * d..r.end * group_size * d).collect();
        let kv_rows: Vec<_> = plan.kv_heads.iter().map(|r| r.start * d..r.end * d).collect();
        let (h, f, qd, kvd) = (cfg.hidden, cfg.ffn, cfg.q_heads * d, cfg.kv_heads * d);
        let norm = |source: &mut dyn WeightSource, which| -> Result<Sharded> {
            Ok(Sharded::new(members.iter().map(|m| source.norm(m, which)).collect::<Result<Vec<_>>>()?))
        };
        let mut layers = Vec::with_capacity(cfg.layers);
        for l in 0..cfg.layers {
            let caches = || Sharded::full(&members, |i| plan.kv_heads[i].len() * cfg.max_seq * d, 0.0);
            let mut column = |inp, out, ranges: &Vec<Range<usize>>, w: fn(usize) -> Weight| {
                ColumnParallelLinear::from_slices(&members, inp, out, ranges.clone(), share, |m, r, c| {
                    source.matrix(m, w(l), r, c)
                })
            };
            let (q, k, v) = (
                column(h, qd, &q_rows, Weight::Q)?,
                column(h, kvd, &kv_rows, Weight::K)?,
                column(h, kvd, &kv_rows, Weight::V)?,
            );
            let (gate, up) = (column(h, f, &plan.ffn, Weight::Gate)?, column(h, f, &plan.ffn, Weight::Up)?);
            let mut row = |inp, out, ranges: &Vec<Range<usize>>, w: fn(usize) -> Weight| {
                RowParallelLinear::from_slices(&members, inp, out, ranges.clone(), share, |m, r, c| {
                    source.matrix(m, w(l), r, c)
                })
            };
            let (o, down) = (row(qd, h, &q_rows, Weight::O)?, row(f, h, &plan.ffn, Weight::Down)?);
            layers.push(Layer {
                attention_norm: norm(source, Norm::Attention(l))?,
                attention: Attention { q, k, v, o, k_cache: caches()?, v_cache: caches()? },
                mlp_norm: norm(source, Norm::Mlp(l))?,
                mlp: Mlp { gate, up, down },
            });
            progress(l + 1, cfg.layers);
        }
        let vocab = ColumnParallelLinear::from_slices(
            &members,
            h,
            cfg.vocab,
            plan.vocab.clone(),
            share,
            |m, r, c| source.matrix(m, Weight::Output, r, c),
        )?;
        let final_norm = norm(source, Norm::Final)?;
        let embed = members.iter().map(|m| source.embedding(m)).collect::<Result<Vec<_>>>()?;
        let f32s = |len: &dyn Fn(usize) -> usize| Sharded::full(&members, len, 0.0);
        let kvh = |i: usize| plan.kv_heads[i].len();
        let u32s = |len: usize| -> Result<Sharded> {
            Ok(Sharded::new(members.iter().map(|m| m.upload_u32(&vec![0; len])).collect::<Result<Vec<_>>>()?))
        };
        let act = Activations {
            x: f32s(&|_| h)?,
            h: f32s(&|_| h)?,
            attention: AttentionScratch {
                q: f32s(&|i| kvh(i) * group_size * d)?,
                k: f32s(&|i| kvh(i) * d)?,
                v: f32s(&|i| kvh(i) * d)?,
                scores: f32s(&|i| kvh(i) * group_size * cfg.max_seq)?,
                attn: f32s(&|i| kvh(i) * group_size * d)?,
            },
            o: f32s(&|_| h)?,
            mlp: MlpScratch {
                g: f32s(&|i| plan.ffn[i].len())?,
                u: f32s(&|i| plan.ffn[i].len())?,
                a: f32s(&|i| plan.ffn[i].len())?,
            },
            d: f32s(&|_| h)?,
            logits: f32s(&|i| plan.vocab[i].len())?,
            pairs: f32s(&|_| 2 * total)?,
            token: u32s(1)?,
            history: u32s(cfg.max_seq)?,
            position: u32s(1)?,
        };
        for m in &members {
            m.flush()?;
        }
        Ok(Self {
            cfg,
            plan,
            members,
            comm,
            remote,
            first,
            embed,
            vocab,
            final_norm,
            layers,
            act,
            pos: 0,
            step_host_time: std::time::Duration::ZERO,
            replay: true,
            recorded: None,
            rounds_per_step: 0,
            broken: None,
        })
    }

    /// The all-reduce mode in use (`None` for one member).
    pub fn comm(&self) -> Option<&Comm> {
        self.comm.as_ref()
    }

    /// The members the model is loaded on, in group order.
    pub fn members(&self) -> &[Member] {
        &self.members
    }

    /// Tokens decoded so far.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Whether steps are recorded once and then replayed: one submit of a pre-recorded command
    /// buffer per token and member, and no recording on the host. The step's commands are the
    /// same at every position: the devices keep and advance the position, and with DevicePoll
    /// the round numbers too (each replay's rounds run as the communicator's next ones). So
    /// this holds on one member, and across members with DevicePoll where a step's rounds (two
    /// per layer and the greedy choice's) are fused and fit one ring of slot entries. HostBridge,
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
    /// and leaves the greedy next token in every member's token buffer and in the history.
    /// Nothing waits for the GPU. Where the decoder [replays](Decoder::replays), the first
    /// step records the step once and submits it; every later step submits that recording.
    pub fn step(&mut self) -> Result<()> {
        let t0 = std::time::Instant::now();
        if let Some(why) = &self.broken {
            return Err(Error::Poisoned("the decoder".into(), why.clone()));
        }
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
            for (i, m) in self.members.iter().enumerate() {
                if let Err(e) = m.begin_capture() {
                    self.members[..i].iter().for_each(Member::cancel_capture);
                    return Err(e);
                }
            }
            let recorded = self.record_step().and_then(|()| {
                if let Some(c) = self.comm.as_mut() {
                    self.rounds_per_step = c.rounds() - first_round;
                    c.replays()?.record_advance(self.rounds_per_step)?;
                }
                self.members.iter().map(Member::end_capture).collect::<Result<Vec<_>>>()
            });
            match recorded {
                Ok(r) => self.recorded = Some(r),
                Err(e) => {
                    self.members.iter().for_each(Member::cancel_capture);
                    // The recording's rounds were counted and announced but never run.
                    return Err(self.broken(e));
                }
            }
        } else if let Some(c) = self.comm.as_mut() {
            // The recording's rounds were announced as it was recorded; each later submission
            // of it runs the next ones.
            c.replays()?.replayed(self.rounds_per_step)?;
        }
        let recorded = self.recorded.as_ref().expect("recorded above");
        for (m, r) in self.members.iter().zip(recorded) {
            if let Err(e) = m.submit_replay(r) {
                // The members before this one run a step whose rounds this one never joins.
                return Err(self.broken(e));
            }
        }
        Ok(())
    }

    /// Marks the decoder unusable after `e` left its members out of step with each other (a
    /// partly submitted step, or rounds counted that never run), poisoning its communicator;
    /// returns `e`.
    fn broken(&mut self, e: Error) -> Error {
        if let Some(c) = self.comm.as_mut() {
            c.abandon(&e);
        }
        self.broken = Some(e.to_string());
        e
    }

    fn record_step(&mut self) -> Result<()> {
        let cfg = &self.cfg;
        let (members, act) = (&self.members, &self.act);
        let step = Step {
            position: &act.position,
            max_seq: cfg.max_seq,
            head_dim: cfg.head_dim,
            group: cfg.q_heads / cfg.kv_heads,
            rope_base: cfg.rope_base,
        };
        for (i, m) in members.iter().enumerate() {
            m.transformer().embed(&self.embed[i], act.token.part(i)?, act.x.part(i)?)?;
        }
        // The first norm; then each half ends in the next one: its all-reduced output is added
        // to the residual stream `x`, which is normed into `h` (`forward_add_norm`).
        let first_norm = self.layers.first().map_or(&self.final_norm, |l| &l.attention_norm);
        for (i, m) in members.iter().enumerate() {
            let (x, w, h) = (act.x.part(i)?, first_norm.part(i)?, act.h.part(i)?);
            m.transformer().rmsnorm(x, w, h, cfg.eps)?;
        }
        let add_norm = |weight| AddNorm { x: &act.x, weight, h: &act.h, eps: cfg.eps };
        for (l, layer) in self.layers.iter().enumerate() {
            let next_norm = self.layers.get(l + 1).map_or(&self.final_norm, |n| &n.attention_norm);
            let r = reducer(&mut self.comm, &mut self.remote);
            layer.attention.forward(members, r, &act.attention, &act.o, step, add_norm(&layer.mlp_norm))?;
            let r = reducer(&mut self.comm, &mut self.remote);
            layer.mlp.forward(members, r, &act.mlp, &act.d, add_norm(next_norm))?;
        }
        // The greedy token: each member's best (value, index) of its vocabulary slice, gathered
        // by an all-reduce of the pairs (exact: every other member contributes zeros).
        self.vocab.forward(members, &act.h.refs(), &act.logits.refs())?;
        for (i, m) in members.iter().enumerate() {
            m.fill(act.pairs.part(i)?, 0.0)?;
            m.transformer().argmax_pair(
                act.logits.part(i)?,
                self.plan.vocab[i].start,
                act.pairs.part(i)?,
                self.first + i,
            )?;
        }
        if let Some(r) = reducer(&mut self.comm, &mut self.remote) {
            let opts = AllReduceOptions { precision: Precision::F32, ..Default::default() };
            r.all_reduce(&mut act.pairs.refs(), &opts)?;
        }
        for (i, m) in members.iter().enumerate() {
            let at = Position { base: 0, counter: Some(act.position.part(i)?) };
            m.transformer().select_token_at(
                act.pairs.part(i)?,
                act.token.part(i)?,
                act.history.part(i)?,
                at,
                true,
            )?;
        }
        Ok(())
    }

    /// Sets the token the next step embeds (the prompt's last token).
    pub fn set_token(&mut self, token: u32) -> Result<()> {
        if token as usize >= self.cfg.vocab {
            return Err(Error::IndexOutOfRange {
                what: "token id",
                index: token as usize,
                len: self.cfg.vocab,
                of: "tokens in the vocabulary",
            });
        }
        for (m, t) in self.members.iter().zip(self.act.token.parts()) {
            m.write(t, &[token as f32])?;
        }
        Ok(())
    }

    /// Decodes `steps` tokens greedily from `first`, calling `on_step(i)` after step i has
    /// finished on the devices. Keeps at most two steps in flight.
    pub fn generate(&mut self, first: u32, steps: usize, mut on_step: impl FnMut(usize)) -> Result<Vec<u32>> {
        self.set_token(first)?;
        let start = self.pos;
        let mut previous: Option<Vec<u64>> = None;
        for k in 0..steps {
            self.step()?;
            // Flush so the step starts on the GPU, then wait for the step before it: at most
            // two steps in flight, so command buffers do not pile up.
            let marks =
                self.members.iter().map(|m| m.flush().map(|()| m.mark())).collect::<Result<Vec<_>>>()?;
            if let Some(prev) = previous.replace(marks) {
                for (m, v) in self.members.iter().zip(prev) {
                    m.wait_mark(v, "the previous decode step")?;
                }
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

    /// Every member's logits slice concatenated (valid after the step finished: reads wait).
    pub fn logits(&self) -> Result<Vec<f32>> {
        let mut all = Vec::with_capacity(self.cfg.vocab);
        for t in self.act.logits.parts() {
            all.extend(t.read()?);
        }
        Ok(all)
    }

    /// Every member's copy of the residual stream `x` (replicated: must be bitwise equal).
    pub fn residuals(&self) -> Result<Vec<Vec<f32>>> {
        self.act.x.parts().iter().map(|t| t.read()).collect()
    }

    /// Counters so far: all-reduces and submits (summed over members).
    pub fn stats(&self) -> DecodeStats {
        let each: Vec<MemberStats> = self.members.iter().map(Member::stats).collect();
        DecodeStats {
            tokens: self.pos,
            all_reduces: self.comm.as_ref().map_or(0, |c| c.all_reduce_count()),
            submits: each.iter().map(|s| s.submits).sum(),
            dispatches: each.iter().map(|s| s.dispatches).sum(),
            members: self.members.len(),
            step_host_time: self.step_host_time,
            backpressure_wait: each.iter().map(|s| s.backpressure_wait).sum(),
            bridge: self.comm.as_ref().and_then(|c| c.bridge_stats()),
            queue_submits: each.iter().map(|s| s.queue_submits).sum(),
            queue_submit_time: each.iter().map(|s| s.queue_submit_time).sum(),
        }
    }
}
