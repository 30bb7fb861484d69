//! The decoder block's two halves as tensor-parallel layers, the way candle's tensor-parallel
//! llama reads: attention is column-parallel q, k and v (whole KV-head groups per member), RoPE,
//! the KV-cache store and attention on the member's heads, then the row-parallel output
//! projection, whose partial sums the all-reduce adds; the MLP is column-parallel gate and up,
//! SiLU·mul, then the row-parallel down projection and its all-reduce.
//!
//! Each half ends with its row-parallel layer's all-reduce and the residual norm that consumes
//! it (`RowParallelLinear::forward_add_norm`), so a round opens and closes inside the layer.
//! Folded on one member, the output projection leaves the norm pending ([`Normed`]) and the
//! next half's fused product finishes it on its way in; the unfused paths write it out first.
//!
//! Where the hidden size is a multiple of 8 and the weights are f16, q, k, v, the ropes and the
//! cache store run as one kernel (`TransformerOps::matvec_qkv_rope_store`) and gate, up and
//! SiLU·mul as another (`TransformerOps::matvec_gate_up_silu`), each bitwise the dispatches it
//! replaces; quantized weights (`Matrix::Quant`) and q/k/v biases (qwen2's, added after each
//! product, before RoPE) run those dispatches.

use super::ops::{AttentionShape, Position, ATTENTION_CHUNK};
use super::reduce::Reducer;
use crate::error::Result;
use crate::group::Member;
use crate::tensor::Tensor;

use super::linear::{ColumnParallelLinear, RowParallelLinear};
use super::matrix::{ProductX, Q8Slots};
use super::residual::{AddNorm, Normed};
use super::sharded::Sharded;

/// Activations the attention half writes on the way (each member's heads).
pub(crate) struct AttentionScratch {
    pub(crate) q: Sharded,
    pub(crate) k: Sharded,
    pub(crate) v: Sharded,
    pub(crate) scores: Sharded,
    /// The split attention's parts, where the cache is long enough to cut its positions over
    /// workgroups ([`splits_attention`]).
    pub(crate) partials: Option<Sharded>,
    pub(crate) attn: Sharded,
    /// The normed input as 8-bit blocks for q, k and v, and the attention's output for `o`,
    /// where activations are quantized ([`crate::tp::Decoder::set_q8_activations`]).
    pub(crate) q8_h: Q8Slots,
    pub(crate) q8_attn: Q8Slots,
}

/// Whether the decoder cuts attention over the positions
/// ([`crate::tp::TransformerOps::attention_split`]): where the cache holds more than two
/// chunks. The split costs a second dispatch at every position and pays where many positions
/// are live (one workgroup per head walks them PASS at a time: 10.8 µs per layer at 20
/// positions, 39.9 at 240 on one H200, docs/BENCHMARKS.md, "27B-class decode"); a step is the
/// same commands at every position, so the choice is the cache's length, not the position's.
/// The threshold is not measured yet; [`crate::tp::Decoder::set_split_attention`] turns the
/// split off for a comparison.
pub(crate) fn splits_attention(max_seq: usize) -> bool {
    max_seq > 2 * ATTENTION_CHUNK
}

/// Activations the MLP half writes on the way (each member's hidden features).
pub(crate) struct MlpScratch {
    pub(crate) g: Sharded,
    pub(crate) u: Sharded,
    pub(crate) a: Sharded,
    /// The normed input as 8-bit blocks for gate and up, and SiLU·mul's output for `down`,
    /// where activations are quantized.
    pub(crate) q8_h: Q8Slots,
    pub(crate) q8_a: Q8Slots,
}

/// Where the step is: each member's position counter (the GPU advances it at the end of a
/// token, so a step's commands are the same at every position), and the model's shape it needs.
#[derive(Clone, Copy)]
pub(crate) struct Step<'a> {
    pub(crate) position: &'a Sharded,
    pub(crate) max_seq: usize,
    pub(crate) head_dim: usize,
    /// Query heads per KV head.
    pub(crate) group: usize,
    pub(crate) rope_base: f32,
    /// The L2 warm of each product's weights beside the dispatch before it.
    pub(crate) warm: Warm<'a>,
    /// Whether attention is cut over the positions where the layer holds the partials for it
    /// ([`crate::tp::Decoder::set_split_attention`]).
    pub(crate) split_attention: bool,
}

/// How much of the next product's weights a decode step fetches into the GPU's L2 beside each
/// dispatch that leaves most of the GPU idle ([`crate::tp::TransformerOps::warm_l2`]):
/// attention before `o`, and each norm before q/k/v, gate/up or the vocabulary. The fetches
/// change no value; they move the start of the product's stream into time the GPU would
/// otherwise spend waiting ([`crate::tp::Decoder::set_warm_l2`]).
#[derive(Clone, Copy)]
pub(crate) struct Warm<'a> {
    /// Bytes per product, shared between the matrices it reads first; 0: none.
    pub(crate) bytes: u64,
    /// Each member's u32 tensor for `warm_l2`'s store.
    pub(crate) sink: &'a Sharded,
}

impl Warm<'_> {
    /// Records member `i`'s warm of the first bytes of `first` (the matrices a product reads
    /// from its first workgroups on), the bytes shared evenly; nothing where it is off.
    pub(crate) fn record(&self, m: &Member, i: usize, first: &[&Tensor]) -> Result<()> {
        if self.bytes == 0 || first.is_empty() {
            return Ok(());
        }
        let each = self.bytes / first.len() as u64;
        let tensors: Vec<(&Tensor, u64)> = first.iter().map(|t| (*t, each)).collect();
        m.transformer().warm_l2(&tensors, self.sink.part(i)?)
    }
}

/// Attention over one layer's cache, its weights split by KV-head groups.
pub(crate) struct Attention {
    pub(crate) q: ColumnParallelLinear,
    pub(crate) k: ColumnParallelLinear,
    pub(crate) v: ColumnParallelLinear,
    pub(crate) o: RowParallelLinear,
    /// Each member's keys and values of its KV heads, `[heads, max_seq, head_dim]`.
    pub(crate) k_cache: Sharded,
    pub(crate) v_cache: Sharded,
    /// The biases of q, k and v (each member's rows), where the model has them (qwen2).
    pub(crate) bias: QkvBias,
}

/// The biases added after the q, k and v products (before RoPE), each where the model has one.
#[derive(Default)]
pub(crate) struct QkvBias {
    pub(crate) q: Option<Sharded>,
    pub(crate) k: Option<Sharded>,
    pub(crate) v: Option<Sharded>,
}

impl QkvBias {
    fn any(&self) -> bool {
        self.q.is_some() || self.k.is_some() || self.v.is_some()
    }
}

impl Attention {
    /// The matrices member `i`'s q/k/v products read first: q's (the fused kernel's first
    /// workgroups and the unfused path's first product both start there).
    pub(crate) fn first_weights(&self, i: usize) -> Result<Vec<&Tensor>> {
        Ok(vec![self.q.matrix(i)?.tensor()])
    }

    /// `x += o(attention(q(h), cache + (k(h), v(h)) at the step's position))` from the normed
    /// `h`, summed over the members, then `h = norm(x)` ([`AddNorm`], returned as it stands):
    /// every member's `x` and `h` bitwise equal. `h` is replicated; `partial` holds the output
    /// projection's partials where the all-reduce is not fused into the norm.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn forward<'a>(
        &self,
        members: &[Member],
        comm: Option<&mut dyn Reducer>,
        s: &AttentionScratch,
        partial: &Sharded,
        step: Step<'_>,
        h: Normed<'_>,
        norm: AddNorm<'a>,
    ) -> Result<Normed<'a>> {
        let d = step.head_dim;
        for (i, m) in members.iter().enumerate() {
            let q = s.q.part(i)?;
            let caches = (self.k_cache.part(i)?, self.v_cache.part(i)?);
            let kv_heads = self.k.ranges[i].len() / d;
            let counter = step.position.part(i)?;
            let at = Position { base: 0, counter: Some(counter) };
            let dense = (self.q.matrix(i)?.dense(), self.k.matrix(i)?.dense(), self.v.matrix(i)?.dense());
            let fused = self.q.in_features.is_multiple_of(8) && !self.bias.any();
            if let (true, (Some(wq), Some(wk), Some(wv))) = (fused, dense) {
                let weights = (wq, wk, wv);
                m.transformer().matvec_qkv_rope_store_at(
                    weights,
                    h.product_input(i)?,
                    q,
                    caches,
                    d,
                    at,
                    step.max_seq,
                    step.rope_base,
                )?;
            } else {
                let (k, v) = (s.k.part(i)?, s.v.part(i)?);
                let weights = [self.q.matrix(i)?, self.k.matrix(i)?, self.v.matrix(i)?];
                let hi = ProductX::for_readers(m, h.tensor(m, i)?, s.q8_h.get(i), &weights)?;
                for (w, y) in weights.into_iter().zip([q, k, v]) {
                    w.matvec_x(m, hi, y)?;
                }
                for (bias, y) in [(&self.bias.q, q), (&self.bias.k, k), (&self.bias.v, v)] {
                    if let Some(b) = bias {
                        m.add(y, b.part(i)?)?;
                    }
                }
                m.transformer().rope_at(q, kv_heads * step.group, d, at, step.rope_base)?;
                m.transformer().rope_at(k, kv_heads, d, at, step.rope_base)?;
                m.transformer().kv_store_at(k, v, caches.0, caches.1, kv_heads, d, at, step.max_seq)?;
            }
            let shape = AttentionShape {
                q_heads: kv_heads * step.group,
                group: step.group,
                head_dim: d,
                pos: 0,
                max_seq: step.max_seq,
            };
            let (scores, out) = (s.scores.part(i)?, s.attn.part(i)?);
            match s.partials.as_ref().filter(|_| step.split_attention) {
                Some(partials) => m.transformer().attention_split_at(
                    q,
                    caches.0,
                    caches.1,
                    scores,
                    partials.part(i)?,
                    out,
                    shape,
                    Some(counter),
                )?,
                None => {
                    m.transformer().attention_at(q, caches.0, caches.1, scores, out, shape, Some(counter))?
                }
            }
            step.warm.record(m, i, &[self.o.matrix(i)?.tensor()])?;
        }
        self.o.forward_add_norm(members, comm, &s.attn.refs(), &s.q8_attn, partial, norm)
    }
}

/// The MLP, its hidden features split across the members.
pub(crate) struct Mlp {
    pub(crate) gate: ColumnParallelLinear,
    pub(crate) up: ColumnParallelLinear,
    pub(crate) down: RowParallelLinear,
}

impl Mlp {
    /// The matrices member `i`'s gate/up products read first: both, row by row, in the fused
    /// kernel; gate's, whose product comes first, otherwise.
    pub(crate) fn first_weights(&self, i: usize) -> Result<Vec<&Tensor>> {
        let (gate, up) = (self.gate.matrix(i)?, self.up.matrix(i)?);
        Ok(match (self.gate.in_features.is_multiple_of(8), gate.dense(), up.dense()) {
            (true, Some(g), Some(u)) => vec![g, u],
            _ => vec![gate.tensor()],
        })
    }

    /// `x += down(silu(gate(h)) * up(h))` from the normed `h`, summed over the members, then
    /// `h = norm(x)` ([`AddNorm`], returned as it stands), every member's `x` and `h` bitwise
    /// equal; `partial` as in [`Attention::forward`].
    pub(crate) fn forward<'a>(
        &self,
        members: &[Member],
        comm: Option<&mut dyn Reducer>,
        s: &MlpScratch,
        partial: &Sharded,
        h: Normed<'_>,
        norm: AddNorm<'a>,
    ) -> Result<Normed<'a>> {
        for (i, m) in members.iter().enumerate() {
            let a = s.a.part(i)?;
            let dense = (self.gate.matrix(i)?.dense(), self.up.matrix(i)?.dense());
            if let (true, (Some(wg), Some(wu))) = (self.gate.in_features.is_multiple_of(8), dense) {
                m.transformer().matvec_gate_up_silu(wg, wu, h.product_input(i)?, a)?;
            } else {
                let (g, u) = (s.g.part(i)?, s.u.part(i)?);
                let weights = [self.gate.matrix(i)?, self.up.matrix(i)?];
                let hi = ProductX::for_readers(m, h.tensor(m, i)?, s.q8_h.get(i), &weights)?;
                weights[0].matvec_x(m, hi, g)?;
                weights[1].matvec_x(m, hi, u)?;
                m.transformer().silu_mul(g, u, a)?;
            }
        }
        self.down.forward_add_norm(members, comm, &s.a.refs(), &s.q8_a, partial, norm)
    }
}
