//! RMSNorm on one member: alone, after a residual add, and summing an all-reduce round's
//! partials in member order first (the row-parallel layer's fused round).

use vk_native::{BindRange, GpuBuffer};

use crate::error::{Error, Result};
use crate::kernels::{
    NormParams, ReduceNormParams, ReduceNormPollParams, ADD_RMSNORM, REDUCE_ADD_RMSNORM,
    REDUCE_ADD_RMSNORM_POLL, RMSNORM,
};
use crate::tensor::{DType, Tensor};

use super::transformer::{need_len, TransformerOps};

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
