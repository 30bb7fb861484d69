//! Element types of tensors, apart from `tensor.rs` so that the error type can name a dtype
//! without importing tensors (and, through them, groups and configuration).

/// Element type of a tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DType {
    /// 32-bit floats, 4 bytes per element.
    F32,
    /// 16-bit floats, stored packed two per 32-bit word (element `2w` in the low half); the
    /// CPU and GPU conversions from f32 saturate at ±65504 ([`crate::f16_saturating`]).
    F16,
    /// 32-bit unsigned integers (token ids).
    U32,
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::F32 => "f32",
            Self::F16 => "f16",
            Self::U32 => "u32",
        })
    }
}

impl DType {
    /// Bytes of storage for `len` elements (f16 rounds up to whole words).
    pub fn storage_bytes(self, len: usize) -> u64 {
        match self {
            Self::F32 | Self::U32 => len as u64 * 4,
            Self::F16 => len.div_ceil(2) as u64 * 4,
        }
    }
}
