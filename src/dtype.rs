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
    /// 32-bit signed integers.
    I32,
    /// bfloat16 (the top half of an f32), stored packed two per 32-bit word like f16 (element
    /// `2w` in the low half). No kernel does bf16 arithmetic: a kernel reads the words as `u32`
    /// and widens each half with `bitcast<f32>(h << 16u)`, which is exact; the conversions from
    /// f32 round to nearest even ([`crate::bf16_rounded`]).
    BF16,
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::F32 => "f32",
            Self::F16 => "f16",
            Self::U32 => "u32",
            Self::I32 => "i32",
            Self::BF16 => "bf16",
        })
    }
}

impl DType {
    /// Whether two elements share a 32-bit word (f16, bf16).
    pub fn is_half(self) -> bool {
        matches!(self, Self::F16 | Self::BF16)
    }

    /// Bytes of storage for `len` elements (f16 and bf16 round up to whole words).
    pub fn storage_bytes(self, len: usize) -> u64 {
        match self {
            Self::F32 | Self::U32 | Self::I32 => len as u64 * 4,
            Self::F16 | Self::BF16 => len.div_ceil(2) as u64 * 4,
        }
    }
}
