//! Loading a [`Decoder`]: the plan, each member's share of every weight from a
//! [`WeightSource`] (seeded or a checkpoint), its activations and communicator.

use super::state::{Activations, Decoder, Layer};
use crate::comm::Comm;
use crate::error::{Error, Result};
use crate::sample::{Sampling, MAX_CANDIDATES};
use crate::tp::block::{splits_attention, Attention, AttentionScratch, Mlp, MlpScratch, QkvBias};
use crate::tp::config::DecoderConfig;
use crate::tp::linear::{ColumnParallelLinear, RowParallelLinear};
use crate::tp::matrix::Q8Slots;
use crate::tp::ops::{
    attention_partials_len, pending_norm_squares, sampling_chunk_floats, AttentionShape, SAMPLING_MAX_MEMBERS,
};
use crate::tp::plan::{check_fits_with, Plan};
use crate::tp::reduce::Reducer;
use crate::tp::sharded::Sharded;
use crate::tp::split::SplitSpec;
use crate::tp::weights::{Norm, Seeded, Weight, WeightSource};
use std::ops::Range;

use crate::group::DeviceGroup;

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
    /// against every member ([`crate::tp::check_fits`]) before anything is allocated.
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
        check_fits_with(&members, &cfg, &plan, &*source)?;
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
            let mut bias = |ranges: &Vec<Range<usize>>, w: Weight| -> Result<Option<Sharded>> {
                let parts = members
                    .iter()
                    .zip(ranges)
                    .map(|(m, r)| source.bias(m, w, r.clone()))
                    .collect::<Result<Vec<_>>>()?;
                match parts.iter().filter(|p| p.is_some()).count() {
                    0 => Ok(None),
                    n if n == parts.len() => Ok(Some(Sharded::new(parts.into_iter().flatten().collect()))),
                    _ => Err(Error::InvalidArgument(format!(
                        "{w:?}: the source gave a bias to some members only"
                    ))),
                }
            };
            let bias = QkvBias {
                q: bias(&q_rows, Weight::Q(l))?,
                k: bias(&kv_rows, Weight::K(l))?,
                v: bias(&kv_rows, Weight::V(l))?,
            };
            let mut row = |inp, out, ranges: &Vec<Range<usize>>, w: fn(usize) -> Weight| {
                RowParallelLinear::from_slices(&members, inp, out, ranges.clone(), share, |m, r, c| {
                    source.matrix(m, w(l), r, c)
                })
            };
            let (o, down) = (row(qd, h, &q_rows, Weight::O)?, row(f, h, &plan.ffn, Weight::Down)?);
            layers.push(Layer {
                attention_norm: norm(source, Norm::Attention(l))?,
                attention: Attention { q, k, v, o, k_cache: caches()?, v_cache: caches()?, bias },
                mlp_norm: norm(source, Norm::Mlp(l))?,
                mlp: Mlp { gate, up, down },
            });
            // Each layer's uploads finish before the next layer is read: the staging memory
            // they went through is released as the load goes, so the host holds one layer in
            // flight, not the whole model (a checkpoint's 11 GB on the H200 stayed pinned until
            // the end, and the first second of decoding after it ran at two thirds of the speed).
            for m in &members {
                m.synchronize()?;
            }
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
        // A member's room for candidates: 64, or fewer where the gathered candidates would
        // outgrow a hidden-size all-reduce (the size the communicator's slots are made for).
        if total > SAMPLING_MAX_MEMBERS {
            return Err(Error::InvalidArgument(format!(
                "a decoder over {total} members: the next token is drawn from at most {SAMPLING_MAX_MEMBERS} members' candidates"
            )));
        }
        let room = (h / (3 * total)).clamp(1, MAX_CANDIDATES);
        let greedy = Sampling::greedy().device_settings(cfg.vocab);
        // Each member's split-attention partials for its query heads, where the cache is long
        // enough to cut (the length checked: one that overflows is an error).
        let partials = match splits_attention(cfg.max_seq) {
            true => {
                let len = |i: usize| {
                    let (q_heads, group, head_dim) = (kvh(i) * group_size, group_size, d);
                    attention_partials_len(AttentionShape {
                        q_heads,
                        group,
                        head_dim,
                        pos: 0,
                        max_seq: cfg.max_seq,
                    })
                };
                let lens = (0..members.len()).map(len).collect::<Result<Vec<_>>>()?;
                Some(f32s(&|i| lens[i])?)
            }
            false => None,
        };
        let act = Activations {
            x: f32s(&|_| h)?,
            h: f32s(&|_| h)?,
            norm_weighted: f32s(&|_| h)?,
            norm_squares: f32s(&|_| pending_norm_squares(h))?,
            attention: AttentionScratch {
                q: f32s(&|i| kvh(i) * group_size * d)?,
                k: f32s(&|i| kvh(i) * d)?,
                v: f32s(&|i| kvh(i) * d)?,
                scores: f32s(&|i| kvh(i) * group_size * cfg.max_seq)?,
                partials,
                attn: f32s(&|i| kvh(i) * group_size * d)?,
                q8_h: Q8Slots::default(),
                q8_attn: Q8Slots::default(),
            },
            o: f32s(&|_| h)?,
            mlp: MlpScratch {
                g: f32s(&|i| plan.ffn[i].len())?,
                u: f32s(&|i| plan.ffn[i].len())?,
                a: f32s(&|i| plan.ffn[i].len())?,
                q8_h: Q8Slots::default(),
                q8_a: Q8Slots::default(),
            },
            d: f32s(&|_| h)?,
            logits: f32s(&|i| plan.vocab[i].len())?,
            q8_vocab: Q8Slots::default(),
            settings: Sharded::new(
                members.iter().map(|m| m.upload_u32(&greedy)).collect::<Result<Vec<_>>>()?,
            ),
            chunks: f32s(&|i| sampling_chunk_floats(plan.vocab[i].len(), room).max(1))?,
            sampled: f32s(&|_| 3 * room)?,
            candidates: f32s(&|_| 3 * total * room)?,
            token: u32s(1)?,
            history: u32s(cfg.max_seq)?,
            position: u32s(1)?,
            warm_sink: u32s(1)?,
        };
        for m in &members {
            m.flush()?;
            // The load's staging buffers hold pinned host memory; decoding needs none.
            m.shared.release_uploads();
        }
        Ok(Self {
            cfg,
            plan,
            members,
            comm,
            remote,
            embed,
            vocab,
            final_norm,
            layers,
            act,
            pos: 0,
            step_host_time: std::time::Duration::ZERO,
            replay: true,
            fold_norms: false,
            warm_l2_bytes: 0,
            split_attention: true,
            recorded: None,
            rounds_per_step: 0,
            all_reduces_per_step: 0,
            broken: None,
            sampling: Sampling::greedy(),
            room,
        })
    }
}
