//! RMSNorm on one member: alone, after a residual add, and summing an all-reduce round's
//! partials in member order first (the row-parallel layer's fused round).

use vk_native::{BindRange, GpuBuffer};

use crate::error::{Error, Result};
use crate::kernels::{
    row_groups, MatvecParams, NormParams, ReduceNormParams, ReduceNormPollParams, ADD_RMSNORM,
    MATVEC_F16_ROWS8_ADD_NORM_PENDING, MATVEC_F16_ROWS8_X4_ADD_NORM_PENDING, REDUCE_ADD_RMSNORM,
    REDUCE_ADD_RMSNORM_POLL, RMSNORM,
};
use crate::ops::MATVEC_F16_FOUR_LOADS_FROM_COLS;
use crate::tensor::{DType, Tensor};

use super::transformer::{need_len, pending_norm_squares, word, TransformerOps, PENDING_NORM_ROWS};

impl<'m> TransformerOps<'m> {
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
    /// residual add and the next norm in one dispatch, with the bits of [`crate::Member::add`] then
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

    /// `y += W x`, then the next RMSNorm of `y` left pending for the products that read it
    /// ([`super::ProductInput::PendingNorm`] of `weighted` and `squares`): `weighted = y · nw`
    /// and `squares[g]` = the sum of `y²` over rows `8g .. 8g + 8` in order. The decoder's
    /// output projections on one member with the norms folded: the residual add, the product
    /// and the norm's pass over the stream in one dispatch, and no norm dispatch after it. `w`
    /// f16 `[rows, cols]` with `cols % 8 == 0`, `x` f32 of `cols`, `y`, `nw` and `weighted` f32
    /// of `rows`, `squares` f32 of [`pending_norm_squares`]`(rows)`. `y` takes the bits of
    /// [`Member::matvec_accumulate`](crate::Member::matvec_accumulate) from 4096 columns (where
    /// that also runs eight rows per workgroup; below, within rounding of it).
    #[allow(clippy::too_many_arguments)]
    pub fn matvec_add_norm_pending(
        &self,
        w: &Tensor,
        x: &Tensor,
        y: &Tensor,
        nw: &Tensor,
        weighted: &Tensor,
        squares: &Tensor,
    ) -> Result<()> {
        let named = [
            (w, "add_norm_pending w"),
            (x, "add_norm_pending x"),
            (y, "add_norm_pending y"),
            (nw, "add_norm_pending norm weight"),
            (weighted, "add_norm_pending weighted"),
            (squares, "add_norm_pending squares"),
        ];
        self.own(&named)?;
        w.check_dtype(DType::F16, "add_norm_pending w")?;
        let (rows, cols) = w.matrix_dims("add_norm_pending w")?;
        if !cols.is_multiple_of(8) {
            return Err(Error::InvalidArgument(format!(
                "add_norm_pending: {cols} columns; the kernel reads 8 f16 at a time (use matvec_accumulate and rmsnorm)"
            )));
        }
        for (t, what) in &named[1..] {
            t.check_dtype(DType::F32, what)?;
        }
        need_len("add_norm_pending x", x, cols)?;
        for (t, what) in &named[2..5] {
            need_len(what, t, rows)?;
        }
        need_len("add_norm_pending squares", squares, pending_norm_squares(rows))?;
        let ids = named.map(|(t, _)| t.id());
        // What the kernel writes (y, weighted, squares) apart from each other and from what it
        // reads (w, x, nw; y is read and written by the same thread).
        for (a, &out) in ids.iter().enumerate().filter(|(a, _)| [2, 4, 5].contains(a)) {
            if ids.iter().enumerate().any(|(b, &other)| b != a && other == out) {
                return Err(Error::InvalidArgument(format!(
                    "add_norm_pending: {} must be a tensor of its own (the kernel writes it)",
                    named[a].1
                )));
            }
        }
        if rows == 0 {
            return Ok(());
        }
        let entry = if cols >= MATVEC_F16_FOUR_LOADS_FROM_COLS {
            MATVEC_F16_ROWS8_X4_ADD_NORM_PENDING
        } else {
            MATVEC_F16_ROWS8_ADD_NORM_PENDING
        };
        let imm = MatvecParams {
            rows: word("add_norm_pending rows", rows)?,
            cols: word("add_norm_pending cols", cols)?,
            y_offset: 0,
            accumulate: 1,
        };
        let b: [&dyn GpuBuffer; 6] =
            [&w.buffer, &x.buffer, &y.buffer, &nw.buffer, &weighted.buffer, &squares.buffer];
        self.m.shared.dispatch(entry, &b, &[], &imm, row_groups(rows.div_ceil(PENDING_NORM_ROWS)))
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
}
