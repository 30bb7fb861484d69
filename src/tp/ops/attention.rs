//! Attention at decode: one token over the KV cache, in one dispatch or cut over the positions
//! (flash-decoding). Its inputs (RoPE, the fused q/k/v product, the cache store): `qkv.rs`.

use vk_native::GpuBuffer;

use crate::error::{Error, Result};
use crate::kernels::{
    AttentionCombineParams, AttentionParams, AttentionSplitParams, ATTENTION_COMBINE, ATTENTION_DECODE,
    ATTENTION_SPLIT,
};
use crate::tensor::{DType, Tensor};

use super::transformer::{add, mul, need_len, word, Position, TransformerOps};

/// Parameters of one decode-attention dispatch.
#[derive(Debug, Clone, Copy)]
pub struct AttentionShape {
    /// Query heads on this member.
    pub q_heads: usize,
    /// Query heads per KV head (grouped-query attention).
    pub group: usize,
    /// Elements per head vector (query, key and value alike).
    pub head_dim: usize,
    /// Position of the new token (attends to 0..=pos).
    pub pos: usize,
    /// Capacity of the KV cache in positions.
    pub max_seq: usize,
}

/// Positions per workgroup of [`TransformerOps::attention_split`] (flash-decoding).
pub const ATTENTION_CHUNK: usize = 128;

/// The f32 elements [`TransformerOps::attention_split`]'s partials hold for shape `s`:
/// `q_heads · ⌈max_seq / ATTENTION_CHUNK⌉ · (head_dim + 2)` (each part's weighted sum of V, its
/// maximum and its sum of exponentials).
pub fn attention_partials_len(s: AttentionShape) -> Result<usize> {
    let per_head = mul(
        "attention partials",
        s.max_seq.div_ceil(ATTENTION_CHUNK),
        add("attention partials", s.head_dim, 2)?,
    )?;
    mul("attention partials", s.q_heads, per_head)
}

impl<'m> TransformerOps<'m> {
    /// One token's attention: `q` `[q_heads, head_dim]`, caches `[kv_heads, max_seq, head_dim]`,
    /// `scores` `[q_heads, max_seq]` scratch, `out` `[q_heads, head_dim]`.
    pub fn attention(
        &self,
        q: &Tensor,
        k_cache: &Tensor,
        v_cache: &Tensor,
        scores: &Tensor,
        out: &Tensor,
        s: AttentionShape,
    ) -> Result<()> {
        self.attention_at(q, k_cache, v_cache, scores, out, s, None)
    }

    /// [`TransformerOps::attention`] at position `s.pos` plus `counter[0]` (see [`Position`]).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn attention_at(
        &self,
        q: &Tensor,
        k_cache: &Tensor,
        v_cache: &Tensor,
        scores: &Tensor,
        out: &Tensor,
        s: AttentionShape,
        counter: Option<&Tensor>,
    ) -> Result<()> {
        let position = Position { base: s.pos, counter }.buffer(self.m)?;
        let Some(scale) = self.check_attention(q, k_cache, v_cache, scores, out, s)? else {
            return Ok(());
        };
        let imm = AttentionParams {
            q_heads: s.q_heads as u32,
            dim: s.head_dim as u32,
            group: s.group as u32,
            pos: s.pos as u32,
            max_seq: s.max_seq as u32,
            scale,
        };
        let b: [&dyn GpuBuffer; 6] =
            [&q.buffer, &k_cache.buffer, &v_cache.buffer, &scores.buffer, &out.buffer, position];
        self.m.shared.dispatch(ATTENTION_DECODE, &b, &[], &imm, [s.q_heads as u32, 1, 1])
    }

    /// [`TransformerOps::attention`] cut over the positions (flash-decoding): a workgroup per
    /// query head and [`ATTENTION_CHUNK`] positions of the cache, each leaving its part of the
    /// softmax and of the weighted sum of V in `partials` (f32 of [`attention_partials_len`]),
    /// then a second dispatch weighs the parts into `out`. Two dispatches where `attention` is
    /// one, but a long cache's positions spread over `q_heads · ⌈max_seq / ATTENTION_CHUNK⌉`
    /// workgroups instead of `q_heads`. The same result within rounding (the parts' maxima are
    /// their own, rescaled by `exp(m_c - M)` when combined), not the same bits.
    #[allow(clippy::too_many_arguments)]
    pub fn attention_split(
        &self,
        q: &Tensor,
        k_cache: &Tensor,
        v_cache: &Tensor,
        scores: &Tensor,
        partials: &Tensor,
        out: &Tensor,
        s: AttentionShape,
    ) -> Result<()> {
        self.attention_split_at(q, k_cache, v_cache, scores, partials, out, s, None)
    }

    /// [`TransformerOps::attention_split`] at position `s.pos` plus `counter[0]` (see
    /// [`Position`]).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn attention_split_at(
        &self,
        q: &Tensor,
        k_cache: &Tensor,
        v_cache: &Tensor,
        scores: &Tensor,
        partials: &Tensor,
        out: &Tensor,
        s: AttentionShape,
        counter: Option<&Tensor>,
    ) -> Result<()> {
        let position = Position { base: s.pos, counter }.buffer(self.m)?;
        self.own(&[(partials, "attention partials")])?;
        partials.check_dtype(DType::F32, "attention partials")?;
        let scale = self.check_attention(q, k_cache, v_cache, scores, out, s)?;
        need_len("attention partials", partials, attention_partials_len(s)?)?;
        if [q, k_cache, v_cache, scores, out].iter().any(|t| t.id() == partials.id()) {
            return Err(Error::InvalidArgument(
                "attention: the partials must be a tensor of their own".into(),
            ));
        }
        let Some(scale) = scale else {
            return Ok(());
        };
        let chunks = s.max_seq.div_ceil(ATTENTION_CHUNK);
        let chunks = u16::try_from(chunks).map_err(|_| {
            Error::InvalidArgument(format!(
                "attention: {chunks} chunks of {ATTENTION_CHUNK} positions pass a dispatch's 65535 workgroups"
            ))
        })? as u32;
        let (q_heads, dim, pos, max_seq) =
            (s.q_heads as u32, s.head_dim as u32, s.pos as u32, s.max_seq as u32);
        let chunk = ATTENTION_CHUNK as u32;
        let imm =
            AttentionSplitParams { q_heads, dim, group: s.group as u32, pos, max_seq, scale, chunk, chunks };
        let b: [&dyn GpuBuffer; 6] =
            [&q.buffer, &k_cache.buffer, &v_cache.buffer, &scores.buffer, &partials.buffer, position];
        self.m.shared.dispatch(ATTENTION_SPLIT, &b, &[], &imm, [q_heads, chunks, 1])?;
        let imm = AttentionCombineParams { q_heads, dim, pos, max_seq, chunk, chunks };
        let b: [&dyn GpuBuffer; 3] = [&partials.buffer, &out.buffer, position];
        self.m.shared.dispatch(ATTENTION_COMBINE, &b, &[], &imm, [q_heads, 1, 1])
    }

    /// The checks of every attention call, before any work: the tensors on this member, f32,
    /// of the shape's lengths, the heads in whole groups, the position inside the cache. The
    /// score scale `1/sqrt(head_dim)`, or `None` where there are no heads (nothing to do).
    fn check_attention(
        &self,
        q: &Tensor,
        k_cache: &Tensor,
        v_cache: &Tensor,
        scores: &Tensor,
        out: &Tensor,
        s: AttentionShape,
    ) -> Result<Option<f32>> {
        let named = [
            (q, "attention q"),
            (k_cache, "attention k"),
            (v_cache, "attention v"),
            (scores, "attention scores"),
            (out, "attention out"),
        ];
        self.own(&named)?;
        for (t, what) in named {
            t.check_dtype(DType::F32, what)?;
        }
        if s.group == 0 || !s.q_heads.is_multiple_of(s.group) {
            return Err(Error::InvalidArgument(format!(
                "{} query heads do not form groups of {}",
                s.q_heads, s.group
            )));
        }
        for (what, v) in [
            ("attention q_heads", s.q_heads),
            ("attention head_dim", s.head_dim),
            ("attention max_seq", s.max_seq),
        ] {
            word(what, v)?;
        }
        if s.pos >= s.max_seq {
            return Err(Error::InvalidArgument(format!(
                "position {} is past the KV cache's {} positions",
                s.pos, s.max_seq
            )));
        }
        let kv = s.q_heads / s.group;
        let qd = mul("attention q", s.q_heads, s.head_dim)?;
        let cache = mul("attention cache", mul("attention cache", kv, s.max_seq)?, s.head_dim)?;
        need_len("attention q", q, qd)?;
        need_len("attention out", out, qd)?;
        need_len("attention scores", scores, mul("attention scores", s.q_heads, s.max_seq)?)?;
        need_len("attention k cache", k_cache, cache)?;
        need_len("attention v cache", v_cache, cache)?;
        if s.q_heads == 0 {
            return Ok(None);
        }
        Ok(Some(1.0 / (s.head_dim as f32).sqrt()))
    }
}
