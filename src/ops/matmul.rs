//! The prompt's products: `Y = X Wᵀ` over `positions` rows of X at once (`Y[t] = W X[t]`),
//! with W a member's weight slice as stored — f16, bf16 or ggml blocks, dequantized in
//! registers exactly as the matrix–vector kernels do — through one kernel per storage
//! (`wgsl/include/matmul_tile.wgsl`): a workgroup takes 32 rows × 32 positions, an invocation
//! 4 × 4 of them, so each weight it dequantizes serves 4 positions (and its neighbours read the
//! same weights), where a decode step reads every weight once per token. Each output is a sum
//! over the columns (8 at a time in a small tree, then in order), within the usual dot-product
//! bound `γ_(cols+1) · Σ_k |w_k x_k|` of the exact product of the dequantized weights.
//!
//! Over f16 weights on a device with cooperative matrices ([`Member::cooperative_matrix`]),
//! [`Member::matmul_cooperative`] runs the whole tiles on its matrix units
//! (`wgsl/include/matmul_coop.wgsl`) with x rounded to f16, and the strips past them through the
//! tiled kernel.

use vk_native::GpuBuffer;

use super::{QuantFormat, QuantMatrix};
use crate::error::{Error, Result};
use crate::group::Member;
use crate::kernels::{
    Entry, MatmulCoopParams, MatmulParams, MATMUL_BF16, MATMUL_F16, MATMUL_F16_COOP16, MATMUL_F16_COOP8,
    MATMUL_Q4_0, MATMUL_Q4_1, MATMUL_Q4_K, MATMUL_Q6_K, MATMUL_Q8_0,
};
use crate::tensor::{DType, Tensor};

/// Rows of W and positions of X one workgroup takes (`ROWS_PER_GROUP`, `POSITIONS_PER_GROUP`
/// in the WGSL).
const TILE: usize = 32;
/// The kernels on matrix units by tile side (`wgsl/include/matmul_coop.wgsl`): 16 for NVIDIA's
/// tensor cores, 8 for lavapipe's emulation. A workgroup takes 8 sides of rows by 4 of positions.
const COOP_KERNELS: [(usize, Entry<MatmulCoopParams>); 2] = [(16, MATMUL_F16_COOP16), (8, MATMUL_F16_COOP8)];

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
        let checked = self.check_matmul(w, (rows, cols), x, y, positions)?;
        self.matmul_tiles(MATMUL_F16, checked, (0, 0))
    }

    /// Whether this member's device has cooperative matrices (f16 tile products into f32 on
    /// its matrix units) enabled: where [`Member::matmul_cooperative`] runs.
    pub fn cooperative_matrix(&self) -> bool {
        self.cooperative_kernel().is_some()
    }

    /// The tile side and kernel of [`Member::matmul_cooperative`] on this member's device.
    fn cooperative_kernel(&self) -> Option<(usize, Entry<MatmulCoopParams>)> {
        let sides = &self.adapter().caps.cooperative_matrix_sides;
        let enabled = self.device().cooperative_matrix_enabled();
        COOP_KERNELS.into_iter().find(|(side, _)| enabled && sides.contains(&(*side as u32)))
    }

    /// [`Member::matmul`] on the device's matrix units: `x_half` is `x` rounded to f16
    /// ([`Member::convert_f32_to_f16`]: beyond ±65504 saturated), and the outputs of whole
    /// tiles of the device's side s (16 on NVIDIA; the first `positions / s · s` positions of
    /// the first `rows / s · s` rows) are the products of W and `x_half`, summed in f32 in an
    /// order the device chooses (and its matrix unit may truncate rather than round) — within
    /// `2 γ_(cols+1) · Σ_k |w_k x̂_k|` of the exact product with x̂ (|x̂ − x| ≤ 2⁻¹¹ |x|,
    /// or 2⁻²⁵ below f16's normal range); the outputs past them are [`Member::matmul`]'s, from
    /// `x`. A width that is not a multiple of s (or fewer than s positions or rows) leaves no
    /// whole tile: all of it is [`Member::matmul`]'s. A device without cooperative matrices is
    /// an error ([`Member::cooperative_matrix`]).
    pub fn matmul_cooperative(
        &self,
        w: &Tensor,
        x: &Tensor,
        x_half: &Tensor,
        y: &Tensor,
        positions: usize,
    ) -> Result<()> {
        w.check_on(&self.shared, "matmul_cooperative w")?;
        w.check_dtype(DType::F16, "matmul_cooperative w")?;
        x_half.check_on(&self.shared, "matmul_cooperative x_half")?;
        x_half.check_dtype(DType::F16, "matmul_cooperative x_half")?;
        let Some((unit, kernel)) = self.cooperative_kernel() else {
            return Err(Error::Unsupported(format!(
                "matmul_cooperative on member {} ({}): its device has no cooperative matrices of f16 into f32 enabled",
                self.index(),
                self.adapter().name
            )));
        };
        let (rows, cols) = w.matrix_dims("matmul_cooperative w")?;
        if x_half.len() != x.len() {
            return Err(Error::LengthMismatch {
                what: "matmul_cooperative x_half (x rounded to f16)".into(),
                expected: x.len(),
                got: x_half.len(),
            });
        }
        if y.id() == x_half.id() {
            return Err(Error::InvalidArgument(
                "matmul_cooperative: y must be a tensor apart from x_half".into(),
            ));
        }
        let checked = self.check_matmul(w, (rows, cols), x, y, positions)?;
        let (tile_rows, tile_positions) = (rows / unit * unit, positions / unit * unit);
        if !cols.is_multiple_of(unit) || tile_rows == 0 || tile_positions == 0 || checked.is_none() {
            return self.matmul_tiles(MATMUL_F16, checked, (0, 0));
        }
        let imm = MatmulCoopParams {
            rows: rows as u32,
            cols: cols as u32,
            positions: tile_positions as u32,
            tile_rows: tile_rows as u32,
        };
        let groups = [tile_rows.div_ceil(8 * unit) as u32, tile_positions.div_ceil(4 * unit) as u32, 1];
        let b: [&dyn GpuBuffer; 3] = [&w.buffer, &x_half.buffer, &y.buffer];
        self.shared.dispatch(kernel, &b, &[], &imm, groups)?;
        // The strips: the positions past the tiles over every row, then the rows past them
        // over the tiles' positions.
        if tile_positions < positions {
            self.matmul_tiles(MATMUL_F16, checked, (0, tile_positions))?;
        }
        if tile_rows < rows {
            let c = checked.map(|c| Checked { positions: tile_positions, ..c });
            self.matmul_tiles(MATMUL_F16, c, (tile_rows, 0))?;
        }
        Ok(())
    }

    /// [`Member::matmul`] over a quantized slice, its blocks read as stored.
    pub fn matmul_quant(&self, w: &QuantMatrix, x: &Tensor, y: &Tensor, positions: usize) -> Result<()> {
        w.tensor().check_on(&self.shared, "matmul_quant w")?;
        let checked = self.check_matmul(w.tensor(), (w.rows(), w.cols()), x, y, positions)?;
        self.matmul_tiles(entry(w.format()), checked, (0, 0))
    }

    /// Checks a product's tensors; `None` when there is nothing to dispatch (no rows or
    /// positions; no columns, whose zeros are written here).
    fn check_matmul<'a>(
        &self,
        w: &'a Tensor,
        (rows, cols): (usize, usize),
        x: &'a Tensor,
        y: &'a Tensor,
        positions: usize,
    ) -> Result<Option<Checked<'a>>> {
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
            return Ok(None);
        }
        if cols == 0 {
            // A member holding no columns of a row-parallel layer contributes zeros (and its
            // slice may have no buffer to bind).
            self.fill(y, 0.0)?;
            return Ok(None);
        }
        Ok(Some(Checked { w, x, y, rows, cols, positions }))
    }

    /// The tiled kernel over rows `from.0 ..` of positions `from.1 ..` of a checked product.
    fn matmul_tiles(
        &self,
        kernel: Entry<MatmulParams>,
        c: Option<Checked<'_>>,
        from: (usize, usize),
    ) -> Result<()> {
        let Some(c) = c else { return Ok(()) };
        let (row_from, position_from) = from;
        if row_from >= c.rows || position_from >= c.positions {
            return Ok(());
        }
        let groups = [
            (c.rows - row_from).div_ceil(TILE) as u32,
            (c.positions - position_from).div_ceil(TILE) as u32,
            1,
        ];
        let imm = MatmulParams {
            rows: c.rows as u32,
            cols: c.cols as u32,
            positions: c.positions as u32,
            row_from: row_from as u32,
            position_from: position_from as u32,
        };
        let b: [&dyn GpuBuffer; 3] = [&c.w.buffer, &c.x.buffer, &c.y.buffer];
        self.shared.dispatch(kernel, &b, &[], &imm, groups)
    }
}

/// A product whose tensors and sizes were checked, with something to compute.
#[derive(Clone, Copy)]
struct Checked<'a> {
    w: &'a Tensor,
    x: &'a Tensor,
    y: &'a Tensor,
    rows: usize,
    cols: usize,
    positions: usize,
}
