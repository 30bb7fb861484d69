//! Deterministic weights generated on the device (`wgsl/init_weights.wgsl`; its CPU twin is
//! `tp::init`).

use crate::error::{Error, Result};
use crate::kernels::{elementwise_groups, InitWeightsParams, INIT_WEIGHTS_F16};
use crate::tensor::{DType, Tensor};

use super::transformer::{add, TransformerOps};

impl<'m> TransformerOps<'m> {
    /// Fills f16 `t` (`[rows, cols]`) with the slice at (`row_offset`, `col_offset`) of the
    /// logical `[*, full_cols]` matrix of deterministic values `k·2^-shift`, `k` in
    /// [-1024, 1023], drawn from `seed` (see `wgsl/init_weights.wgsl`; CPU twin
    /// `tp::init::weight`).
    pub fn init_weights(
        &self,
        t: &Tensor,
        seed: u32,
        full_cols: usize,
        row_offset: usize,
        col_offset: usize,
        shift: u32,
    ) -> Result<()> {
        self.own(&[(t, "init_weights")])?;
        t.check_dtype(DType::F16, "init_weights")?;
        let &[rows, cols] = t.shape() else {
            return Err(Error::LengthMismatch {
                what: "init_weights dimensions".into(),
                expected: 2,
                got: t.shape().len(),
            });
        };
        if add("init_weights", col_offset, cols)? > full_cols {
            return Err(Error::LengthMismatch {
                what: "init_weights columns".into(),
                expected: full_cols,
                got: col_offset.saturating_add(cols),
            });
        }
        if add("init_weights", row_offset, rows)? as u64 * full_cols as u64 > u32::MAX as u64 {
            return Err(Error::InvalidArgument("init_weights: logical matrix past 2^32 elements".into()));
        }
        if rows * cols == 0 {
            return Ok(());
        }
        let imm = InitWeightsParams {
            seed,
            rows: rows as u32,
            cols: cols as u32,
            full_cols: full_cols as u32,
            row_offset: row_offset as u32,
            col_offset: col_offset as u32,
            shift,
        };
        self.m.shared.dispatch(
            INIT_WEIGHTS_F16,
            &[&t.buffer],
            &[],
            &imm,
            elementwise_groups((rows * cols).div_ceil(2)),
        )
    }
}
