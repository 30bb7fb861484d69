//! [`Decoder`]'s state (its layers, activations and recordings) and what can be read of it.

use crate::comm::Comm;
use crate::error::Result;
use crate::sample::Sampling;
use crate::tp::block::{Attention, AttentionScratch, Mlp, MlpScratch};
use crate::tp::config::DecoderConfig;
use crate::tp::linear::ColumnParallelLinear;
use crate::tp::matrix::Matrix;
use crate::tp::matrix::Q8Slots;
use crate::tp::plan::Plan;
use crate::tp::reduce::Reducer;
use crate::tp::sharded::Sharded;

use crate::group::{Member, MemberStats};
use crate::tensor::Tensor;
use vk_native::Replay;

/// One decoder layer: attention, then the MLP, each a tensor-parallel half (`block.rs`).
pub(super) struct Layer {
    pub(super) attention_norm: Sharded,
    pub(super) attention: Attention,
    pub(super) mlp_norm: Sharded,
    pub(super) mlp: Mlp,
}

/// The activations of a step, each across the members, made once at load.
pub(super) struct Activations {
    /// The residual stream (replicated).
    pub(super) x: Sharded,
    /// The normed input of the next half (replicated).
    pub(super) h: Sharded,
    /// A norm left pending on one member ([`Decoder::set_fold_norms`]): the stream times the
    /// norm's weight, and the stream's partial sums of squares.
    pub(super) norm_weighted: Sharded,
    pub(super) norm_squares: Sharded,
    pub(super) attention: AttentionScratch,
    /// The attention's output, all-reduced (replicated).
    pub(super) o: Sharded,
    pub(super) mlp: MlpScratch,
    /// The MLP's output, all-reduced (replicated).
    pub(super) d: Sharded,
    /// Each member's slice of the vocabulary's logits.
    pub(super) logits: Sharded,
    /// The final norm's output as 8-bit blocks for the vocabulary's product, where activations
    /// are quantized ([`Decoder::set_q8_activations`]).
    pub(super) q8_vocab: Q8Slots,
    /// The draw's settings (u32, [`crate::model::Sampling::device_settings`]), read by the
    /// step's kernels when they run.
    pub(super) settings: Sharded,
    /// Each member's scratch for its candidates (the best of every 2048 logits).
    pub(super) chunks: Sharded,
    /// Each member's own candidates for the next token (3 f32 each, `room` of them).
    pub(super) sampled: Sharded,
    /// Every member's candidates, in global member order: `sampled` all-gathered (with one
    /// member, its candidates written there directly).
    pub(super) candidates: Sharded,
    /// The token the next step embeds, and every token chosen so far (u32).
    pub(super) token: Sharded,
    pub(super) history: Sharded,
    /// The position of the next step (u32), advanced on the devices by the step's last kernel.
    pub(super) position: Sharded,
    /// What `warm_l2` stores into (u32; [`Decoder::set_warm_l2`]): read by nothing.
    pub(super) warm_sink: Sharded,
}

impl Activations {
    /// The vectors of the inputs quantized to 8-bit blocks ([`Decoder::set_q8_activations`]),
    /// in the order of their readers: q/k/v, `o`, gate/up, `down`, the vocabulary.
    pub(super) fn q8_slots_mut(&mut self) -> [&mut Q8Slots; 5] {
        let (a, m) = (&mut self.attention, &mut self.mlp);
        [&mut a.q8_h, &mut a.q8_attn, &mut m.q8_h, &mut m.q8_a, &mut self.q8_vocab]
    }

    /// Whether any input is quantized.
    pub(super) fn quantizes(&self) -> bool {
        let (a, m) = (&self.attention, &self.mlp);
        [&a.q8_h, &a.q8_attn, &m.q8_h, &m.q8_a, &self.q8_vocab].iter().any(|s| !s.0.is_empty())
    }
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
pub(super) fn reducer<'a>(
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
    pub(super) members: Vec<Member>,
    pub(super) comm: Option<Comm>,
    /// The communicator across MPI ranks when this process holds one share of a model split
    /// over several processes (`comm` is then `None`).
    pub(super) remote: Option<Box<dyn Reducer + Send>>,
    pub(super) embed: Vec<Tensor>,
    pub(super) vocab: ColumnParallelLinear,
    pub(super) final_norm: Sharded,
    pub(super) layers: Vec<Layer>,
    pub(super) act: Activations,
    /// Tokens decoded so far (the next position); the devices hold it too, in `act.position`.
    pub(super) pos: usize,
    /// Host time spent in `step` so far.
    pub(super) step_host_time: std::time::Duration,
    /// Whether steps are recorded once and replayed (one member only: see [`Decoder::replays`]).
    pub(super) replay: bool,
    /// Whether the residual norms are left to the fused products that read them (one member
    /// without a communicator: see [`Decoder::set_fold_norms`]).
    pub(super) fold_norms: bool,
    /// Bytes of each product's first weights fetched into L2 beside the dispatch before it
    /// ([`Decoder::set_warm_l2`]); 0: none.
    pub(super) warm_l2_bytes: u64,
    /// Whether attention is cut over the positions where the cache is long enough
    /// ([`Decoder::set_split_attention`]).
    pub(super) split_attention: bool,
    /// Each member's recording of a step, once made.
    pub(super) recorded: Option<Vec<Replay>>,
    /// Rounds in the recording (all-reduces and the all-gather).
    pub(super) rounds_per_step: u64,
    /// How many of those rounds are all-reduces (the rest: the candidates' all-gather).
    pub(super) all_reduces_per_step: u64,
    /// Why the decoder refuses further steps (its members were left out of step).
    pub(super) broken: Option<String>,
    /// How the next tokens are drawn on the devices.
    pub(super) sampling: Sampling,
    /// Candidates each member keeps for a draw.
    pub(super) room: usize,
}

impl Decoder {
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

    /// Bytes of weight matrices each member holds (the vocabulary projection and every
    /// layer's; not the embedding table or the norms), as their devices store them: quantized
    /// slices take their blocks' bytes ([`crate::tp::Matrix::bytes`]).
    pub fn weight_bytes(&self) -> Vec<u64> {
        (0..self.members.len())
            .map(|i| {
                let matrices = std::iter::once(self.vocab.matrix(i)).chain(self.layer_matrices(i));
                matrices.filter_map(|m| m.ok()).map(|m| m.bytes()).sum()
            })
            .collect()
    }

    /// Member `i`'s slices of every layer's matrices (q, k, v, o, gate, up, down), layer by layer.
    pub(super) fn layer_matrices(&self, i: usize) -> impl Iterator<Item = Result<&Matrix>> {
        self.layers.iter().flat_map(move |l| {
            let (a, m) = (&l.attention, &l.mlp);
            [
                a.q.matrix(i),
                a.k.matrix(i),
                a.v.matrix(i),
                a.o.matrix(i),
                m.gate.matrix(i),
                m.up.matrix(i),
                m.down.matrix(i),
            ]
        })
    }
}
