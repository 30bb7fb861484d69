//! RMSNorm on one member: alone, after a residual add (a separate dispatch, or at the end of the
//! product that adds), and summing an all-reduce round's
//! partials in member order first (the row-parallel layer's fused round).

use vk_native::{BindRange, GpuBuffer};

use crate::error::{Error, Result};
use crate::kernels::{
    row_groups, Entry, MatvecNormParams, MatvecParams, NormParams, ReduceNormParams, ReduceNormPollParams,
    ADD_RMSNORM, MATVEC_F16_ROWS4_ADD_RMSNORM, MATVEC_F16_ROWS8_ADD_NORM_PENDING,
    MATVEC_F16_ROWS8_ADD_RMSNORM, MATVEC_F16_ROWS8_X4_ADD_NORM_PENDING, MATVEC_F16_ROWS8_X4_T2_ADD_RMSNORM,
    MATVEC_F16_VEC8_ROWS4, MATVEC_F16_VEC8_ROWS8, MATVEC_F16_VEC8_ROWS8_X4_T2, REDUCE_ADD_RMSNORM,
    REDUCE_ADD_RMSNORM_POLL, RMSNORM,
};
use crate::ops::{matvec_f16_kernel, MATVEC_F16_FOUR_LOADS_FROM_COLS};
use crate::tensor::{DType, Tensor};

use super::transformer::{need_len, pending_norm_squares, word, TransformerOps, PENDING_NORM_ROWS};

/// A product kernel that norms the stream with its last workgroup: its entry, its rows per
/// workgroup, and the matvec kernel whose product (and bits) it computes.
#[derive(Clone, Copy)]
struct ProductNorm {
    entry: Entry<MatvecNormParams>,
    rows_per_workgroup: usize,
    product: &'static str,
}

/// The product-and-norm kernels, one per f16 matvec kernel `matvec` picks (four rows, eight
/// rows, eight rows with four loads in flight and two rows a thread).
const PRODUCT_NORM: [ProductNorm; 3] = [
    ProductNorm {
        entry: MATVEC_F16_ROWS4_ADD_RMSNORM,
        rows_per_workgroup: 4,
        product: MATVEC_F16_VEC8_ROWS4.name(),
    },
    ProductNorm {
        entry: MATVEC_F16_ROWS8_ADD_RMSNORM,
        rows_per_workgroup: 8,
        product: MATVEC_F16_VEC8_ROWS8.name(),
    },
    ProductNorm {
        entry: MATVEC_F16_ROWS8_X4_T2_ADD_RMSNORM,
        rows_per_workgroup: 8,
        product: MATVEC_F16_VEC8_ROWS8_X4_T2.name(),
    },
];

/// The kernels [`TransformerOps::matvec_add_rmsnorm_with`] takes, by name.
pub const MATVEC_ADD_RMSNORM_KERNELS: [&str; PRODUCT_NORM.len()] =
    [PRODUCT_NORM[0].entry.name(), PRODUCT_NORM[1].entry.name(), PRODUCT_NORM[2].entry.name()];

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
        // What the kernel writes (y, weighted, squares) apart from each other and from what it
        // reads (w, x, nw; y is read and written by the same thread).
        written_apart("add_norm_pending", &named, &[2, 4, 5])?;
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

    /// `x += W a`, then `h = rmsnorm(x) · nw`, in one dispatch: the workgroup that finishes the
    /// product last norms the stream (wgsl/include/matvec_norm_last.wgsl), so no norm dispatch
    /// (nor the barrier and launch before it) follows the product. The bits of
    /// [`Member::matvec`](crate::Member::matvec) into a vector `r` then
    /// [`TransformerOps::add_rmsnorm`]`(x, r, nw, h, eps)`, in `x` and in `h`, at every shape:
    /// the product runs `matvec`'s kernel for its columns. `w` f16 `[rows, cols]` with `cols %
    /// 8 == 0`, `a` f32 of `cols`, `x`, `nw` and `h` f32 of `rows`; `arrivals` a u32 tensor of
    /// one element holding 0 (as [`Member::upload_u32`](crate::Member::upload_u32)`(&[0])` makes it), which
    /// the kernel counts its workgroups in and leaves 0 again — one per member serves every such
    /// dispatch. A count that is not 0 (a tensor written by something else) makes `h` wrong
    /// in that and later dispatches until the caller zeroes it again (below the workgroup
    /// count a workgroup norms before every row is stored; from it none norms), never unsafe:
    /// nothing reads or writes past any tensor. The stream is bound twice (the product's
    /// stores, the last workgroup's atomic loads), with barriers between the two.
    #[allow(clippy::too_many_arguments)]
    pub fn matvec_add_rmsnorm(
        &self,
        w: &Tensor,
        a: &Tensor,
        x: &Tensor,
        nw: &Tensor,
        h: &Tensor,
        eps: f32,
        arrivals: &Tensor,
    ) -> Result<()> {
        self.product_norm(None, w, a, x, nw, h, eps, arrivals)
    }

    /// [`TransformerOps::matvec_add_rmsnorm`] through the kernel named `kernel` (one of
    /// [`MATVEC_ADD_RMSNORM_KERNELS`], at any `cols % 8 == 0`): the bits of
    /// [`Member::matvec_f16_with`](crate::Member::matvec_f16_with) with the kernel of the same
    /// product (the name less `_add_rmsnorm`, `matvec_f16_vec8_` for `matvec_f16_`) then
    /// `add_rmsnorm`. For tests and benchmarks: `matvec_add_rmsnorm` picks by the columns.
    #[allow(clippy::too_many_arguments)]
    pub fn matvec_add_rmsnorm_with(
        &self,
        kernel: &str,
        w: &Tensor,
        a: &Tensor,
        x: &Tensor,
        nw: &Tensor,
        h: &Tensor,
        eps: f32,
        arrivals: &Tensor,
    ) -> Result<()> {
        let k =
            PRODUCT_NORM.iter().copied().find(|k| k.entry.name() == kernel).ok_or_else(|| {
                Error::InvalidArgument(format!("no matvec_add_rmsnorm kernel named {kernel}"))
            })?;
        self.product_norm(Some(k), w, a, x, nw, h, eps, arrivals)
    }

    #[allow(clippy::too_many_arguments)]
    fn product_norm(
        &self,
        kernel: Option<ProductNorm>,
        w: &Tensor,
        a: &Tensor,
        x: &Tensor,
        nw: &Tensor,
        h: &Tensor,
        eps: f32,
        arrivals: &Tensor,
    ) -> Result<()> {
        let named = [
            (w, "matvec_add_rmsnorm w"),
            (a, "matvec_add_rmsnorm a"),
            (x, "matvec_add_rmsnorm x"),
            (nw, "matvec_add_rmsnorm norm weight"),
            (h, "matvec_add_rmsnorm h"),
            (arrivals, "matvec_add_rmsnorm arrivals"),
        ];
        self.own(&named)?;
        w.check_dtype(DType::F16, "matvec_add_rmsnorm w")?;
        let (rows, cols) = w.matrix_dims("matvec_add_rmsnorm w")?;
        if !cols.is_multiple_of(8) {
            return Err(Error::InvalidArgument(format!(
                "matvec_add_rmsnorm: {cols} columns; the kernel reads 8 f16 at a time (use matvec and add_rmsnorm)"
            )));
        }
        for (t, what) in &named[1..5] {
            t.check_dtype(DType::F32, what)?;
        }
        arrivals.check_dtype(DType::U32, "matvec_add_rmsnorm arrivals")?;
        need_len("matvec_add_rmsnorm a", a, cols)?;
        for (t, what) in &named[2..5] {
            need_len(what, t, rows)?;
        }
        need_len("matvec_add_rmsnorm arrivals", arrivals, 1)?;
        // What the kernel writes (x, h, arrivals) apart from each other and from what it reads.
        written_apart("matvec_add_rmsnorm", &named, &[2, 4, 5])?;
        if rows == 0 {
            return Ok(());
        }
        // Unless one is named, the kernel of the product `matvec` runs for the columns.
        let ProductNorm { entry, rows_per_workgroup, .. } = match kernel {
            Some(k) => k,
            None => {
                let product = matvec_f16_kernel(cols);
                PRODUCT_NORM.into_iter().find(|k| k.product == product).ok_or_else(|| {
                    Error::Unsupported(format!("matvec_add_rmsnorm: no kernel norms after {product}"))
                })?
            }
        };
        let imm = MatvecNormParams {
            rows: word("matvec_add_rmsnorm rows", rows)?,
            cols: word("matvec_add_rmsnorm cols", cols)?,
            y_offset: 0,
            accumulate: 1,
            eps,
        };
        // The stream twice: the product's rows (binding 2) and the last workgroup's atomic view.
        let b: [&dyn GpuBuffer; 7] =
            [&w.buffer, &a.buffer, &x.buffer, &nw.buffer, &h.buffer, &x.buffer, &arrivals.buffer];
        self.m.shared.dispatch(entry, &b, &[], &imm, row_groups(rows.div_ceil(rows_per_workgroup)))
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

/// An error naming the first of `named[written]` that is also another of `named` (by tensor):
/// a kernel's outputs must be tensors of their own.
fn written_apart(op: &str, named: &[(&Tensor, &str)], written: &[usize]) -> Result<()> {
    for &i in written {
        if named.iter().enumerate().any(|(j, (other, _))| j != i && other.id() == named[i].0.id()) {
            return Err(Error::InvalidArgument(format!(
                "{op}: {} must be a tensor of its own (the kernel writes it)",
                named[i].1
            )));
        }
    }
    Ok(())
}
