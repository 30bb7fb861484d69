//! The MLP's kernels: SiLU(gate) · up, and the fused gate/up product with it.

use vk_native::GpuBuffer;

use crate::error::{Error, Result};
use crate::kernels::{
    elementwise_groups, row_groups, Entry, GateUpNormedParams, GateUpParams, SiluMulParams,
    MATVEC_GATE_UP_SILU, MATVEC_GATE_UP_SILU_NORMED, MATVEC_GATE_UP_SILU_X2, MATVEC_GATE_UP_SILU_X4,
    SILU_MUL,
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
        self.gate_up(DECODER_GATE_UP, wg, wu, x.into(), a)
    }

    /// [`TransformerOps::matvec_gate_up_silu`] through the kernel named `kernel` (`matvec_gate_up_silu`,
    /// `matvec_gate_up_silu_x2` or `matvec_gate_up_silu_x4`: bitwise the same result), `x` a plain vector.
    pub fn matvec_gate_up_silu_with(
        &self,
        kernel: &str,
        wg: &Tensor,
        wu: &Tensor,
        x: &Tensor,
        a: &Tensor,
    ) -> Result<()> {
        let k = GATE_UP
            .iter()
            .copied()
            .find(|k| k.entry.name() == kernel)
            .ok_or_else(|| Error::InvalidArgument(format!("no gate/up kernel named {kernel}")))?;
        self.gate_up(k, wg, wu, ProductInput::Plain(x), a)
    }

    fn gate_up(
        &self,
        kernel: GateUp,
        wg: &Tensor,
        wu: &Tensor,
        x: ProductInput<'_>,
        a: &Tensor,
    ) -> Result<()> {
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
        match x {
            ProductInput::Plain(x) => {
                let b: [&dyn GpuBuffer; 4] = [&wg.buffer, &wu.buffer, &x.buffer, &a.buffer];
                let groups = row_groups((rows as usize).div_ceil(kernel.rows_per_workgroup));
                self.m.shared.dispatch(kernel.entry, &b, &[], &GateUpParams { rows, cols }, groups)
            }
            ProductInput::PendingNorm { weighted, squares, eps } => {
                let groups = row_groups((rows as usize).div_ceil(2));
                let b: [&dyn GpuBuffer; 5] =
                    [&wg.buffer, &wu.buffer, &weighted.buffer, &squares.buffer, &a.buffer];
                let imm =
                    GateUpNormedParams { rows, cols, eps, squares: word("gate/up squares", squares.len())? };
                self.m.shared.dispatch(MATVEC_GATE_UP_SILU_NORMED, &b, &[], &imm, groups)
            }
        }
    }
}

/// A fused gate/up kernel and the rows one of its workgroups computes.
#[derive(Clone, Copy)]
struct GateUp {
    entry: Entry<GateUpParams>,
    rows_per_workgroup: usize,
}

/// The fused gate/up kernels, all with one result bit for bit: two rows per workgroup of 256
/// threads (a thread per lane of one dot product), and two or four rows per workgroup with a
/// thread computing both of its row's dot products (x loaded once for them).
const GATE_UP: [GateUp; 3] = [
    GateUp { entry: MATVEC_GATE_UP_SILU, rows_per_workgroup: 2 },
    GateUp { entry: MATVEC_GATE_UP_SILU_X2, rows_per_workgroup: 2 },
    GateUp { entry: MATVEC_GATE_UP_SILU_X4, rows_per_workgroup: 4 },
];

/// The decoder's gate/up kernel, `matvec_gate_up_silu_x2`: on an H100 the 27B shape's product
/// takes 119 µs against 121 and 120 for the other two, and the decode gains 0.7%
/// (docs/BENCHMARKS.md, "The fused decoder kernels").
const DECODER_GATE_UP: GateUp = GATE_UP[1];
