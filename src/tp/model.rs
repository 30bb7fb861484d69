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

use std::ops::Range;

use super::Position;
use crate::comm::{AllReduceOptions, Comm, FusedRound, Precision};
use crate::error::{Error, Result};
use crate::group::{DeviceGroup, Member, MemberStats};
use crate::tensor::{DType, Tensor};
use vk_native::Replay;

use super::block::{Attention, AttentionScratch, Mlp, MlpScratch, Step};
use super::init::{matrix_seed, shift_for_fan_in};
use super::linear::{ColumnParallelLinear, RowParallelLinear};
use super::sharded::Sharded;
use super::split::{split_ranges, SplitSpec};
use super::Reducer;

/// Shape of the model.
#[derive(Debug, Clone, PartialEq)]
pub struct DecoderConfig {
    /// Width of the residual stream (model dimension), in elements.
    pub hidden: usize,
    /// Intermediate features of the MLP (gate, up and down projections); split at 64.
    pub ffn: usize,
    /// Transformer layers.
    pub layers: usize,
    /// Query heads, a positive multiple of `kv_heads`.
    pub q_heads: usize,
    /// Key/value heads (grouped-query attention); the attention split is in whole KV heads.
    pub kv_heads: usize,
    /// Elements per head, even (RoPE rotates pairs).
    pub head_dim: usize,
    /// Vocabulary size: token ids are `0..vocab`, below 2^24; the output projection is split
    /// at 64 entries.
    pub vocab: usize,
    /// KV-cache capacity in tokens.
    pub max_seq: usize,
    /// Seed the weights are generated from on the devices: the same seed gives the same model
    /// on any split.
    pub seed: u32,
    /// RoPE frequency base (10000 in both presets).
    pub rope_base: f32,
    /// The epsilon added to the mean square in RMSNorm.
    pub eps: f32,
}

impl DecoderConfig {
    /// A small model for tests and CI (runs in seconds on lavapipe).
    pub fn small() -> Self {
        Self {
            hidden: 256,
            ffn: 640,
            layers: 2,
            q_heads: 8,
            kv_heads: 4,
            head_dim: 32,
            vocab: 1000,
            max_seq: 64,
            seed: 7,
            rope_base: 10_000.0,
            eps: 1e-5,
        }
    }

    /// A 27B-class shape: hidden 5120, FFN 17408, 64 layers, 40 query and 8 KV heads of 128.
    pub fn preset_27b() -> Self {
        Self {
            hidden: 5120,
            ffn: 17408,
            layers: 64,
            q_heads: 40,
            kv_heads: 8,
            head_dim: 128,
            vocab: 32_000,
            max_seq: 256,
            seed: 7,
            rope_base: 10_000.0,
            eps: 1e-5,
        }
    }

    /// `small` or `27b`.
    pub fn preset(name: &str) -> Result<Self> {
        match name {
            "small" => Ok(Self::small()),
            "27b" => Ok(Self::preset_27b()),
            _ => Err(Error::BadConfig {
                name: "--preset",
                value: name.into(),
                why: "expected small or 27b".into(),
            }),
        }
    }

    /// Checks the shape before anything is allocated; the error names the field.
    pub fn validate(&self) -> Result<()> {
        let bad = |why: String| Err(Error::InvalidArgument(format!("decoder shape: {why}")));
        for (name, v) in [
            ("hidden", self.hidden),
            ("ffn", self.ffn),
            ("layers", self.layers),
            ("vocab", self.vocab),
            ("max_seq", self.max_seq),
            ("kv_heads", self.kv_heads),
            ("head_dim", self.head_dim),
        ] {
            if v == 0 {
                return bad(format!("{name} is 0; it must be at least 1"));
            }
        }
        if !self.q_heads.is_multiple_of(self.kv_heads) || self.q_heads == 0 {
            return bad(format!(
                "q_heads ({}) must be a positive multiple of kv_heads ({})",
                self.q_heads, self.kv_heads
            ));
        }
        if !self.head_dim.is_multiple_of(2) {
            return bad(format!("head_dim ({}) must be even (RoPE rotates pairs)", self.head_dim));
        }
        // Kernels index with 32-bit integers and the greedy pair carries the token id in an f32.
        let fits = |a: usize, b: usize| a.checked_mul(b).is_some_and(|p| p <= u32::MAX as usize);
        let q_width = self.q_heads.saturating_mul(self.head_dim);
        let kv_width = self.kv_heads.saturating_mul(self.head_dim);
        if !(fits(self.hidden, self.ffn)
            && fits(self.hidden, q_width)
            && fits(self.vocab, self.hidden)
            && fits(q_width, self.max_seq)
            && fits(kv_width, self.max_seq))
        {
            return bad(
                "a weight matrix or KV cache would exceed 2^32 elements (kernels index with 32 bits)".into(),
            );
        }
        if self.vocab >= 1 << 24 {
            return bad(format!(
                "vocab ({}) must be below 2^24 (token ids travel as exact f32 values)",
                self.vocab
            ));
        }
        Ok(())
    }

    /// Parameters (weights) in the model.
    pub fn parameters(&self) -> u128 {
        let (h, f, d) = (self.hidden as u128, self.ffn as u128, self.head_dim as u128);
        let attn = h * d * (self.q_heads as u128 * 2 + self.kv_heads as u128 * 2);
        let mlp = 3 * h * f;
        self.layers as u128 * (attn + mlp) + 2 * self.vocab as u128 * h
    }
}

/// How the features were shared out.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The weight each member's share was cut by (measured ones for `SplitSpec::Auto`).
    pub weights: Vec<f64>,
    /// KV heads per member (query heads follow, `group` per KV head).
    pub kv_heads: Vec<Range<usize>>,
    /// MLP features per member, cut at multiples of 64.
    pub ffn: Vec<Range<usize>>,
    /// Vocabulary entries (rows of the output projection) per member, cut at multiples of 64.
    pub vocab: Vec<Range<usize>>,
}

impl Plan {
    /// Cuts the model for members weighted `weights`: attention at whole KV heads, the MLP at
    /// 64 features, the vocabulary at 64 entries.
    pub fn new(cfg: &DecoderConfig, weights: &[f64]) -> Result<Self> {
        Ok(Self {
            weights: weights.to_vec(),
            kv_heads: split_ranges(cfg.kv_heads, 1, weights)?,
            ffn: split_ranges(cfg.ffn, 64, weights)?,
            vocab: split_ranges(cfg.vocab, 64, weights)?,
        })
    }
}

/// What the next norm adds to the residual stream: nothing (the first layer), a replicated
/// tensor, or a fused all-reduce round to sum first.
enum Residual<'a> {
    None,
    Tensor(&'a Sharded),
    Fused(FusedRound),
}

/// What one member allocates for the model, known before anything is allocated.
#[derive(Debug, Clone, PartialEq)]
pub struct Footprint {
    /// Bytes of every tensor the member holds (weights, KV caches, activations).
    pub bytes: u64,
    /// Weight bytes the member reads for every token: its slices of every layer's matrices and
    /// of the vocabulary projection (the embedding table gives one row per token).
    pub streamed_weight_bytes: u64,
    /// The largest single tensor: its name and bytes (one storage binding must cover it).
    pub largest: (&'static str, u64),
}

impl Plan {
    /// Member `i`'s allocations for `cfg` under this plan.
    pub fn footprint(&self, cfg: &DecoderConfig, i: usize) -> Footprint {
        let f16 = |n: usize| DType::F16.storage_bytes(n);
        let f32b = |n: usize| DType::F32.storage_bytes(n);
        let (h, d, g) = (cfg.hidden, cfg.head_dim, cfg.q_heads / cfg.kv_heads.max(1));
        let kvh = self.kv_heads.get(i).map_or(0, |r| r.len());
        let (qd, kvd) = (kvh * g * d, kvh * d);
        let ffn = self.ffn.get(i).map_or(0, |r| r.len());
        let vocab = self.vocab.get(i).map_or(0, |r| r.len());
        // (name, bytes of one, how many, read in full for every token: the weights the member
        // streams; the embedding table gives one row per token).
        let l = cfg.layers as u64;
        let tensors: [(&'static str, u64, u64, bool); 12] = [
            ("q weight", f16(qd * h), l, true),
            ("k weight", f16(kvd * h), l, true),
            ("v weight", f16(kvd * h), l, true),
            ("o weight", f16(h * qd), l, true),
            ("gate weight", f16(ffn * h), l, true),
            ("up weight", f16(ffn * h), l, true),
            ("down weight", f16(h * ffn), l, true),
            ("KV cache", f32b(kvd * cfg.max_seq), 2 * l, false),
            ("vocabulary weight", f16(vocab * h), 1, true),
            ("embedding table", f16(cfg.vocab * h), 1, false),
            ("attention scores", f32b(qd / d.max(1) * cfg.max_seq), 1, false),
            ("activations", f32b(6 * h + 3 * qd + 2 * kvd + 3 * ffn + vocab + cfg.max_seq + 16), 1, false),
        ];
        let total = |keep: &dyn Fn(bool) -> bool| {
            tensors
                .iter()
                .filter(|t| keep(t.3))
                .map(|t| t.1.saturating_mul(t.2))
                .fold(0u64, u64::saturating_add)
        };
        let (bytes, streamed_weight_bytes) = (total(&|_| true), total(&|streamed| streamed));
        // The activations are several small tensors, never one binding.
        let largest = tensors
            .iter()
            .filter(|t| t.0 != "activations")
            .max_by_key(|t| t.1)
            .map_or(("none", 0), |t| (t.0, t.1));
        Footprint { bytes, streamed_weight_bytes, largest }
    }
}

fn gib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 30) as f64
}

/// Refuses a model the members cannot hold, before anything is allocated: each member's
/// largest tensor against its device's `maxStorageBufferRange`, and the members on one
/// adapter together against that adapter's largest device-local heap (on a CPU device or an
/// iGPU that is system memory, which the host also needs).
pub fn check_fits(members: &[Member], cfg: &DecoderConfig, plan: &Plan) -> Result<()> {
    let mut per_adapter: Vec<(usize, u64, usize)> = Vec::new();
    for (i, m) in members.iter().enumerate() {
        let f = plan.footprint(cfg, i);
        let caps = &m.adapter().caps;
        if f.largest.1 > caps.max_storage_buffer_range {
            let remedy = if f.largest.0 == "embedding table" {
                "every member holds it whole: use a smaller vocabulary or hidden size"
            } else {
                "use a smaller model or spread it over more members"
            };
            return Err(Error::Unsupported(format!(
                "the model's {} on {} needs {} bytes in one tensor, more than that device binds in one tensor (maxStorageBufferRange {} bytes): {remedy}",
                f.largest.0,
                m.label(),
                f.largest.1,
                caps.max_storage_buffer_range
            )));
        }
        match per_adapter.iter_mut().find(|a| a.0 == m.adapter().index) {
            Some(a) => {
                a.1 = a.1.saturating_add(f.bytes);
                a.2 += 1;
            }
            None => per_adapter.push((m.adapter().index, f.bytes, 1)),
        }
    }
    for (adapter, bytes, n) in per_adapter {
        let Some(m) = members.iter().find(|m| m.adapter().index == adapter) else { continue };
        let heap = m.adapter().caps.device_local_heap_bytes;
        if heap > 0 && bytes > heap {
            return Err(Error::OutOfDeviceMemory {
                device: m.adapter().name.clone(),
                detail: format!(
                    " (adapter {adapter}): the model needs {:.1} GiB on its {n} member(s) there, its largest device-local memory heap holds {:.1} GiB; nothing was allocated. Use a smaller model, or spread it over more devices",
                    gib(bytes),
                    gib(heap)
                ),
            });
        }
    }
    Ok(())
}

/// One decoder layer: attention, then the MLP, each a tensor-parallel half (`block.rs`).
struct Layer {
    attention: Attention,
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
    /// The norms' weights (all ones).
    norm: Sharded,
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
        let members = group.members().to_vec();
        if members.len() > 1 && comm.is_none() {
            return Err(Error::InvalidArgument("a decoder over several members needs a communicator".into()));
        }
        let weights = split.resolve(&members)?;
        Self::load_share(group, cfg, &weights, 0, comm, None, progress)
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
        Self::load_share(group, cfg, &weights, own.start, None, Some(Box::new(ranks)), |_, _| {})
    }

    /// Loads the share of `group`'s members, global members `first..first + group.len()` of a
    /// model split by `weights` (one per member of every process).
    fn load_share(
        group: &DeviceGroup,
        cfg: DecoderConfig,
        weights: &[f64],
        first: usize,
        comm: Option<Comm>,
        remote: Option<Box<dyn Reducer + Send>>,
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
        let s_h = shift_for_fan_in(h);
        let mut layers = Vec::with_capacity(cfg.layers);
        for l in 0..cfg.layers {
            let seed = |id| matrix_seed(cfg.seed, l, id);
            let caches = || Sharded::full(&members, |i| plan.kv_heads[i].len() * cfg.max_seq * d, 0.0);
            layers.push(Layer {
                attention: Attention {
                    q: ColumnParallelLinear::random_share(
                        &members,
                        h,
                        qd,
                        q_rows.clone(),
                        seed(1),
                        s_h,
                        share,
                    )?,
                    k: ColumnParallelLinear::random_share(
                        &members,
                        h,
                        kvd,
                        kv_rows.clone(),
                        seed(2),
                        s_h,
                        share,
                    )?,
                    v: ColumnParallelLinear::random_share(
                        &members,
                        h,
                        kvd,
                        kv_rows.clone(),
                        seed(3),
                        s_h,
                        share,
                    )?,
                    o: RowParallelLinear::random_share(
                        &members,
                        qd,
                        h,
                        q_rows.clone(),
                        seed(4),
                        shift_for_fan_in(qd),
                        share,
                    )?,
                    k_cache: caches()?,
                    v_cache: caches()?,
                },
                mlp: Mlp {
                    gate: ColumnParallelLinear::random_share(
                        &members,
                        h,
                        f,
                        plan.ffn.clone(),
                        seed(5),
                        s_h,
                        share,
                    )?,
                    up: ColumnParallelLinear::random_share(
                        &members,
                        h,
                        f,
                        plan.ffn.clone(),
                        seed(6),
                        s_h,
                        share,
                    )?,
                    down: RowParallelLinear::random_share(
                        &members,
                        f,
                        h,
                        plan.ffn.clone(),
                        seed(7),
                        shift_for_fan_in(f),
                        share,
                    )?,
                },
            });
            progress(l + 1, cfg.layers);
        }
        let vocab = ColumnParallelLinear::random_share(
            &members,
            h,
            cfg.vocab,
            plan.vocab.clone(),
            matrix_seed(cfg.seed, usize::MAX, 8),
            s_h,
            share,
        )?;
        let embed = members
            .iter()
            .map(|m| {
                let t = m.empty(&[cfg.vocab, h], DType::F16)?;
                // Embedding rows of amplitude 1: k * 2^-10.
                m.transformer().init_weights(&t, matrix_seed(cfg.seed, usize::MAX, 9), h, 0, 0, 10)?;
                Ok(t)
            })
            .collect::<Result<Vec<_>>>()?;
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
            norm: Sharded::full(&members, |_| h, 1.0)?,
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
                    c.record_round_advance(self.rounds_per_step)?;
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
            c.replayed(self.rounds_per_step)?;
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
        // Each half adds its output to the residual stream in the next norm (add_rmsnorm), or,
        // where the all-reduce is fused, sums the members' partials there.
        let norm = |comm: Option<&Comm>, added: Residual<'_>| -> Result<()> {
            for (i, m) in members.iter().enumerate() {
                let (x, w, h) = (act.x.part(i)?, act.norm.part(i)?, act.h.part(i)?);
                match &added {
                    Residual::None => m.transformer().rmsnorm(x, w, h, cfg.eps)?,
                    Residual::Tensor(a) => m.transformer().add_rmsnorm(x, a.part(i)?, w, h, cfg.eps)?,
                    Residual::Fused(r) => {
                        let comm = comm.ok_or_else(|| {
                            Error::InvalidArgument("a fused round without a communicator".into())
                        })?;
                        m.transformer().reduce_add_rmsnorm(&comm.fused_input(r, i)?, x, w, h, cfg.eps)?
                    }
                }
            }
            Ok(())
        };
        let residual = |fused: Option<FusedRound>, t: &'static str| match fused {
            Some(r) => Residual::Fused(r),
            None if t == "o" => Residual::Tensor(&act.o),
            None => Residual::Tensor(&act.d),
        };
        let mut last = Residual::None;
        for layer in &self.layers {
            norm(self.comm.as_ref(), last)?;
            let r = reducer(&mut self.comm, &mut self.remote);
            let o = layer.attention.forward(members, r, &act.h, &act.attention, &act.o, step)?;
            norm(self.comm.as_ref(), residual(o, "o"))?;
            let r = reducer(&mut self.comm, &mut self.remote);
            let d = layer.mlp.forward(members, r, &act.h, &act.mlp, &act.d)?;
            last = residual(d, "d");
        }
        norm(self.comm.as_ref(), last)?;
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
