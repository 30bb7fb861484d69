//! The attention's inputs at decode: RoPE, the q/k/v products fused with RoPE and the KV-cache
//! store, and the store alone.

use vk_native::GpuBuffer;

use crate::error::{Error, Result};
use crate::kernels::{
    elementwise_groups, row_groups, KvStoreParams, QkvNormedParams, QkvParams, RopeParams, KV_STORE,
    MATVEC_QKV_ROPE_STORE, MATVEC_QKV_ROPE_STORE_NORMED, ROPE,
};
use crate::tensor::{DType, Tensor};

use super::transformer::{add, mul, need_len, word, Position, ProductInput, TransformerOps};

/// Row pairs (rotated together by RoPE) per workgroup of `matvec_qkv_rope_store`: 128 / LANES
/// in its WGSL (eight dot products of 32 threads).
const QKV_PAIRS_PER_WORKGROUP: usize = 4;

impl<'m> TransformerOps<'m> {
    /// Rotary position embedding in place on `heads` vectors of `head_dim` (even) in `v`.
    pub fn rope(&self, v: &Tensor, heads: usize, head_dim: usize, pos: usize, base: f32) -> Result<()> {
        self.rope_at(v, heads, head_dim, Position::fixed(pos), base)
    }

    /// [`TransformerOps::rope`] at a [`Position`].
    pub(crate) fn rope_at(
        &self,
        v: &Tensor,
        heads: usize,
        head_dim: usize,
        at: Position<'_>,
        base: f32,
    ) -> Result<()> {
        let pos = at.base;
        let counter = at.buffer(self.m)?;
        self.own(&[(v, "rope")])?;
        v.check_dtype(DType::F32, "rope")?;
        need_len("rope heads * head_dim", v, mul("rope", heads, head_dim)?)?;
        word("rope position", pos)?;
        if !head_dim.is_multiple_of(2) {
            return Err(Error::InvalidArgument(format!("rope needs an even head dimension, got {head_dim}")));
        }
        if heads == 0 {
            return Ok(());
        }
        let imm = RopeParams { heads: heads as u32, dim: head_dim as u32, pos: pos as u32, base };
        self.m.shared.dispatch(
            ROPE,
            &[&v.buffer, counter],
            &[],
            &imm,
            elementwise_groups(heads * head_dim / 2),
        )
    }

    /// One decode step's attention inputs in one dispatch: `q = rope(wq x)` and, at position
    /// `pos` of the caches `[kv_heads, max_seq, head_dim]`, `rope(wk x)` and `wv x` — what
    /// three `matvec`s through `matvec_f16_vec8_rows8`, two [`TransformerOps::rope`]s and
    /// [`TransformerOps::kv_store`] do, bitwise. `wq` is `[q_heads * head_dim, cols]`, `wk` and `wv`
    /// `[kv_heads * head_dim, cols]`, all f16 with `cols % 8 == 0`; `x` f32 of `cols`; `q` f32.
    /// `x` may be [`ProductInput::PendingNorm`]: the products then read the RMSNorm of a vector,
    /// without that dispatch: the scale multiplies each finished dot product (within rounding of
    /// [`TransformerOps::rmsnorm`] before them, not bitwise).
    #[allow(clippy::too_many_arguments)]
    pub fn matvec_qkv_rope_store<'a>(
        &self,
        (wq, wk, wv): (&Tensor, &Tensor, &Tensor),
        x: impl Into<ProductInput<'a>>,
        q: &Tensor,
        (k_cache, v_cache): (&Tensor, &Tensor),
        head_dim: usize,
        pos: usize,
        max_seq: usize,
        base: f32,
    ) -> Result<()> {
        self.matvec_qkv_rope_store_at(
            (wq, wk, wv),
            x.into(),
            q,
            (k_cache, v_cache),
            head_dim,
            Position::fixed(pos),
            max_seq,
            base,
        )
    }

    /// [`TransformerOps::matvec_qkv_rope_store`] at a [`Position`].
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn matvec_qkv_rope_store_at(
        &self,
        (wq, wk, wv): (&Tensor, &Tensor, &Tensor),
        x: ProductInput<'_>,
        q: &Tensor,
        (k_cache, v_cache): (&Tensor, &Tensor),
        head_dim: usize,
        at: Position<'_>,
        max_seq: usize,
        base: f32,
    ) -> Result<()> {
        let (pos, counter) = (at.base, at.buffer(self.m)?);
        let named = [
            (wq, "q weights"),
            (wk, "k weights"),
            (wv, "v weights"),
            (q, "q output"),
            (k_cache, "k cache"),
            (v_cache, "v cache"),
        ];
        self.own(&named)?;
        for (t, what) in &named[..3] {
            t.check_dtype(DType::F16, what)?;
        }
        for (t, what) in &named[3..] {
            t.check_dtype(DType::F32, what)?;
        }
        let ((q_rows, cols), (kv_rows, kc), (vr, vc)) =
            (wq.matrix_dims("q weights")?, wk.matrix_dims("k weights")?, wv.matrix_dims("v weights")?);
        if (kv_rows, kc) != (vr, vc) || kc != cols {
            return Err(Error::InvalidArgument(format!(
                "qkv: weights of shapes {:?}, {:?}, {:?}; k and v must agree and every one have {cols} columns",
                wq.shape(),
                wk.shape(),
                wv.shape()
            )));
        }
        if head_dim == 0
            || !head_dim.is_multiple_of(2)
            || !q_rows.is_multiple_of(head_dim)
            || !kv_rows.is_multiple_of(head_dim)
        {
            return Err(Error::InvalidArgument(format!(
                "qkv: head_dim {head_dim} must be even and divide the {q_rows} query and {kv_rows} key rows"
            )));
        }
        if !cols.is_multiple_of(8) {
            return Err(Error::InvalidArgument(format!(
                "qkv: {cols} columns; the fused kernel reads 8 f16 at a time (use matvec, rope and kv_store)"
            )));
        }
        if pos >= max_seq {
            return Err(Error::InvalidArgument(format!(
                "position {pos} is past the KV cache's {max_seq} positions"
            )));
        }
        x.check(self, "qkv", cols)?;
        need_len("q output", q, q_rows)?;
        let cache = mul("qkv cache", kv_rows, max_seq)?;
        need_len("k cache", k_cache, cache)?;
        need_len("v cache", v_cache, cache)?;
        let outs = [q.id(), k_cache.id(), v_cache.id()];
        if outs[0] == outs[1]
            || outs[0] == outs[2]
            || outs[1] == outs[2]
            || [q, k_cache, v_cache].iter().any(|t| x.reads(t))
        {
            return Err(Error::InvalidArgument("qkv: q, the caches and the input must be apart".into()));
        }
        let pairs = add("qkv rows", q_rows, mul("qkv rows", 2, kv_rows)?)? / 2;
        if pairs == 0 {
            return Ok(());
        }
        if cols == 0 {
            return Err(Error::InvalidArgument("qkv: no input features".into()));
        }
        let (q_rows, kv_rows) = (word("qkv query rows", q_rows)?, word("qkv key rows", kv_rows)?);
        let (cols, dim) = (word("qkv columns", cols)?, word("qkv head_dim", head_dim)?);
        let (pos, max_seq) = (word("qkv position", pos)?, word("qkv max_seq", max_seq)?);
        word("qkv cache", cache)?;
        let groups = row_groups(pairs.div_ceil(QKV_PAIRS_PER_WORKGROUP));
        let outs: [&dyn GpuBuffer; 4] = [&q.buffer, &k_cache.buffer, &v_cache.buffer, counter];
        match x {
            ProductInput::Plain(x) => {
                let imm = QkvParams { q_rows, kv_rows, cols, dim, pos, max_seq, base };
                let b: [&dyn GpuBuffer; 8] =
                    [&wq.buffer, &wk.buffer, &wv.buffer, &x.buffer, outs[0], outs[1], outs[2], outs[3]];
                self.m.shared.dispatch(MATVEC_QKV_ROPE_STORE, &b, &[], &imm, groups)
            }
            ProductInput::PendingNorm { weighted, squares, eps } => {
                let squares_len = word("qkv squares", squares.len())?;
                let imm = QkvNormedParams {
                    q_rows,
                    kv_rows,
                    cols,
                    dim,
                    pos,
                    max_seq,
                    base,
                    eps,
                    squares: squares_len,
                };
                let b: [&dyn GpuBuffer; 9] = [
                    &wq.buffer,
                    &wk.buffer,
                    &wv.buffer,
                    &weighted.buffer,
                    &squares.buffer,
                    outs[0],
                    outs[1],
                    outs[2],
                    outs[3],
                ];
                self.m.shared.dispatch(MATVEC_QKV_ROPE_STORE_NORMED, &b, &[], &imm, groups)
            }
        }
    }

    /// Stores one decode step's keys and values, `k` and `v` `[heads, head_dim]`, at position
    /// `pos` of the caches `[heads, max_seq, head_dim]` (all f32), in one dispatch (it replaced
    /// two `copy_region`s per head, each a dispatch and most with a barrier before it).
    #[allow(clippy::too_many_arguments)]
    pub fn kv_store(
        &self,
        k: &Tensor,
        v: &Tensor,
        k_cache: &Tensor,
        v_cache: &Tensor,
        heads: usize,
        head_dim: usize,
        pos: usize,
        max_seq: usize,
    ) -> Result<()> {
        self.kv_store_at(k, v, k_cache, v_cache, heads, head_dim, Position::fixed(pos), max_seq)
    }

    /// [`TransformerOps::kv_store`] at a [`Position`].
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn kv_store_at(
        &self,
        k: &Tensor,
        v: &Tensor,
        k_cache: &Tensor,
        v_cache: &Tensor,
        heads: usize,
        head_dim: usize,
        at: Position<'_>,
        max_seq: usize,
    ) -> Result<()> {
        let (pos, counter) = (at.base, at.buffer(self.m)?);
        let named = [
            (k, "kv_store k"),
            (v, "kv_store v"),
            (k_cache, "kv_store k cache"),
            (v_cache, "kv_store v cache"),
        ];
        self.own(&named)?;
        for (t, what) in named {
            t.check_dtype(DType::F32, what)?;
        }
        let step = mul("kv_store", heads, head_dim)?;
        let cache = mul("kv_store cache", step, max_seq)?;
        need_len("kv_store k", k, step)?;
        need_len("kv_store v", v, step)?;
        need_len("kv_store k cache", k_cache, cache)?;
        need_len("kv_store v cache", v_cache, cache)?;
        word("kv_store cache", cache)?;
        if pos >= max_seq {
            return Err(Error::InvalidArgument(format!(
                "position {pos} is past the KV cache's {max_seq} positions"
            )));
        }
        if k_cache.id() == v_cache.id()
            || [k.id(), v.id()].iter().any(|&i| i == k_cache.id() || i == v_cache.id())
        {
            return Err(Error::InvalidArgument(
                "kv_store: the caches must be two tensors apart from k and v".into(),
            ));
        }
        if step == 0 {
            return Ok(());
        }
        let imm = KvStoreParams {
            heads: heads as u32,
            dim: head_dim as u32,
            pos: pos as u32,
            max_seq: max_seq as u32,
        };
        self.m.shared.dispatch(
            KV_STORE,
            &[&k.buffer, &v.buffer, &k_cache.buffer, &v_cache.buffer, counter],
            &[],
            &imm,
            elementwise_groups(step),
        )
    }
}
