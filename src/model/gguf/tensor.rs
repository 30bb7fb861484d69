//! [`TensorInfo`]: one entry of a GGUF file's tensor directory.

use crate::model::quant::GgmlType;

/// Where one tensor's data lies in the file, and its shape and type.
///
/// A `TensorInfo` from [`super::GgufFile`] has been checked at open: its sizes do not overflow
/// and its data lies inside the file. [`super::GgufFile::read`] and
/// [`super::GgufFile::read_rows`] only accept the file's own tensor infos.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    /// The tensor's name (`"blk.0.attn_q.weight"`).
    pub name: String,
    /// The dimensions in GGUF order: `dims[0]` is the innermost, the row length.
    pub dims: Vec<u64>,
    /// The element type.
    pub ty: GgmlType,
    /// Where the data starts, in bytes from the start of the file (not of the data section).
    pub offset: u64,
    /// The size of the data in bytes.
    pub bytes: u64,
}

impl TensorInfo {
    /// Elements per row: `dims[0]` (1 for a tensor of no dimensions, a scalar).
    pub fn row_len(&self) -> u64 {
        self.dims.first().copied().unwrap_or(1)
    }

    /// The number of rows: the product of `dims[1..]` (1 for a vector). Saturates at `u64::MAX`
    /// for a hand-made `TensorInfo` whose product overflows (one from a file never does).
    pub fn rows(&self) -> u64 {
        self.dims.iter().skip(1).try_fold(1u64, |acc, &d| acc.checked_mul(d)).unwrap_or(u64::MAX)
    }

    /// The number of elements: the product of all dimensions (saturating like [`Self::rows`]).
    pub fn elements(&self) -> u64 {
        self.row_len().saturating_mul(self.rows())
    }

    /// Bytes per row. 0 for a hand-made `TensorInfo` whose row is not a whole number of blocks
    /// (one from a file always is).
    pub fn row_bytes(&self) -> u64 {
        self.ty.row_bytes(self.row_len()).unwrap_or(0)
    }

    /// The shape as `[d0, d1, ...]`, GGUF order, for messages.
    pub fn shape(&self) -> String {
        shape_string(&self.dims)
    }
}

/// `[d0, d1, ...]`.
pub(super) fn shape_string(dims: &[u64]) -> String {
    let parts: Vec<String> = dims.iter().map(u64::to_string).collect();
    format!("[{}]", parts.join(", "))
}
