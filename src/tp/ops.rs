//! The transformer's kernels on one member's tensors: norms, RoPE, attention over the KV cache,
//! the fused q/k/v and gate/up products, the greedy token's selection, the deterministic
//! weights. The decoder (`model`, `block`) is written in these; they are public for the
//! tests that check each against its CPU twin and for users building other decoders. Same
//! rules as the member's general operations: check everything, then record one dispatch.

use vk_native::{BindRange, GpuBuffer};

use crate::error::{Error, Result};
use crate::group::Member;
use crate::kernels::{
    elementwise_groups, row_groups, ArgmaxParams, AttentionParams, EmbedParams, GateUpParams,
    InitWeightsParams, KvStoreParams, NormParams, QkvParams, ReduceNormParams, ReduceNormPollParams,
    RopeParams, SelectTokenParams, SiluMulParams, ADD_RMSNORM, ARGMAX_PAIR, ATTENTION_DECODE, EMBED_F16,
    INIT_WEIGHTS_F16, KV_STORE, MATVEC_GATE_UP_SILU, MATVEC_QKV_ROPE_STORE, REDUCE_ADD_RMSNORM,
    REDUCE_ADD_RMSNORM_POLL, RMSNORM, ROPE, SELECT_TOKEN, SILU_MUL,
};
use crate::tensor::{DType, Tensor};

/// `a * b`, or an error naming `what` when it overflows.
fn mul(what: &str, a: usize, b: usize) -> Result<usize> {
    a.checked_mul(b).ok_or_else(|| Error::InvalidArgument(format!("{what}: {a} * {b} overflows")))
}

/// `a + b`, or an error naming `what` when it overflows.
fn add(what: &str, a: usize, b: usize) -> Result<usize> {
    a.checked_add(b).ok_or_else(|| Error::InvalidArgument(format!("{what}: {a} + {b} overflows")))
}

/// `v` as a kernel parameter (32 bits), or an error naming `what`.
fn word(what: &str, v: usize) -> Result<u32> {
    u32::try_from(v).map_err(|_| {
        Error::InvalidArgument(format!("{what}: {v} does not fit the kernel's 32-bit parameter"))
    })
}

fn need_len(what: &str, t: &Tensor, n: usize) -> Result<()> {
    if t.len() != n {
        return Err(Error::LengthMismatch { what: what.into(), expected: n, got: t.len() });
    }
    Ok(())
}

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

/// Where a decoder kernel takes its position from: `base`, plus the u32 `counter[0]` on the
/// device when there is one. The decoder keeps its position in such a counter, which
/// [`TransformerOps::select_token`]'s decoder form advances at the end of every token, so a
/// token's commands are the same at every step and can be recorded once and replayed. The kernels
/// store nothing past the cache whatever the counter holds; the decoder checks its own count.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Position<'a> {
    pub(crate) base: usize,
    pub(crate) counter: Option<&'a Tensor>,
}

impl<'a> Position<'a> {
    /// `pos` alone (the member's counter that stays 0 is bound).
    pub(crate) fn fixed(pos: usize) -> Self {
        Self { base: pos, counter: None }
    }

    /// The counter's buffer (checked: a u32 tensor of this member), or the member's zero.
    fn buffer(&self, m: &'a Member) -> Result<&'a dyn GpuBuffer> {
        match self.counter {
            Some(t) => {
                t.check_on(&m.shared, "position counter")?;
                t.check_dtype(DType::U32, "position counter")?;
                need_len("position counter", t, 1)?;
                Ok(&t.buffer)
            }
            None => Ok(m.shared.zero_position()?),
        }
    }
}

/// The transformer kernels of one member ([`Member::transformer`]): each records one dispatch
/// into the member's stream, like the member's general operations.
#[derive(Clone, Copy)]
pub struct TransformerOps<'m> {
    m: &'m Member,
}

impl Member {
    /// The transformer's kernels (norms, RoPE, attention, the fused products, the greedy
    /// token) on this member's tensors.
    pub fn transformer(&self) -> TransformerOps<'_> {
        TransformerOps { m: self }
    }
}

impl<'m> TransformerOps<'m> {
    /// The member the kernels run on.
    pub fn member(&self) -> &'m Member {
        self.m
    }

    fn own(&self, ts: &[(&Tensor, &str)]) -> Result<()> {
        ts.iter().try_for_each(|(t, what)| t.check_on(&self.m.shared, what))
    }

    /// `y = x / sqrt(mean(x²) + eps) * w`, all f32 of the same length.
    pub fn rmsnorm(&self, x: &Tensor, w: &Tensor, y: &Tensor, eps: f32) -> Result<()> {
        self.own(&[(x, "rmsnorm x"), (w, "rmsnorm w"), (y, "rmsnorm y")])?;
        for (t, what) in [(x, "rmsnorm x"), (w, "rmsnorm w"), (y, "rmsnorm y")] {
            t.check_dtype(DType::F32, what)?;
            need_len(what, t, x.len())?;
        }
        if x.is_empty() {
            return Ok(());
        }
        let b: [&dyn GpuBuffer; 3] = [&x.buffer, &w.buffer, &y.buffer];
        self.m.shared.dispatch(RMSNORM, &b, &[], &NormParams { n: x.len() as u32, eps }, [1, 1, 1])
    }

    /// `x += r`, then `y = x / sqrt(mean(x²) + eps) * w`, all f32 of one length: the decoder's
    /// residual add and the next norm in one dispatch, with the bits of [`Member::add`] then
    /// [`TransformerOps::rmsnorm`]. `y` must be a tensor apart from `x` and `r`.
    pub fn add_rmsnorm(&self, x: &Tensor, r: &Tensor, w: &Tensor, y: &Tensor, eps: f32) -> Result<()> {
        let named = [(x, "add_rmsnorm x"), (r, "add_rmsnorm r"), (w, "add_rmsnorm w"), (y, "add_rmsnorm y")];
        self.own(&named)?;
        for (t, what) in named {
            t.check_dtype(DType::F32, what)?;
            need_len(what, t, x.len())?;
        }
        if y.id() == x.id() || y.id() == r.id() || x.id() == r.id() {
            return Err(Error::InvalidArgument("add_rmsnorm: x, r and y must be three tensors".into()));
        }
        if x.is_empty() {
            return Ok(());
        }
        let b: [&dyn GpuBuffer; 4] = [&r.buffer, &w.buffer, &x.buffer, &y.buffer];
        self.m.shared.dispatch(ADD_RMSNORM, &b, &[], &NormParams { n: x.len() as u32, eps }, [1, 1, 1])
    }

    /// DevicePoll's phase B fused with `add_rmsnorm`: `x += Σ_j slots[j]` (every member's
    /// partial of a fused all-reduce, in member order, as [`crate::comm::Comm::fused_input`]
    /// describes them), then `y = rmsnorm(x) * w`; bitwise all_reduce then `add_rmsnorm`.
    pub(crate) fn reduce_add_rmsnorm(
        &self,
        input: &crate::comm::fused::FusedInput<'_>,
        x: &Tensor,
        w: &Tensor,
        y: &Tensor,
        eps: f32,
    ) -> Result<()> {
        let named = [(x, "reduce_add_rmsnorm x"), (w, "reduce_add_rmsnorm w"), (y, "reduce_add_rmsnorm y")];
        self.own(&named)?;
        for (t, what) in named {
            t.check_dtype(DType::F32, what)?;
            need_len(what, t, x.len())?;
        }
        if y.id() == x.id() {
            return Err(Error::InvalidArgument("reduce_add_rmsnorm: x and y must be two tensors".into()));
        }
        if x.len() != input.n {
            return Err(Error::LengthMismatch {
                what: "reduce_add_rmsnorm x vs the all-reduce".into(),
                expected: input.n,
                got: x.len(),
            });
        }
        let n = x.len() as u64;
        let last = input.offset + (input.members as u64 - 1) * input.stride + n;
        if x.is_empty() || input.stride < n || last * 4 > input.binding.size || last > u64::from(u32::MAX) {
            return Err(Error::InvalidArgument(format!(
                "reduce_add_rmsnorm: {n} elements do not fit the slots ({} members {} words apart from word {})",
                input.members, input.stride, input.offset
            )));
        }
        let (members, stride, offset) = (input.members as u32, input.stride as u32, input.offset as u32);
        let tensors = [
            input.binding,
            BindRange::whole(&w.buffer),
            BindRange::whole(&x.buffer),
            BindRange::whole(&y.buffer),
        ];
        match &input.wait {
            // The kernel waits itself, then sums.
            Some(wait) => {
                let mut bindings = tensors.to_vec();
                bindings.extend([wait.flags, wait.arrival]);
                self.m.shared.dispatch_ranges(
                    REDUCE_ADD_RMSNORM_POLL,
                    &bindings,
                    &[],
                    &ReduceNormPollParams {
                        n: n as u32,
                        eps,
                        members,
                        stride,
                        offset,
                        round: wait.round,
                        trips: wait.trips,
                        arrive: 1,
                    },
                    [1, 1, 1],
                )
            }
            None => self.m.shared.dispatch_ranges(
                REDUCE_ADD_RMSNORM,
                &tensors,
                &[input.after],
                &ReduceNormParams { n: n as u32, eps, members, stride, offset },
                [1, 1, 1],
            ),
        }
    }

    /// `a = silu(gate) * up`, f32 of one length.
    pub fn silu_mul(&self, gate: &Tensor, up: &Tensor, a: &Tensor) -> Result<()> {
        self.own(&[(gate, "silu_mul gate"), (up, "silu_mul up"), (a, "silu_mul out")])?;
        for (t, what) in [(gate, "silu_mul gate"), (up, "silu_mul up"), (a, "silu_mul out")] {
            t.check_dtype(DType::F32, what)?;
            need_len(what, t, gate.len())?;
        }
        if gate.is_empty() {
            return Ok(());
        }
        let n = gate.len();
        let b: [&dyn GpuBuffer; 3] = [&gate.buffer, &up.buffer, &a.buffer];
        self.m.shared.dispatch(SILU_MUL, &b, &[], &SiluMulParams { n: n as u32 }, elementwise_groups(n))
    }

    /// The MLP's `a = silu(Wg x) * (Wu x)` in one dispatch, with `wg` and `wu` f16 of one shape
    /// `[rows, cols]` (`cols % 8 == 0`), `x` f32 of `cols` and `a` f32 of `rows`. Bitwise equal
    /// to `matvec` of each through `matvec_f16_vec8_rows4` followed by [`TransformerOps::silu_mul`]
    /// (the kernel performs their operations in their order).
    pub fn matvec_gate_up_silu(&self, wg: &Tensor, wu: &Tensor, x: &Tensor, a: &Tensor) -> Result<()> {
        self.own(&[(wg, "gate weights"), (wu, "up weights"), (x, "gate/up input"), (a, "gate/up output")])?;
        wg.check_dtype(DType::F16, "gate weights")?;
        wu.check_dtype(DType::F16, "up weights")?;
        x.check_dtype(DType::F32, "gate/up input")?;
        a.check_dtype(DType::F32, "gate/up output")?;
        let (rows, cols) = wg.matrix_dims("gate weights")?;
        if wu.shape() != wg.shape() {
            return Err(Error::InvalidArgument(format!(
                "gate/up: the up weights have shape {:?}, the gate weights {:?}; they must agree",
                wu.shape(),
                wg.shape()
            )));
        }
        if !cols.is_multiple_of(8) {
            return Err(Error::InvalidArgument(format!(
                "gate/up: {cols} columns; the fused kernel reads 8 f16 at a time (use matvec and silu_mul)"
            )));
        }
        need_len("gate/up input", x, cols)?;
        need_len("gate/up output", a, rows)?;
        if a.id() == x.id() {
            return Err(Error::InvalidArgument("gate/up: the output must not be the input".into()));
        }
        if rows == 0 {
            return Ok(());
        }
        if cols == 0 {
            return self.m.fill(a, 0.0);
        }
        let b: [&dyn GpuBuffer; 4] = [&wg.buffer, &wu.buffer, &x.buffer, &a.buffer];
        self.m.shared.dispatch(
            MATVEC_GATE_UP_SILU,
            &b,
            &[],
            &GateUpParams { rows: word("gate/up rows", rows)?, cols: word("gate/up cols", cols)? },
            row_groups(rows.div_ceil(2)),
        )
    }

    /// `x = f32(table[token[0]])` for an f16 `[vocab, n]` table and a u32 token tensor (ids
    /// past the end are clamped to the last row).
    pub fn embed(&self, table: &Tensor, token: &Tensor, x: &Tensor) -> Result<()> {
        self.own(&[(table, "embed table"), (token, "embed token"), (x, "embed x")])?;
        table.check_dtype(DType::F16, "embed table")?;
        token.check_dtype(DType::U32, "embed token")?;
        x.check_dtype(DType::F32, "embed x")?;
        let &[vocab, n] = table.shape() else {
            return Err(Error::LengthMismatch {
                what: "embed table dimensions".into(),
                expected: 2,
                got: table.shape().len(),
            });
        };
        need_len("embed x vs table columns", x, n)?;
        need_len("embed token", token, 1)?;
        if vocab == 0 || n == 0 {
            return Err(Error::InvalidArgument("embed from an empty table".into()));
        }
        let b: [&dyn GpuBuffer; 3] = [&table.buffer, &token.buffer, &x.buffer];
        let imm = EmbedParams { n: n as u32, vocab: vocab as u32 };
        self.m.shared.dispatch(EMBED_F16, &b, &[], &imm, elementwise_groups(n))
    }

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
        self.own(&[
            (q, "attention q"),
            (k_cache, "attention k"),
            (v_cache, "attention v"),
            (scores, "attention scores"),
            (out, "attention out"),
        ])?;
        for (t, what) in [
            (q, "attention q"),
            (k_cache, "attention k"),
            (v_cache, "attention v"),
            (scores, "attention scores"),
            (out, "attention out"),
        ] {
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
            return Ok(());
        }
        let scale = 1.0 / (s.head_dim as f32).sqrt();
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

    /// One decode step's attention inputs in one dispatch: `q = rope(wq x)` and, at position
    /// `pos` of the caches `[kv_heads, max_seq, head_dim]`, `rope(wk x)` and `wv x` — what
    /// three `matvec`s through `matvec_f16_vec8_rows4`, two [`TransformerOps::rope`]s and
    /// [`TransformerOps::kv_store`] do, bitwise. `wq` is `[q_heads * head_dim, cols]`, `wk` and `wv`
    /// `[kv_heads * head_dim, cols]`, all f16 with `cols % 8 == 0`; `x` f32 of `cols`; `q` f32.
    #[allow(clippy::too_many_arguments)]
    pub fn matvec_qkv_rope_store(
        &self,
        (wq, wk, wv): (&Tensor, &Tensor, &Tensor),
        x: &Tensor,
        q: &Tensor,
        (k_cache, v_cache): (&Tensor, &Tensor),
        head_dim: usize,
        pos: usize,
        max_seq: usize,
        base: f32,
    ) -> Result<()> {
        self.matvec_qkv_rope_store_at(
            (wq, wk, wv),
            x,
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
        x: &Tensor,
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
            (x, "qkv input"),
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
        need_len("qkv input", x, cols)?;
        need_len("q output", q, q_rows)?;
        let cache = mul("qkv cache", kv_rows, max_seq)?;
        need_len("k cache", k_cache, cache)?;
        need_len("v cache", v_cache, cache)?;
        let outs = [q.id(), k_cache.id(), v_cache.id()];
        if outs[0] == outs[1] || outs[0] == outs[2] || outs[1] == outs[2] || outs.contains(&x.id()) {
            return Err(Error::InvalidArgument("qkv: q, the caches and x must be four tensors".into()));
        }
        let pairs = add("qkv rows", q_rows, mul("qkv rows", 2, kv_rows)?)? / 2;
        if pairs == 0 {
            return Ok(());
        }
        if cols == 0 {
            return Err(Error::InvalidArgument("qkv: no input features".into()));
        }
        let imm = QkvParams {
            q_rows: word("qkv query rows", q_rows)?,
            kv_rows: word("qkv key rows", kv_rows)?,
            cols: word("qkv columns", cols)?,
            dim: word("qkv head_dim", head_dim)?,
            pos: word("qkv position", pos)?,
            max_seq: word("qkv max_seq", max_seq)?,
            base,
        };
        word("qkv cache", cache)?;
        let b: [&dyn GpuBuffer; 8] = [
            &wq.buffer,
            &wk.buffer,
            &wv.buffer,
            &x.buffer,
            &q.buffer,
            &k_cache.buffer,
            &v_cache.buffer,
            counter,
        ];
        self.m.shared.dispatch(MATVEC_QKV_ROPE_STORE, &b, &[], &imm, row_groups(pairs.div_ceil(2)))
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

    /// Writes this member's greedy candidate from `logits` (its vocabulary slice starting at
    /// `index_offset`) into slot `slot` of `pairs` (f32, 2 per member) as (value, index).
    pub fn argmax_pair(
        &self,
        logits: &Tensor,
        index_offset: usize,
        pairs: &Tensor,
        slot: usize,
    ) -> Result<()> {
        self.own(&[(logits, "argmax logits"), (pairs, "argmax pairs")])?;
        logits.check_dtype(DType::F32, "argmax logits")?;
        pairs.check_dtype(DType::F32, "argmax pairs")?;
        if slot >= pairs.len() / 2 {
            return Err(Error::IndexOutOfRange {
                what: "argmax pair slot",
                index: slot,
                len: pairs.len() / 2,
                of: "slots in the pairs tensor",
            });
        }
        if add("argmax_pair", index_offset, logits.len())? >= 1 << 24 {
            return Err(Error::InvalidArgument(
                "vocabulary indices past 2^24 do not fit the f32 pair".into(),
            ));
        }
        let imm =
            ArgmaxParams { n: logits.len() as u32, index_offset: index_offset as u32, slot: slot as u32 };
        self.m.shared.dispatch(ARGMAX_PAIR, &[&logits.buffer, &pairs.buffer], &[], &imm, [1, 1, 1])
    }

    /// Picks the greedy token from gathered `pairs` (2 per member) into `token[0]` and
    /// `history[step]` (both u32).
    pub fn select_token(&self, pairs: &Tensor, token: &Tensor, history: &Tensor, step: usize) -> Result<()> {
        self.select_token_at(pairs, token, history, Position::fixed(step), false)
    }

    /// [`TransformerOps::select_token`] at a [`Position`]; with `advance`, it then adds 1 to the
    /// position counter (the decoder's last kernel of a token).
    pub(crate) fn select_token_at(
        &self,
        pairs: &Tensor,
        token: &Tensor,
        history: &Tensor,
        at: Position<'_>,
        advance: bool,
    ) -> Result<()> {
        let (step, counter) = (at.base, at.buffer(self.m)?);
        if advance && at.counter.is_none() {
            return Err(Error::InvalidArgument("select_token: advancing needs a position counter".into()));
        }
        self.own(&[(pairs, "select pairs"), (token, "select token"), (history, "select history")])?;
        pairs.check_dtype(DType::F32, "select pairs")?;
        token.check_dtype(DType::U32, "select token")?;
        history.check_dtype(DType::U32, "select history")?;
        if step >= history.len() {
            return Err(Error::IndexOutOfRange {
                what: "history step",
                index: step,
                len: history.len(),
                of: "steps in the history tensor",
            });
        }
        let b: [&dyn GpuBuffer; 4] = [&pairs.buffer, &token.buffer, &history.buffer, counter];
        let imm = SelectTokenParams {
            members: (pairs.len() / 2) as u32,
            step: step as u32,
            advance: advance as u32,
        };
        self.m.shared.dispatch(SELECT_TOKEN, &b, &[], &imm, [1, 1, 1])
    }

    /// Fills f16 `t` (`[rows, cols]`) with the slice at (`row_offset`, `col_offset`) of the
    /// logical `[*, full_cols]` matrix of deterministic values `k·2^-shift`, `k` in
    /// [-1024, 1023], drawn from `seed` (see `wgsl/init_weights.wgsl`; CPU twin
    /// `tp::init::weight`).
    pub fn init_weights(
        &self,
        t: &Tensor,
        seed: u32,
        full_cols: usize,
        row_offset: usize,
        col_offset: usize,
        shift: u32,
    ) -> Result<()> {
        self.own(&[(t, "init_weights")])?;
        t.check_dtype(DType::F16, "init_weights")?;
        let &[rows, cols] = t.shape() else {
            return Err(Error::LengthMismatch {
                what: "init_weights dimensions".into(),
                expected: 2,
                got: t.shape().len(),
            });
        };
        if add("init_weights", col_offset, cols)? > full_cols {
            return Err(Error::LengthMismatch {
                what: "init_weights columns".into(),
                expected: full_cols,
                got: col_offset.saturating_add(cols),
            });
        }
        if add("init_weights", row_offset, rows)? as u64 * full_cols as u64 > u32::MAX as u64 {
            return Err(Error::InvalidArgument("init_weights: logical matrix past 2^32 elements".into()));
        }
        if rows * cols == 0 {
            return Ok(());
        }
        let imm = InitWeightsParams {
            seed,
            rows: rows as u32,
            cols: cols as u32,
            full_cols: full_cols as u32,
            row_offset: row_offset as u32,
            col_offset: col_offset as u32,
            shift,
        };
        self.m.shared.dispatch(
            INIT_WEIGHTS_F16,
            &[&t.buffer],
            &[],
            &imm,
            elementwise_groups((rows * cols).div_ceil(2)),
        )
    }
}
