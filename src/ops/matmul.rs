//! The prompt's products: `Y = X Wᵀ` over `positions` rows of X at once (`Y[t] = W X[t]`),
//! with W a member's weight slice as stored — f16, bf16 or ggml blocks, dequantized in
//! registers exactly as the matrix–vector kernels do — through one kernel per storage
//! (`wgsl/include/matmul_tile.wgsl`): a workgroup takes 32 rows × 32 positions, an invocation
//! 4 × 4 of them, so each weight it dequantizes serves 4 positions (and its neighbours read the
//! same weights), where a decode step reads every weight once per token. Each output is a sum
//! over the columns (8 at a time in a small tree, then in order), within the usual dot-product
//! bound `γ_(cols+1) · Σ_k |w_k x_k|` of the exact product of the dequantized weights.

use vk_native::GpuBuffer;

use super::{QuantFormat, QuantMatrix};
use crate::error::{Error, Result};
use crate::group::Member;
use crate::kernels::{
    Entry, MatmulParams, MATMUL_BF16, MATMUL_F16, MATMUL_Q4_0, MATMUL_Q4_1, MATMUL_Q4_K, MATMUL_Q6_K,
    MATMUL_Q8_0,
};
use crate::tensor::{DType, Tensor};

/// Rows of W and positions of X one workgroup takes (`ROWS_PER_GROUP`, `POSITIONS_PER_GROUP`
/// in the WGSL).
const TILE: usize = 32;

fn entry(format: QuantFormat) -> Entry<MatmulParams> {
    match format {
        QuantFormat::Q8_0 => MATMUL_Q8_0,
        QuantFormat::Q4_0 => MATMUL_Q4_0,
        QuantFormat::Q4_1 => MATMUL_Q4_1,
        QuantFormat::Q4_K => MATMUL_Q4_K,
        QuantFormat::Q6_K => MATMUL_Q6_K,
        QuantFormat::BF16 => MATMUL_BF16,
    }
}

impl Member {
    /// `y[t] = W x[t]` for `positions` rows: `w` f16 `[rows, cols]`, `x` f32 `[positions,
    /// cols]`, `y` f32 `[positions, rows]` (flat tensors of those lengths). No columns gives
    /// zeros.
    pub fn matmul(&self, w: &Tensor, x: &Tensor, y: &Tensor, positions: usize) -> Result<()> {
        w.check_on(&self.shared, "matmul w")?;
        w.check_dtype(DType::F16, "matmul w")?;
        let (rows, cols) = w.matrix_dims("matmul w")?;
        self.matmul_checked(MATMUL_F16, w, (rows, cols), x, y, positions)
    }

    /// [`Member::matmul`] over a quantized slice, its blocks read as stored.
    pub fn matmul_quant(&self, w: &QuantMatrix, x: &Tensor, y: &Tensor, positions: usize) -> Result<()> {
        w.tensor().check_on(&self.shared, "matmul_quant w")?;
        self.matmul_checked(entry(w.format()), w.tensor(), (w.rows(), w.cols()), x, y, positions)
    }

    fn matmul_checked(
        &self,
        kernel: Entry<MatmulParams>,
        w: &Tensor,
        (rows, cols): (usize, usize),
        x: &Tensor,
        y: &Tensor,
        positions: usize,
    ) -> Result<()> {
        x.check_on(&self.shared, "matmul x")?;
        y.check_on(&self.shared, "matmul y")?;
        x.check_dtype(DType::F32, "matmul x")?;
        y.check_dtype(DType::F32, "matmul y")?;
        let len = |what: &str, a: usize, b: usize| {
            a.checked_mul(b).filter(|&n| u32::try_from(n).is_ok()).ok_or_else(|| {
                Error::InvalidArgument(format!("matmul {what}: {a} × {b} elements do not fit 32 bits"))
            })
        };
        let (x_len, y_len) = (len("x", positions, cols)?, len("y", positions, rows)?);
        len("w", rows, cols)?;
        if x.len() != x_len {
            return Err(Error::LengthMismatch {
                what: format!("matmul x ({positions} positions of {cols} columns)"),
                expected: x_len,
                got: x.len(),
            });
        }
        if y.len() != y_len {
            return Err(Error::LengthMismatch {
                what: format!("matmul y ({positions} positions of {rows} rows)"),
                expected: y_len,
                got: y.len(),
            });
        }
        if y.id() == x.id() || y.id() == w.id() {
            return Err(Error::InvalidArgument("matmul: y must be a tensor apart from x and w".into()));
        }
        let w_bytes = w.dtype().storage_bytes(w.len());
        if w_bytes > u64::from(u32::MAX) {
            return Err(Error::InvalidArgument(format!(
                "matmul: a weight slice of {w_bytes} bytes is past the kernel's 32-bit byte offsets"
            )));
        }
        let groups = [rows.div_ceil(TILE), positions.div_ceil(TILE)];
        if groups.iter().any(|&g| g > 65_535) {
            return Err(Error::InvalidArgument(format!(
                "matmul: {rows} rows × {positions} positions need {groups:?} workgroups, past 65535 a dimension"
            )));
        }
        if rows == 0 || positions == 0 {
            return Ok(());
        }
        if cols == 0 {
            // A member holding no columns of a row-parallel layer contributes zeros (and its
            // slice may have no buffer to bind).
            return self.fill(y, 0.0);
        }
        let imm = MatmulParams { rows: rows as u32, cols: cols as u32, positions: positions as u32 };
        let b: [&dyn GpuBuffer; 3] = [&w.buffer, &x.buffer, &y.buffer];
        self.shared.dispatch(kernel, &b, &[], &imm, [groups[0] as u32, groups[1] as u32, 1])
    }
}
