//! Rows of a checkpoint tensor the members hold as f16 but the file stores otherwise (a
//! quantized or BF16 embedding table, F32 matrices): read, dequantized and rounded to f16 on
//! the host's cores in parallel, straight into the staging memory of the upload.

use std::ops::Range;

use crate::error::Result;
use crate::tensor::f16_saturating;

/// Writes rows `rows` as f16 (saturating, as every f16 upload rounds) into `dst`
/// (`rows.len() · cols · 2` bytes), `values(sub)` giving rows `sub` in f32; the rows are
/// shared out among the available cores, each converting its part.
pub(crate) fn write_f16_rows(
    rows: Range<usize>,
    cols: usize,
    dst: &mut [u8],
    values: &(dyn Fn(Range<usize>) -> Result<Vec<f32>> + Sync),
) -> Result<()> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(rows.len().max(1));
    let per = rows.len().div_ceil(threads.max(1)).max(1);
    let row_bytes = cols * 2;
    std::thread::scope(|scope| {
        let parts: Vec<_> = dst
            .chunks_mut(per * row_bytes.max(1))
            .enumerate()
            .map(|(i, part)| {
                let sub = rows.start + i * per..(rows.start + (i + 1) * per).min(rows.end);
                scope.spawn(move || -> Result<()> {
                    let v = values(sub)?;
                    for (d, x) in part.chunks_exact_mut(2).zip(v) {
                        d.copy_from_slice(&f16_saturating(x).to_le_bytes());
                    }
                    Ok(())
                })
            })
            .collect();
        parts.into_iter().try_for_each(|p| p.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
    })
}
