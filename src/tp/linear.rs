//! Tensor-parallel linear layers over a group: the weight `W [out, in]` (f16) is split across
//! members, each holding only its slice.
//!
//! - [`ColumnParallelLinear`] splits the output features: member i holds rows `ranges[i]` and
//!   computes its slice of `y = W x` from the replicated `x`. No communication.
//! - [`RowParallelLinear`] splits the input features: member i holds columns `ranges[i]` and
//!   computes a partial `y_i = W[:, ranges[i]] x[ranges[i]]`; the all-reduce sums the partials
//!   so every member holds the full `y`. A member with an empty range contributes zeros.

use std::ops::Range;

use super::Reducer;
use crate::comm::{AllReduceOptions, Comm, FusedRound, Precision};
use crate::error::{Error, Result};
use crate::group::Member;
use crate::tensor::{DType, Tensor};

/// Checks that `ranges` tile `0..features` in order, without gaps or overlaps; with `share`,
/// that they tile a part of it (this process's members' slices of a layer split over several
/// processes).
fn check_tiling(what: &str, ranges: &[Range<usize>], features: usize, share: bool) -> Result<()> {
    let mut at = if share { ranges.first().map_or(0, |r| r.start) } else { 0 };
    for r in ranges {
        if r.start != at || r.end < r.start {
            return Err(Error::InvalidArgument(format!(
                "{what}: ranges {ranges:?} do not tile 0..{features} in order (expected a range starting at {at})"
            )));
        }
        at = r.end;
    }
    if if share { at > features } else { at != features } {
        return Err(Error::LengthMismatch {
            what: format!("{what}: ranges cover"),
            expected: features,
            got: at,
        });
    }
    Ok(())
}

/// Generates each member's slice of the logical `[*, in_features]` matrix drawn from `seed`:
/// `shape_at(range)` gives the slice's shape and its (row, column) offset.
fn slices(
    members: &[Member],
    ranges: &[Range<usize>],
    in_features: usize,
    seed: u32,
    shift: u32,
    shape_at: impl Fn(&Range<usize>) -> ([usize; 2], (usize, usize)),
) -> Result<Vec<Tensor>> {
    members
        .iter()
        .zip(ranges)
        .map(|(m, r)| {
            let (shape, (row, col)) = shape_at(r);
            let t = m.empty(&shape, DType::F16)?;
            m.transformer().init_weights(&t, seed, in_features, row, col, shift)?;
            Ok(t)
        })
        .collect()
}

fn check_members(what: &str, members: &[Member], n: usize) -> Result<()> {
    if members.len() != n {
        return Err(Error::LengthMismatch {
            what: format!("{what}: tensors per member"),
            expected: members.len(),
            got: n,
        });
    }
    Ok(())
}

/// Checks a forward call: the layer's members, then one `x` and one `y` per member.
fn check_forward(what: &str, built_over: usize, members: &[Member], x: usize, y: usize) -> Result<()> {
    if members.len() != built_over {
        return Err(Error::LengthMismatch {
            what: format!("{what}::forward: members passed (the layer was built over {built_over})"),
            expected: built_over,
            got: members.len(),
        });
    }
    check_members(&format!("{what}::forward x"), members, x)?;
    check_members(&format!("{what}::forward y"), members, y)
}

fn slice_of<'a>(what: &'static str, weights: &'a [Tensor], i: usize) -> Result<&'a Tensor> {
    weights.get(i).ok_or(Error::IndexOutOfRange {
        what,
        index: i,
        len: weights.len(),
        of: "members the layer is built over",
    })
}

/// Linear layer split along its output features.
pub struct ColumnParallelLinear {
    /// Input features: the length of the replicated input `x`.
    pub in_features: usize,
    /// Output features of the whole layer: the rows of `W`, split across members by `ranges`.
    pub out_features: usize,
    /// Rows of `W` held by each member.
    pub ranges: Vec<Range<usize>>,
    weights: Vec<Tensor>,
}

impl ColumnParallelLinear {
    /// Generates the layer's slices on the members (see `TransformerOps::init_weights`).
    pub fn random(
        members: &[Member],
        in_features: usize,
        out_features: usize,
        ranges: Vec<Range<usize>>,
        seed: u32,
        shift: u32,
    ) -> Result<Self> {
        Self::random_share(members, in_features, out_features, ranges, seed, shift, false)
    }

    /// [`ColumnParallelLinear::random`]; with `share`, `ranges` may tile a part of the output
    /// features (the slices of this process's members, the rest on other ranks').
    pub(crate) fn random_share(
        members: &[Member],
        in_features: usize,
        out_features: usize,
        ranges: Vec<Range<usize>>,
        seed: u32,
        shift: u32,
        share: bool,
    ) -> Result<Self> {
        check_members("ColumnParallelLinear ranges", members, ranges.len())?;
        check_tiling("ColumnParallelLinear", &ranges, out_features, share)?;
        let weights =
            slices(members, &ranges, in_features, seed, shift, |r| ([r.len(), in_features], (r.start, 0)))?;
        Ok(Self { in_features, out_features, ranges, weights })
    }

    /// `y[i] = W[ranges[i], :] x[i]` on every member (`x[i]` is the replicated input).
    pub fn forward(&self, members: &[Member], x: &[&Tensor], y: &[&Tensor]) -> Result<()> {
        check_forward("ColumnParallelLinear", self.weights.len(), members, x.len(), y.len())?;
        for (i, m) in members.iter().enumerate() {
            m.matvec(&self.weights[i], x[i], y[i])?;
        }
        Ok(())
    }

    /// Member `i`'s weight slice.
    pub fn weight(&self, i: usize) -> Result<&Tensor> {
        slice_of("ColumnParallelLinear member", &self.weights, i)
    }
}

/// Linear layer split along its input features; the partial outputs are all-reduced.
pub struct RowParallelLinear {
    /// Input features of the whole layer: the columns of `W`, split across members by `ranges`.
    pub in_features: usize,
    /// Output features: the length of every member's (all-reduced) output `y`.
    pub out_features: usize,
    /// Columns of `W` held by each member.
    pub ranges: Vec<Range<usize>>,
    weights: Vec<Tensor>,
}

impl RowParallelLinear {
    /// Generates the layer's slices on the members.
    pub fn random(
        members: &[Member],
        in_features: usize,
        out_features: usize,
        ranges: Vec<Range<usize>>,
        seed: u32,
        shift: u32,
    ) -> Result<Self> {
        Self::random_share(members, in_features, out_features, ranges, seed, shift, false)
    }

    /// [`RowParallelLinear::random`]; with `share`, `ranges` may tile a part of the input
    /// features (this process's members' slices; the all-reduce adds the other ranks').
    pub(crate) fn random_share(
        members: &[Member],
        in_features: usize,
        out_features: usize,
        ranges: Vec<Range<usize>>,
        seed: u32,
        shift: u32,
        share: bool,
    ) -> Result<Self> {
        check_members("RowParallelLinear ranges", members, ranges.len())?;
        check_tiling("RowParallelLinear", &ranges, in_features, share)?;
        let weights =
            slices(members, &ranges, in_features, seed, shift, |r| ([out_features, r.len()], (0, r.start)))?;
        Ok(Self { in_features, out_features, ranges, weights })
    }

    /// `y = W x`: member i computes `W[:, ranges[i]] x[i]` (its slice of the input) into
    /// `y[i]`, then `comm` sums the partials so every `y[i]` holds the full result, bitwise
    /// equal on every member. With one member pass `comm = None`. The all-reduce uses
    /// [`Precision::Auto`]: from the communicator's f16-wire threshold (`CROSSGPU_F16_WIRE_BYTES`,
    /// default 1 MiB of output) the partials are rounded to f16 and saturate at ±65504.
    pub fn forward(
        &self,
        members: &[Member],
        comm: Option<&mut Comm>,
        x: &[&Tensor],
        y: &mut [&Tensor],
    ) -> Result<()> {
        self.forward_with(members, comm.map(|c| c as &mut dyn Reducer), x, y)
    }

    /// [`RowParallelLinear::forward`] summing with any [`Reducer`]: across MPI ranks, `members`
    /// are this process's and this layer holds their slices of the whole.
    pub fn forward_with(
        &self,
        members: &[Member],
        reducer: Option<&mut dyn Reducer>,
        x: &[&Tensor],
        y: &mut [&Tensor],
    ) -> Result<()> {
        check_forward("RowParallelLinear", self.weights.len(), members, x.len(), y.len())?;
        for (i, m) in members.iter().enumerate() {
            m.matvec(&self.weights[i], x[i], y[i])?;
        }
        match reducer {
            Some(c) => {
                c.all_reduce(y, &AllReduceOptions { precision: Precision::Auto, ..Default::default() })
            }
            None if members.len() == 1 => Ok(()),
            None => Err(Error::InvalidArgument(
                "RowParallelLinear over several members needs a communicator".into(),
            )),
        }
    }

    /// Member `i`'s weight slice.
    pub fn weight(&self, i: usize) -> Result<&Tensor> {
        slice_of("RowParallelLinear member", &self.weights, i)
    }

    /// [`RowParallelLinear::forward`] with the all-reduce fused where the communicator can
    /// ([`Comm::fused_round`], DevicePoll): each member's product goes straight into its slot
    /// of the round, and the round is left for the consumer to sum (with
    /// `Member::reduce_add_rmsnorm`). `Ok(None)`: not fused, nothing recorded.
    pub(crate) fn forward_fused(
        &self,
        members: &[Member],
        comm: &mut Comm,
        x: &[&Tensor],
    ) -> Result<Option<FusedRound>> {
        check_forward("RowParallelLinear", self.weights.len(), members, x.len(), x.len())?;
        let Some(r) = comm.fused_round(self.out_features)? else { return Ok(None) };
        for (i, m) in members.iter().enumerate() {
            let (out, at) = comm.fused_output(&r, i)?;
            m.matvec_into(&self.weights[i], x[i], out, at)?;
        }
        comm.fused_finish(&r)?;
        Ok(Some(r))
    }
}
