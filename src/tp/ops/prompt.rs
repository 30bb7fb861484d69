//! The prompt's kernels: each runs a decode kernel's work over `positions` rows at once — the
//! embedding of every token, the norms, RoPE and the KV-cache store of every row at its own
//! position, causal attention, a bias on every row. Row t of a chunk starting at position
//! `first` is at position `first + t`.

use vk_native::GpuBuffer;

use crate::error::{Error, Result};
use crate::kernels::{
    elementwise_groups, AddRowsParams, EmbedRowsParams, PromptAttentionParams, RowsKvParams, RowsNormParams,
    RowsRopeParams, ADD_ROWS, ATTENTION_PROMPT, EMBED_ROWS, KV_STORE_ROWS, RMSNORM_ROWS, ROPE_ROWS,
};
use crate::tensor::{DType, Tensor};

use super::transformer::{mul, need_len, word, TransformerOps};

/// Longest head the prompt's attention takes (one output dimension per invocation).
pub const PROMPT_MAX_HEAD_DIM: usize = 256;

/// The shape of a chunk of prompt rows against a layer's KV cache.
#[derive(Debug, Clone, Copy)]
pub struct PromptShape {
    /// Rows in the chunk.
    pub positions: usize,
    /// The position of the first row.
    pub first: usize,
    /// Capacity of the KV cache in positions.
    pub max_seq: usize,
}

impl PromptShape {
    /// Checks that the rows fit the cache and the kernels' 32-bit positions.
    fn check(&self, what: &str) -> Result<()> {
        let end = self.first.checked_add(self.positions);
        if end.is_none_or(|e| e > self.max_seq) {
            return Err(Error::InvalidArgument(format!(
                "{what}: positions {}..{} are past the KV cache's {}",
                self.first,
                self.first.saturating_add(self.positions),
                self.max_seq
            )));
        }
        word(what, self.max_seq)?;
        Ok(())
    }
}

fn all_f32(items: &[(&Tensor, &str)]) -> Result<()> {
    items.iter().try_for_each(|(t, what)| t.check_dtype(DType::F32, what))
}

impl<'m> TransformerOps<'m> {
    /// `x[t] = f32(table[tokens[t]])` for `positions` u32 token ids (the table f16 `[vocab, n]`,
    /// `x` f32 `[positions, n]`); ids past the vocabulary are an error.
    pub fn embed_rows(&self, table: &Tensor, tokens: &[u32], ids: &Tensor, x: &Tensor) -> Result<()> {
        self.own(&[(table, "embed table"), (ids, "embed ids"), (x, "embed x")])?;
        table.check_dtype(DType::F16, "embed table")?;
        ids.check_dtype(DType::U32, "embed ids")?;
        x.check_dtype(DType::F32, "embed x")?;
        let (vocab, n) = table.matrix_dims("embed table")?;
        if let Some(&t) = tokens.iter().find(|&&t| t as usize >= vocab) {
            return Err(Error::IndexOutOfRange {
                what: "prompt token",
                index: t as usize,
                len: vocab,
                of: "tokens in the vocabulary",
            });
        }
        let positions = tokens.len();
        if ids.len() < positions {
            return Err(Error::LengthMismatch {
                what: "embed ids".into(),
                expected: positions,
                got: ids.len(),
            });
        }
        let total = mul("embed rows", positions, n)?;
        need_len("embed x ([positions, n])", x, total)?;
        word("embed rows", total)?;
        if total == 0 {
            return Ok(());
        }
        self.m.write_u32(ids, &padded(tokens, ids.len()))?;
        let imm = EmbedRowsParams { n: n as u32, vocab: vocab as u32, positions: positions as u32 };
        let b: [&dyn GpuBuffer; 3] = [&table.buffer, &ids.buffer, &x.buffer];
        self.m.shared.dispatch(EMBED_ROWS, &b, &[], &imm, elementwise_groups(total))
    }

    /// For each of `positions` rows of `x` (f32 `[positions, n]`): with `residual`, `x += r`
    /// first; then `y = x / sqrt(mean(x²) + eps) · w` (`w` f32 of `n`). A row's bits are those
    /// [`TransformerOps::rmsnorm`] gives the same vector.
    pub fn rmsnorm_rows(
        &self,
        x: &Tensor,
        residual: Option<&Tensor>,
        w: &Tensor,
        y: &Tensor,
        positions: usize,
        eps: f32,
    ) -> Result<()> {
        let r = residual.unwrap_or(w);
        self.own(&[
            (x, "rmsnorm_rows x"),
            (r, "rmsnorm_rows r"),
            (w, "rmsnorm_rows w"),
            (y, "rmsnorm_rows y"),
        ])?;
        all_f32(&[
            (x, "rmsnorm_rows x"),
            (r, "rmsnorm_rows r"),
            (w, "rmsnorm_rows w"),
            (y, "rmsnorm_rows y"),
        ])?;
        let n = w.len();
        let total = mul("rmsnorm_rows", positions, n)?;
        need_len("rmsnorm_rows x ([positions, n])", x, total)?;
        need_len("rmsnorm_rows y ([positions, n])", y, total)?;
        if let Some(r) = residual {
            need_len("rmsnorm_rows r ([positions, n])", r, total)?;
            if r.id() == x.id() || r.id() == y.id() {
                return Err(Error::InvalidArgument(
                    "rmsnorm_rows: r must be a tensor apart from x and y".into(),
                ));
            }
        }
        if y.id() == x.id() {
            return Err(Error::InvalidArgument("rmsnorm_rows: y must be a tensor apart from x".into()));
        }
        word("rmsnorm_rows", total)?;
        if positions > 65_535 {
            return Err(Error::InvalidArgument(format!("rmsnorm_rows: {positions} rows, past 65535")));
        }
        if total == 0 {
            return Ok(());
        }
        let imm =
            RowsNormParams { n: n as u32, eps, positions: positions as u32, add: residual.is_some() as u32 };
        let b: [&dyn GpuBuffer; 4] = [&r.buffer, &w.buffer, &x.buffer, &y.buffer];
        self.m.shared.dispatch(RMSNORM_ROWS, &b, &[], &imm, [positions as u32, 1, 1])
    }

    /// RoPE in place on `positions` rows of `heads` vectors of `head_dim` (even) in `v`
    /// (f32 `[positions, heads, head_dim]`), row t at position `shape.first + t`.
    pub fn rope_rows(
        &self,
        v: &Tensor,
        heads: usize,
        head_dim: usize,
        shape: PromptShape,
        base: f32,
    ) -> Result<()> {
        self.own(&[(v, "rope_rows")])?;
        v.check_dtype(DType::F32, "rope_rows")?;
        shape.check("rope_rows")?;
        if !head_dim.is_multiple_of(2) {
            return Err(Error::InvalidArgument(format!("rope needs an even head dimension, got {head_dim}")));
        }
        let total = mul("rope_rows", mul("rope_rows", shape.positions, heads)?, head_dim)?;
        need_len("rope_rows v ([positions, heads, head_dim])", v, total)?;
        word("rope_rows", total)?;
        if total == 0 {
            return Ok(());
        }
        let imm = RowsRopeParams {
            heads: heads as u32,
            dim: head_dim as u32,
            first: shape.first as u32,
            positions: shape.positions as u32,
            base,
        };
        self.m.shared.dispatch(ROPE_ROWS, &[&v.buffer], &[], &imm, elementwise_groups(total / 2))
    }

    /// Stores `positions` rows of keys and values (`k`, `v` f32 `[positions, heads, head_dim]`)
    /// at positions `shape.first ..` of the caches `[heads, max_seq, head_dim]`.
    pub fn kv_store_rows(
        &self,
        (k, v): (&Tensor, &Tensor),
        (k_cache, v_cache): (&Tensor, &Tensor),
        heads: usize,
        head_dim: usize,
        shape: PromptShape,
    ) -> Result<()> {
        let named =
            [(k, "kv_store_rows k"), (v, "kv_store_rows v"), (k_cache, "k cache"), (v_cache, "v cache")];
        self.own(&named)?;
        all_f32(&named)?;
        shape.check("kv_store_rows")?;
        let row = mul("kv_store_rows", heads, head_dim)?;
        let total = mul("kv_store_rows", shape.positions, row)?;
        let cache = mul("kv_store_rows cache", row, shape.max_seq)?;
        need_len("kv_store_rows k", k, total)?;
        need_len("kv_store_rows v", v, total)?;
        need_len("kv_store_rows k cache", k_cache, cache)?;
        need_len("kv_store_rows v cache", v_cache, cache)?;
        word("kv_store_rows cache", cache)?;
        let ids = [k.id(), v.id(), k_cache.id(), v_cache.id()];
        if (0..4).any(|i| (i + 1..4).any(|j| ids[i] == ids[j])) {
            return Err(Error::InvalidArgument(
                "kv_store_rows: k, v and the caches must be four tensors".into(),
            ));
        }
        if total == 0 {
            return Ok(());
        }
        let imm = RowsKvParams {
            heads: heads as u32,
            dim: head_dim as u32,
            first: shape.first as u32,
            positions: shape.positions as u32,
            max_seq: shape.max_seq as u32,
        };
        let b: [&dyn GpuBuffer; 4] = [&k.buffer, &v.buffer, &k_cache.buffer, &v_cache.buffer];
        self.m.shared.dispatch(KV_STORE_ROWS, &b, &[], &imm, elementwise_groups(total))
    }

    /// Causal attention of `positions` query rows (`q` f32 `[positions, q_heads, head_dim]`)
    /// over the caches `[q_heads / group, max_seq, head_dim]`, row t attending to positions
    /// `0 ..= shape.first + t`, into `out` (shaped as `q`); `head_dim` at most
    /// [`PROMPT_MAX_HEAD_DIM`].
    #[allow(clippy::too_many_arguments)]
    pub fn attention_prompt(
        &self,
        q: &Tensor,
        (k_cache, v_cache): (&Tensor, &Tensor),
        out: &Tensor,
        q_heads: usize,
        group: usize,
        head_dim: usize,
        shape: PromptShape,
    ) -> Result<()> {
        let named =
            [(q, "attention q"), (k_cache, "attention k"), (v_cache, "attention v"), (out, "attention out")];
        self.own(&named)?;
        all_f32(&named)?;
        shape.check("attention_prompt")?;
        if group == 0 || !q_heads.is_multiple_of(group) {
            return Err(Error::InvalidArgument(format!(
                "{q_heads} query heads do not form groups of {group}"
            )));
        }
        if head_dim == 0 || head_dim > PROMPT_MAX_HEAD_DIM {
            return Err(Error::Unsupported(format!(
                "the prompt's attention takes heads of 1 to {PROMPT_MAX_HEAD_DIM} elements, not {head_dim}"
            )));
        }
        let total = mul("attention_prompt", mul("attention_prompt", shape.positions, q_heads)?, head_dim)?;
        let cache =
            mul("attention_prompt cache", mul("attention cache", q_heads / group, shape.max_seq)?, head_dim)?;
        need_len("attention q ([positions, q_heads, head_dim])", q, total)?;
        need_len("attention out", out, total)?;
        need_len("attention k cache", k_cache, cache)?;
        need_len("attention v cache", v_cache, cache)?;
        word("attention_prompt", total)?;
        word("attention_prompt cache", cache)?;
        if out.id() == q.id() || out.id() == k_cache.id() || out.id() == v_cache.id() {
            return Err(Error::InvalidArgument(
                "attention_prompt: out must be a tensor apart from q and the caches".into(),
            ));
        }
        if q_heads > 65_535 || shape.positions > 65_535 {
            return Err(Error::InvalidArgument(format!(
                "attention_prompt: {q_heads} heads × {} rows, past 65535 a dimension",
                shape.positions
            )));
        }
        if total == 0 {
            return Ok(());
        }
        let imm = PromptAttentionParams {
            q_heads: q_heads as u32,
            dim: head_dim as u32,
            group: group as u32,
            first: shape.first as u32,
            max_seq: shape.max_seq as u32,
            positions: shape.positions as u32,
            scale: 1.0 / (head_dim as f32).sqrt(),
        };
        let b: [&dyn GpuBuffer; 4] = [&q.buffer, &k_cache.buffer, &v_cache.buffer, &out.buffer];
        self.m.shared.dispatch(ATTENTION_PROMPT, &b, &[], &imm, [q_heads as u32, shape.positions as u32, 1])
    }

    /// `y[t] += b` for `positions` rows of `y` (f32 `[positions, n]`, `b` f32 of `n`).
    pub fn add_rows(&self, y: &Tensor, b: &Tensor, positions: usize) -> Result<()> {
        self.own(&[(y, "add_rows y"), (b, "add_rows b")])?;
        all_f32(&[(y, "add_rows y"), (b, "add_rows b")])?;
        let total = mul("add_rows", positions, b.len())?;
        need_len("add_rows y ([positions, n])", y, total)?;
        word("add_rows", total)?;
        if y.id() == b.id() {
            return Err(Error::InvalidArgument("add_rows: y and b must be two tensors".into()));
        }
        if total == 0 {
            return Ok(());
        }
        let imm = AddRowsParams { n: b.len() as u32, positions: positions as u32 };
        let bufs: [&dyn GpuBuffer; 2] = [&b.buffer, &y.buffer];
        self.m.shared.dispatch(ADD_ROWS, &bufs, &[], &imm, elementwise_groups(total))
    }
}

/// `tokens` followed by zeros up to `len` (the ids buffer is written whole).
fn padded(tokens: &[u32], len: usize) -> Vec<u32> {
    let mut v = tokens.to_vec();
    v.resize(len, 0);
    v
}
