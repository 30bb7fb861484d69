//! Tensor-parallel linear layers over a group: the weight `W [out, in]` is split across
//! members, each holding only its slice ([`Matrix`]: f16, or ggml blocks as stored).
//!
//! - [`ColumnParallelLinear`] splits the output features: member i holds rows `ranges[i]` and
//!   computes its slice of `y = W x` from the replicated `x`. No communication.
//! - [`RowParallelLinear`] splits the input features: member i holds columns `ranges[i]` and
//!   computes a partial `y_i = W[:, ranges[i]] x[ranges[i]]`; the all-reduce sums the partials
//!   so every member holds the full `y`. A member with an empty range contributes zeros.

use std::ops::Range;

use super::matrix::{Matrix, ProductX, Q8Slots};
use super::reduce::Reducer;
use super::residual::{AddNorm, Normed};
use super::sharded::Sharded;
use crate::comm::{AllReduceOptions, Comm, Precision};
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

/// Makes each member's slice with `make(member, rows, cols)`, the slice of member `i` being
/// `shape_at(ranges[i])`'s rows and columns of the logical matrix, and checks its shape.
fn slices(
    members: &[Member],
    ranges: &[Range<usize>],
    shape_at: impl Fn(&Range<usize>) -> (Range<usize>, Range<usize>),
    mut make: impl FnMut(&Member, Range<usize>, Range<usize>) -> Result<Matrix>,
) -> Result<Vec<Matrix>> {
    members
        .iter()
        .zip(ranges)
        .map(|(m, r)| {
            let (rows, cols) = shape_at(r);
            let t = make(m, rows.clone(), cols.clone())?;
            let dims = t.dims()?;
            if dims != (rows.len(), cols.len()) {
                return Err(Error::InvalidArgument(format!(
                    "a weight slice of rows {rows:?} and columns {cols:?} on {} came as {} × {}",
                    m.label(),
                    dims.0,
                    dims.1
                )));
            }
            t.check_on(&m.shared, "a weight slice")?;
            Ok(t)
        })
        .collect()
}

/// The seeded slice maker (`TransformerOps::init_weights`): the matrix drawn from `seed`, of
/// `in_features` columns in all.
fn seeded(
    seed: u32,
    in_features: usize,
    shift: u32,
) -> impl FnMut(&Member, Range<usize>, Range<usize>) -> Result<Matrix> {
    move |m, rows, cols| {
        let t = m.empty(&[rows.len(), cols.len()], DType::F16)?;
        m.transformer().init_weights(&t, seed, in_features, rows.start, cols.start, shift)?;
        Ok(Matrix::F16(t))
    }
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

fn slice_of<'a>(what: &'static str, weights: &'a [Matrix], i: usize) -> Result<&'a Matrix> {
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
    weights: Vec<Matrix>,
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
        Self::from_slices(members, in_features, out_features, ranges, share, seeded(seed, in_features, shift))
    }

    /// The layer over slices `make(member, rows, columns)` makes (rows `ranges[i]`, every
    /// column, for member `i`); with `share` as in [`ColumnParallelLinear::random_share`].
    pub(crate) fn from_slices(
        members: &[Member],
        in_features: usize,
        out_features: usize,
        ranges: Vec<Range<usize>>,
        share: bool,
        make: impl FnMut(&Member, Range<usize>, Range<usize>) -> Result<Matrix>,
    ) -> Result<Self> {
        check_members("ColumnParallelLinear ranges", members, ranges.len())?;
        check_tiling("ColumnParallelLinear", &ranges, out_features, share)?;
        let weights = slices(members, &ranges, |r| (r.clone(), 0..in_features), make)?;
        Ok(Self { in_features, out_features, ranges, weights })
    }

    /// `y[i] = W[ranges[i], :] x[i]` on every member (`x[i]` is the replicated input).
    pub fn forward(&self, members: &[Member], x: &[&Tensor], y: &[&Tensor]) -> Result<()> {
        self.forward_q8(members, x, &Q8Slots::default(), y)
    }

    /// [`ColumnParallelLinear::forward`], where a member's slice takes 8-bit blocks and `q8`
    /// has a vector for it, from x quantized into that vector.
    pub(crate) fn forward_q8(
        &self,
        members: &[Member],
        x: &[&Tensor],
        q8: &Q8Slots,
        y: &[&Tensor],
    ) -> Result<()> {
        check_forward("ColumnParallelLinear", self.weights.len(), members, x.len(), y.len())?;
        for (i, m) in members.iter().enumerate() {
            let w = &self.weights[i];
            w.matvec_x(m, ProductX::for_readers(m, x[i], q8.get(i), &[w])?, y[i])?;
        }
        Ok(())
    }

    /// Member `i`'s weight slice as f16 elements (an error where it is quantized: see
    /// [`ColumnParallelLinear::matrix`]).
    pub fn weight(&self, i: usize) -> Result<&Tensor> {
        self.matrix(i)?.f16("ColumnParallelLinear::weight")
    }

    /// Member `i`'s weight slice as its device holds it.
    pub fn matrix(&self, i: usize) -> Result<&Matrix> {
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
    weights: Vec<Matrix>,
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
        Self::from_slices(members, in_features, out_features, ranges, share, seeded(seed, in_features, shift))
    }

    /// The layer over slices `make(member, rows, columns)` makes (every row, columns
    /// `ranges[i]`, for member `i`); with `share`, `ranges` may tile a part of the input
    /// features.
    pub(crate) fn from_slices(
        members: &[Member],
        in_features: usize,
        out_features: usize,
        ranges: Vec<Range<usize>>,
        share: bool,
        make: impl FnMut(&Member, Range<usize>, Range<usize>) -> Result<Matrix>,
    ) -> Result<Self> {
        check_members("RowParallelLinear ranges", members, ranges.len())?;
        check_tiling("RowParallelLinear", &ranges, in_features, share)?;
        let weights = slices(members, &ranges, |r| (0..out_features, r.clone()), make)?;
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
        let x: Vec<ProductX<'_>> = x.iter().map(|x| ProductX::f32(x)).collect();
        self.forward_from(members, reducer, &x, y)
    }

    /// [`RowParallelLinear::forward_with`] from each member's [`ProductX`] (checked by the
    /// caller).
    fn forward_from(
        &self,
        members: &[Member],
        reducer: Option<&mut dyn Reducer>,
        x: &[ProductX<'_>],
        y: &mut [&Tensor],
    ) -> Result<()> {
        for (i, m) in members.iter().enumerate() {
            self.weights[i].matvec_x(m, x[i], y[i])?;
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

    /// Member `i`'s weight slice as f16 elements (an error where it is quantized: see
    /// [`RowParallelLinear::matrix`]).
    pub fn weight(&self, i: usize) -> Result<&Tensor> {
        self.matrix(i)?.f16("RowParallelLinear::weight")
    }

    /// Member `i`'s weight slice as its device holds it.
    pub fn matrix(&self, i: usize) -> Result<&Matrix> {
        slice_of("RowParallelLinear member", &self.weights, i)
    }

    /// `x_stream += W x`, then `h = rmsnorm(x_stream) · norm.weight`, on every member: the
    /// layer's product, its all-reduce and the residual norm that consumes it, as a decoder
    /// block ends. Where the reducer fuses rounds ([`Reducer::fused_round`], DevicePoll) each
    /// member's product goes straight into its slot and the norm sums the slots in member
    /// order (`reduce_add_rmsnorm`); else the products go into `partial`, are all-reduced and
    /// added (`add_rmsnorm`). Both give the same bits, and return [`Normed::Ready`].
    ///
    /// Folded (`norm.fold`), with one member, nothing to reduce with and an f16 slice whose
    /// rows and columns are multiples of 8, the product adds itself into `x_stream`
    /// (`matvec_add_norm_pending`: matvec_accumulate's addition) and leaves the norm pending for
    /// whoever reads it: [`Normed::Pending`], which the fused products finish on their way in
    /// (within rounding of `add_rmsnorm`'s h, not bitwise: the norm's scale multiplies their
    /// finished sums).
    ///
    /// With a vector in `q8` (for member i's slice of x: the decoder's quantized activations),
    /// a slice that takes 8-bit blocks reads x quantized into it.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn forward_add_norm<'a>(
        &self,
        members: &[Member],
        reducer: Option<&mut dyn Reducer>,
        x: &[&Tensor],
        q8: &Q8Slots,
        partial: &Sharded,
        norm: AddNorm<'a>,
    ) -> Result<Normed<'a>> {
        check_forward("RowParallelLinear", self.weights.len(), members, x.len(), x.len())?;
        // Each member's input, quantized where its slice takes 8-bit blocks: recorded once the
        // round is set up, as the products are.
        let inputs = || {
            members
                .iter()
                .enumerate()
                .map(|(i, m)| ProductX::for_readers(m, x[i], q8.get(i), &[&self.weights[i]]))
                .collect::<Result<Vec<_>>>()
        };
        let reducer = match reducer {
            Some(r) => match r.fused_round(self.out_features)? {
                Some(mut round) => {
                    let x = inputs()?;
                    for (i, m) in members.iter().enumerate() {
                        let (out, at) = round.output(i)?;
                        self.weights[i].matvec_into_x(m, x[i], out, at)?;
                    }
                    round.finish()?;
                    for (i, m) in members.iter().enumerate() {
                        let (xs, w, h) = norm.parts(i)?;
                        m.transformer().reduce_add_rmsnorm(&round.input(i)?, xs, w, h, norm.eps)?;
                    }
                    return Ok(Normed::Ready(norm.h));
                }
                None => Some(r),
            },
            None if members.len() == 1 => match (norm.fold, self.weights[0].dense()) {
                // Where the stream's readers can finish the norm (they read 8 at a time too);
                // an f16 slice reads x in f32 (it takes no 8-bit blocks).
                (Some(fold), Some(w)) if w.shape().iter().all(|d| d % 8 == 0) => {
                    let (xs, nw, _) = norm.parts(0)?;
                    let (weighted, squares) = (fold.weighted.part(0)?, fold.squares.part(0)?);
                    members[0].transformer().matvec_add_norm_pending(w, x[0], xs, nw, weighted, squares)?;
                    return Ok(Normed::Pending(norm, fold));
                }
                _ => None,
            },
            None => None,
        };
        self.forward_from(members, reducer, &inputs()?, &mut partial.refs())?;
        for (i, m) in members.iter().enumerate() {
            let (xs, w, h) = norm.parts(i)?;
            m.transformer().add_rmsnorm(xs, partial.part(i)?, w, h, norm.eps)?;
        }
        Ok(Normed::Ready(norm.h))
    }
}
