//! Reading tensor data out of a [`GgufFile`]: byte ranges, rows (gathered or dequantized),
//! each checked against the tensor's place in the file first.

use std::ops::Range;
use std::os::unix::fs::FileExt;

use super::file::GgufFile;
use super::tensor::TensorInfo;
use crate::error::FormatError;
use crate::model::quant;
use crate::model::rect::Rect;

impl GgufFile {
    // ---- tensors ----

    /// Every tensor, in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// The tensor called `name`; an error naming it and the file if there is none.
    pub fn tensor(&self, name: &str) -> Result<&TensorInfo, FormatError> {
        self.tensor_index.get(name).and_then(|&i| self.tensors.get(i)).ok_or_else(|| {
            self.err(format!("no tensor named '{name}' (the file has {} tensors)", self.tensors.len()))
        })
    }

    /// An error naming `t` unless crossgpu computes with its type (see [`crate::model::GgmlType::supported`]).
    pub fn check_supported(&self, t: &TensorInfo) -> Result<(), FormatError> {
        if t.ty.supported() {
            Ok(())
        } else {
            Err(self.err(format!(
                "tensor '{}' has type {}, which crossgpu does not support (it supports {})",
                t.name,
                t.ty,
                quant::supported_type_names()
            )))
        }
    }

    /// `t` as this file knows it: refuses a `TensorInfo` that is not one of this file's (from
    /// another file, or altered), whose offsets could point anywhere.
    fn own(&self, t: &TensorInfo) -> Result<&TensorInfo, FormatError> {
        match self.tensor_index.get(&t.name).and_then(|&i| self.tensors.get(i)) {
            Some(own) if own == t => Ok(own),
            _ => Err(self.err(format!(
                "tensor '{}' ({} {}) is not one of this file's",
                t.name,
                t.ty,
                t.shape()
            ))),
        }
    }

    /// Reads `buf.len()` bytes of `t`'s data at `at`, an absolute file offset the caller checked
    /// lies within `t`.
    fn pread(&self, t: &TensorInfo, at: u64, buf: &mut [u8]) -> Result<(), FormatError> {
        self.file.read_exact_at(buf, at).map_err(|e| {
            self.err(format!(
                "tensor '{}': reading {} bytes at file offset {at} failed (has the file changed since it \
                 was opened?): {e}",
                t.name,
                buf.len()
            ))
        })
    }

    /// Reads bytes `byte_range` of tensor `t`'s data (offsets relative to the tensor) into
    /// `out`, which must be exactly as long as the range. One positioned read.
    pub fn read(&self, t: &TensorInfo, byte_range: Range<u64>, out: &mut [u8]) -> Result<(), FormatError> {
        let t = self.own(t)?;
        let Range { start, end } = byte_range;
        if start > end || end > t.bytes {
            return Err(self.err(format!(
                "tensor '{}': byte range {start}..{end} is outside its {} bytes",
                t.name, t.bytes
            )));
        }
        if out.len() as u64 != end - start {
            return Err(self.err(format!(
                "tensor '{}': byte range {start}..{end} is {} bytes, but the buffer has {}",
                t.name,
                end - start,
                out.len()
            )));
        }
        // start <= t.bytes and t's data lies inside the file, so this cannot overflow.
        let at = t.offset.checked_add(start).ok_or_else(|| self.err("offset overflow"))?;
        self.pread(t, at, out)
    }

    /// Reads rows `rows` of tensor `t` (rows are counted over `dims[1..]`, flattened), columns
    /// `cols` of each (element indices within a row), into `out`, packed row after row: each
    /// row's slice is `cols.len() / block_elems * block_bytes` bytes, still in `t`'s type.
    ///
    /// `cols` must start and end on a multiple of the type's block size (a quantized block
    /// cannot be split), and `out` must be exactly the size of the rectangle. Full-width rows
    /// are read with one positioned read; column slices of several rows are gathered from
    /// spans of up to 8 MiB when the slice is at least a quarter of the row, else read row by
    /// row.
    pub fn read_rows(
        &self,
        t: &TensorInfo,
        rows: Range<u64>,
        cols: Range<u64>,
        out: &mut [u8],
    ) -> Result<(), FormatError> {
        let t = self.own(t)?;
        let (block_elems, block_bytes) = (t.ty.block_elems(), t.ty.block_bytes());
        let (n_rows_all, row_len, row_bytes) = (t.rows(), t.row_len(), t.row_bytes());
        if rows.start > rows.end || rows.end > n_rows_all {
            return Err(self.err(format!(
                "tensor '{}': rows {}..{} are outside its {n_rows_all} rows (shape {})",
                t.name,
                rows.start,
                rows.end,
                t.shape()
            )));
        }
        if cols.start > cols.end || cols.end > row_len {
            return Err(self.err(format!(
                "tensor '{}': columns {}..{} are outside its rows of {row_len} elements",
                t.name, cols.start, cols.end
            )));
        }
        if !cols.start.is_multiple_of(block_elems) || !cols.end.is_multiple_of(block_elems) {
            return Err(self.err(format!(
                "tensor '{}': columns {}..{} do not start and end on a block of its type {} ({} elements)",
                t.name, cols.start, cols.end, t.ty, block_elems
            )));
        }
        let overflow = || self.err(format!("tensor '{}': size overflow", t.name));
        // All of these are at most t.bytes, which open checked.
        let col_offset = (cols.start / block_elems).checked_mul(block_bytes).ok_or_else(overflow)?;
        let col_bytes =
            ((cols.end - cols.start) / block_elems).checked_mul(block_bytes).ok_or_else(overflow)?;
        let n_rows = rows.end - rows.start;
        let want = n_rows.checked_mul(col_bytes).ok_or_else(overflow)?;
        if out.len() as u64 != want {
            return Err(self.err(format!(
                "tensor '{}': rows {}..{} × columns {}..{} are {want} bytes, but the buffer has {}",
                t.name,
                rows.start,
                rows.end,
                cols.start,
                cols.end,
                out.len()
            )));
        }
        let first = rows
            .start
            .checked_mul(row_bytes)
            .and_then(|r| r.checked_add(col_offset))
            .and_then(|r| r.checked_add(t.offset))
            .ok_or_else(overflow)?;
        let rect = Rect { first, row_bytes, col_bytes, rows: n_rows };
        rect.read(out, |at, buf| self.pread(t, at, buf), overflow)
    }

    /// Reads whole rows `rows` of `t` and dequantizes them to `f32` with the CPU reference
    /// ([`quant::dequantize`]): `rows.len() * row_len` values, row after row.
    pub fn dequantize_rows(&self, t: &TensorInfo, rows: Range<u64>) -> Result<Vec<f32>, FormatError> {
        let t = self.own(t)?;
        self.check_supported(t)?;
        if rows.start > rows.end || rows.end > t.rows() {
            return Err(self.err(format!(
                "tensor '{}': rows {}..{} are outside its {} rows (shape {})",
                t.name,
                rows.start,
                rows.end,
                t.rows(),
                t.shape()
            )));
        }
        // Within the tensor, so both are at most its size (bytes, and elements of a few bytes).
        let overflow = || self.err(format!("tensor '{}': size overflow", t.name));
        let n_rows = rows.end - rows.start;
        let bytes = usize::try_from(n_rows.checked_mul(t.row_bytes()).ok_or_else(overflow)?)
            .map_err(|_| overflow())?;
        let elems =
            usize::try_from(n_rows.checked_mul(t.row_len()).ok_or_else(overflow)?).map_err(|_| overflow())?;
        let mut raw = vec![0u8; bytes];
        self.read_rows(t, rows, 0..t.row_len(), &mut raw)?;
        let mut out = vec![0f32; elems];
        quant::dequantize(t.ty, &raw, &mut out)
            .map_err(|e| self.err(format!("tensor '{}': {}", t.name, e.what)))?;
        Ok(out)
    }
}
