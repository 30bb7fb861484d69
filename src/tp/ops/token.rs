//! A token in and out: its embedding row, and the greedy choice over the vocabulary shares
//! (each member's (value, index) candidate, then the pick that advances the position).

use vk_native::GpuBuffer;

use crate::error::{Error, Result};
use crate::kernels::{
    elementwise_groups, ArgmaxParams, EmbedParams, SelectTokenParams, ARGMAX_PAIR, EMBED_F16, SELECT_TOKEN,
};
use crate::tensor::{DType, Tensor};

use super::transformer::{add, need_len, Position, TransformerOps};

impl<'m> TransformerOps<'m> {
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
}
