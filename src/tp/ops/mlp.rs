//! The MLP's kernels: SiLU(gate) · up, and the fused gate/up product with it.

use vk_native::GpuBuffer;

use crate::error::{Error, Result};
use crate::kernels::{
    elementwise_groups, row_groups, GateUpNormedParams, GateUpParams, SiluMulParams, MATVEC_GATE_UP_SILU,
    MATVEC_GATE_UP_SILU_NORMED, SILU_MUL,
};
use crate::tensor::{DType, Tensor};

use super::transformer::{need_len, word, ProductInput, TransformerOps};

impl<'m> TransformerOps<'m> {
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
    /// (the kernel performs their operations in their order). `x` may be
    /// [`ProductInput::PendingNorm`]: the product then reads the RMSNorm of a vector without a
    /// dispatch before it, within rounding of [`TransformerOps::rmsnorm`] first (not bitwise).
    pub fn matvec_gate_up_silu<'a>(
        &self,
        wg: &Tensor,
        wu: &Tensor,
        x: impl Into<ProductInput<'a>>,
        a: &Tensor,
    ) -> Result<()> {
        let x = x.into();
        self.own(&[(wg, "gate weights"), (wu, "up weights"), (a, "gate/up output")])?;
        wg.check_dtype(DType::F16, "gate weights")?;
        wu.check_dtype(DType::F16, "up weights")?;
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
        x.check(self, "gate/up", cols)?;
        need_len("gate/up output", a, rows)?;
        if x.reads(a) {
            return Err(Error::InvalidArgument("gate/up: the output must not be the input".into()));
        }
        if rows == 0 {
            return Ok(());
        }
        if cols == 0 {
            return self.m.fill(a, 0.0);
        }
        let (rows, cols) = (word("gate/up rows", rows)?, word("gate/up cols", cols)?);
        let groups = row_groups((rows as usize).div_ceil(2));
        match x {
            ProductInput::Plain(x) => {
                let b: [&dyn GpuBuffer; 4] = [&wg.buffer, &wu.buffer, &x.buffer, &a.buffer];
                self.m.shared.dispatch(MATVEC_GATE_UP_SILU, &b, &[], &GateUpParams { rows, cols }, groups)
            }
            ProductInput::PendingNorm { weighted, squares, eps } => {
                let b: [&dyn GpuBuffer; 5] =
                    [&wg.buffer, &wu.buffer, &weighted.buffer, &squares.buffer, &a.buffer];
                let imm =
                    GateUpNormedParams { rows, cols, eps, squares: word("gate/up squares", squares.len())? };
                self.m.shared.dispatch(MATVEC_GATE_UP_SILU_NORMED, &b, &[], &imm, groups)
            }
        }
    }
}
