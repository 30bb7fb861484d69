//! Matrix–vector product bandwidth: f16 weights, f32 vectors; bytes moved (weights once, x and
//! y) per second.

use std::time::Instant;

use serde::Serialize;

use super::{data, summarize, Summary};
use crate::error::Result;
use crate::group::Member;
use crate::tensor::DType;

/// One measured shape and kernel.
#[derive(Debug, Clone, Serialize)]
pub struct MatvecPoint {
    /// Rows of the f16 weight matrix (outputs).
    pub rows: usize,
    /// Columns (inputs).
    pub cols: usize,
    /// The WGSL kernel measured.
    pub kernel: &'static str,
    /// Bytes moved (weights once, x and y) per second, GB/s.
    pub gbps: Summary,
    /// Time per product, µs.
    pub us_per_matvec: Summary,
}

/// Times `reps` batches of 20 products `y = W x` with `W [rows, cols]` f16, through the kernel
/// `matvec` picks.
pub fn measure(m: &Member, rows: usize, cols: usize, reps: usize) -> Result<MatvecPoint> {
    measure_with(m, None, rows, cols, reps)
}

/// [`measure`] through a named f16 kernel (one of [`crate::MATVEC_F16_KERNELS`]; `cols % 8 == 0`).
pub fn measure_with(
    m: &Member,
    kernel: Option<&'static str>,
    rows: usize,
    cols: usize,
    reps: usize,
) -> Result<MatvecPoint> {
    let w = m.empty(&[rows, cols], DType::F16)?;
    m.init_weights(&w, 1, cols, 0, 0, 12)?;
    let x = m.upload_f32(&data(2, cols))?;
    let y = m.empty(&[rows], DType::F32)?;
    m.synchronize()?;
    const BATCH: usize = 20;
    let bytes = (rows * cols * 2 + cols * 4 + rows * 4) as f64;
    let (mut gbps, mut us) = (Vec::new(), Vec::new());
    for rep in 0..reps + 1 {
        let t = Instant::now();
        for _ in 0..BATCH {
            match kernel {
                Some(k) => m.matvec_f16_with(k, &w, &x, &y)?,
                None => m.matvec(&w, &x, &y)?,
            }
        }
        m.synchronize()?;
        let s = t.elapsed().as_secs_f64();
        if rep > 0 {
            gbps.push(BATCH as f64 * bytes / s / 1e9);
            us.push(s / BATCH as f64 * 1e6);
        }
    }
    Ok(MatvecPoint {
        rows,
        cols,
        kernel: kernel.unwrap_or(crate::ops::matvec_f16_kernel(cols)),
        gbps: summarize(&gbps),
        us_per_matvec: summarize(&us),
    })
}
