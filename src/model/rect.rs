//! Reading a rectangle of a row-major tensor out of a file by positioned reads: the part of a
//! checkpoint reader that does not depend on the format (GGUF and safetensors both store each
//! tensor's rows back to back at one offset).

use crate::error::FormatError;

/// At most this much is read in one `pread` when gathering column slices of several rows.
const GATHER_SPAN_BYTES: u64 = 8 << 20;
/// Column slices are gathered from whole-row spans when the rows are at most this many times
/// wider than the slice; narrower slices are read row by row (fewer bytes, more calls).
const GATHER_MAX_WASTE: u64 = 4;

/// Where a rectangle lies in a file: `rows` slices of `col_bytes` each, the first at absolute
/// offset `first` and the next ones `row_bytes` apart. The caller has checked that every byte
/// of it lies within one tensor of the file.
pub(crate) struct Rect {
    pub first: u64,
    pub row_bytes: u64,
    pub col_bytes: u64,
    pub rows: u64,
}

impl Rect {
    /// Reads the rectangle into `out` (exactly `rows · col_bytes` bytes, slices back to back)
    /// with `pread(offset, buf)`: one read for whole rows or a single slice; column slices
    /// gathered from spans of up to 8 MiB when the slice is at least a quarter of the row, else
    /// read slice by slice. `overflow` is the error of a size past the address space.
    pub fn read(
        &self,
        out: &mut [u8],
        pread: impl Fn(u64, &mut [u8]) -> Result<(), FormatError>,
        overflow: impl Fn() -> FormatError,
    ) -> Result<(), FormatError> {
        let Rect { first, row_bytes, col_bytes, rows } = *self;
        if rows.checked_mul(col_bytes) != Some(out.len() as u64) {
            return Err(overflow());
        }
        if out.is_empty() {
            return Ok(());
        }
        if col_bytes == row_bytes || rows == 1 {
            return pread(first, out);
        }
        let col = usize::try_from(col_bytes).map_err(|_| overflow())?;
        if row_bytes > col_bytes.saturating_mul(GATHER_MAX_WASTE) {
            let mut at = first;
            for dst in out.chunks_exact_mut(col) {
                pread(at, dst)?;
                at = at.checked_add(row_bytes).ok_or_else(&overflow)?;
            }
            return Ok(());
        }
        let stride = usize::try_from(row_bytes).map_err(|_| overflow())?;
        let rows_per_read =
            usize::try_from((GATHER_SPAN_BYTES / row_bytes).max(1)).map_err(|_| overflow())?;
        let chunk_bytes = rows_per_read.checked_mul(col).ok_or_else(&overflow)?;
        let mut scratch = Vec::new();
        let mut at = first;
        for out_chunk in out.chunks_mut(chunk_bytes) {
            let k = out_chunk.len() / col;
            // From the first wanted byte of the first row to the last wanted byte of the last.
            let span = k
                .saturating_sub(1)
                .checked_mul(stride)
                .and_then(|s| s.checked_add(col))
                .ok_or_else(&overflow)?;
            scratch.resize(span, 0);
            pread(at, &mut scratch)?;
            for (r, dst) in out_chunk.chunks_exact_mut(col).enumerate() {
                let src =
                    r.checked_mul(stride).and_then(|s| scratch.get(s..s + col)).ok_or_else(&overflow)?;
                dst.copy_from_slice(src);
            }
            let advance =
                u64::try_from(k).ok().and_then(|k| k.checked_mul(row_bytes)).ok_or_else(&overflow)?;
            at = at.checked_add(advance).ok_or_else(&overflow)?;
        }
        Ok(())
    }
}
