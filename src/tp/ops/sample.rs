//! A drawn token: each member's candidates from its slice of the vocabulary (the best of every
//! 2048 logits, then the best of those), then the draw
//! from every member's candidates (gathered by an all-reduce of zero-padded triples, exact).
//! The settings are a u32 tensor ([`crate::model::Sampling::device_settings`]) that the kernels
//! read when they run, so a recorded step follows new settings written into it.

use vk_native::GpuBuffer;

use crate::error::{Error, Result};
use crate::kernels::{
    SampleChunksParams, SampleMergeParams, SelectSampledParams, SAMPLE_CHUNKS, SAMPLE_MERGE, SELECT_SAMPLED,
};
use crate::sample::MAX_CANDIDATES;
use crate::tensor::{DType, Tensor};

use super::transformer::{add, mul, need_len, word, Position, TransformerOps};

/// Words of a settings tensor.
pub const SAMPLING_SETTINGS_WORDS: usize = 8;

/// Logits a workgroup of `wgsl/sample_chunks.wgsl` ranks.
pub const SAMPLING_CHUNK: usize = 2048;

/// The f32 a member's scratch for [`TransformerOps::sample_candidates`] needs over a slice of
/// `n` logits with `room` candidates: 3 for each candidate of each 2048 logits.
pub fn sampling_chunk_floats(n: usize, room: usize) -> usize {
    3 * room * n.div_ceil(SAMPLING_CHUNK)
}

/// The most members whose candidates [`TransformerOps::select_sampled`] merges.
pub const SAMPLING_MAX_MEMBERS: usize = 64;

impl<'m> TransformerOps<'m> {
    /// Writes this member's candidates for the next token into entries `slot * room ..
    /// (slot + 1) * room` of `candidates` (f32, 3 per entry: logit, id, perturbed value;
    /// `room` ≤ 64 entries a member): its best tokens of `logits` (its vocabulary slice
    /// starting at id `index_offset`) as the u32 `settings` say, drawn at position `step`.
    /// Two dispatches: every 2048 logits' best into `chunks` (f32, at least
    /// [`sampling_chunk_floats`] of them), then the best of those.
    #[allow(clippy::too_many_arguments)]
    pub fn sample_candidates(
        &self,
        logits: &Tensor,
        settings: &Tensor,
        index_offset: usize,
        chunks: &Tensor,
        candidates: &Tensor,
        slot: usize,
        room: usize,
        step: usize,
    ) -> Result<()> {
        let at = Position::fixed(step);
        self.sample_candidates_at(logits, settings, index_offset, chunks, candidates, slot, room, at)
    }

    /// [`TransformerOps::sample_candidates`] at a [`Position`].
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn sample_candidates_at(
        &self,
        logits: &Tensor,
        settings: &Tensor,
        index_offset: usize,
        chunks: &Tensor,
        candidates: &Tensor,
        slot: usize,
        room: usize,
        at: Position<'_>,
    ) -> Result<()> {
        let counter = at.buffer(self.m)?;
        self.own(&[
            (logits, "sample logits"),
            (settings, "sample settings"),
            (chunks, "sample chunks"),
            (candidates, "sample candidates"),
        ])?;
        logits.check_dtype(DType::F32, "sample logits")?;
        chunks.check_dtype(DType::F32, "sample chunks")?;
        check_settings(settings)?;
        let members = check_candidates(candidates, room)?;
        if slot >= members {
            return Err(Error::IndexOutOfRange {
                what: "sample candidates slot",
                index: slot,
                len: members,
                of: "members' entries in the candidates tensor",
            });
        }
        if add("sample_candidates", index_offset, logits.len())? > 1 << 24 {
            return Err(Error::InvalidArgument(
                "vocabulary ids past 2^24 do not fit the candidates' f32 ids".into(),
            ));
        }
        let need = sampling_chunk_floats(logits.len(), room);
        if chunks.len() < need {
            return Err(Error::LengthMismatch {
                what: format!("sample chunks for {} logits, room {room}", logits.len()),
                expected: need,
                got: chunks.len(),
            });
        }
        let lists = logits.len().div_ceil(SAMPLING_CHUNK);
        if lists > 0 {
            let b: [&dyn GpuBuffer; 4] = [&logits.buffer, &settings.buffer, counter, &chunks.buffer];
            let imm = SampleChunksParams {
                n: logits.len() as u32,
                index_offset: index_offset as u32,
                room: room as u32,
                step: word("sample step", at.base)?,
            };
            self.m.shared.dispatch(SAMPLE_CHUNKS, &b, &[], &imm, [lists as u32, 1, 1])?;
        }
        let b: [&dyn GpuBuffer; 3] = [&chunks.buffer, &settings.buffer, &candidates.buffer];
        let imm = SampleMergeParams { lists: lists as u32, slot: slot as u32, room: room as u32 };
        self.m.shared.dispatch(SAMPLE_MERGE, &b, &[], &imm, [1, 1, 1])
    }

    /// Draws the next token from every member's gathered `candidates` (`room` entries a
    /// member) as the `settings` say, into `token[0]` and `history[step]` (both u32).
    pub fn select_sampled(
        &self,
        candidates: &Tensor,
        settings: &Tensor,
        room: usize,
        token: &Tensor,
        history: &Tensor,
        step: usize,
    ) -> Result<()> {
        self.select_sampled_at(candidates, settings, room, token, history, Position::fixed(step), false)
    }

    /// [`TransformerOps::select_sampled`] at a [`Position`]; with `advance`, it then adds 1 to
    /// the position counter (the decoder's last kernel of a token).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn select_sampled_at(
        &self,
        candidates: &Tensor,
        settings: &Tensor,
        room: usize,
        token: &Tensor,
        history: &Tensor,
        at: Position<'_>,
        advance: bool,
    ) -> Result<()> {
        let (step, counter) = (at.base, at.buffer(self.m)?);
        if advance && at.counter.is_none() {
            return Err(Error::InvalidArgument("select_sampled: advancing needs a position counter".into()));
        }
        self.own(&[
            (candidates, "select candidates"),
            (settings, "select settings"),
            (token, "select token"),
            (history, "select history"),
        ])?;
        check_settings(settings)?;
        let members = check_candidates(candidates, room)?;
        if members > SAMPLING_MAX_MEMBERS {
            return Err(Error::InvalidArgument(format!(
                "select_sampled: candidates of {members} members; it merges at most {SAMPLING_MAX_MEMBERS}"
            )));
        }
        token.check_dtype(DType::U32, "select token")?;
        need_len("select token", token, 1)?;
        history.check_dtype(DType::U32, "select history")?;
        if step >= history.len() {
            return Err(Error::IndexOutOfRange {
                what: "history step",
                index: step,
                len: history.len(),
                of: "steps in the history tensor",
            });
        }
        let b: [&dyn GpuBuffer; 5] =
            [&candidates.buffer, &settings.buffer, &token.buffer, &history.buffer, counter];
        let imm = SelectSampledParams {
            members: members as u32,
            room: room as u32,
            step: step as u32,
            advance: advance as u32,
        };
        self.m.shared.dispatch(SELECT_SAMPLED, &b, &[], &imm, [1, 1, 1])
    }
}

fn check_settings(settings: &Tensor) -> Result<()> {
    settings.check_dtype(DType::U32, "sample settings")?;
    need_len("sample settings", settings, SAMPLING_SETTINGS_WORDS)
}

/// The members a candidates tensor of `room` entries a member holds.
fn check_candidates(candidates: &Tensor, room: usize) -> Result<usize> {
    candidates.check_dtype(DType::F32, "sample candidates")?;
    if room == 0 || room > MAX_CANDIDATES {
        return Err(Error::InvalidArgument(format!(
            "sample candidates: room for {room} a member; 1 to {MAX_CANDIDATES}"
        )));
    }
    let per_member = mul("sample candidates", 3, room)?;
    if candidates.is_empty() || !candidates.len().is_multiple_of(per_member) {
        return Err(Error::InvalidArgument(format!(
            "sample candidates: {} f32 is not a whole number of members' 3 x {room}",
            candidates.len()
        )));
    }
    Ok(candidates.len() / per_member)
}
