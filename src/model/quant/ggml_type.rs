//! [`GgmlType`]: ggml's tensor element types, their ids, block sizes and names.

use crate::ops::QuantFormat;

/// A ggml tensor element type, as `enum ggml_type` in ggml.h numbers it.
///
/// The names are ggml's own (`Q4_K`, not `Q4K`), so that they match what llama.cpp and model
/// cards print.
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GgmlType {
    /// IEEE binary32.
    F32,
    /// IEEE binary16.
    F16,
    /// 4-bit, 32 per block, one f16 scale.
    Q4_0,
    /// 4-bit, 32 per block, f16 scale and f16 min.
    Q4_1,
    /// 5-bit, 32 per block, one f16 scale.
    Q5_0,
    /// 5-bit, 32 per block, f16 scale and f16 min.
    Q5_1,
    /// 8-bit, 32 per block, one f16 scale.
    Q8_0,
    /// 8-bit, 32 per block, f16 scale and f16 sum (an activation format).
    Q8_1,
    /// 2-bit k-quant, 256 per super-block.
    Q2_K,
    /// 3-bit k-quant, 256 per super-block.
    Q3_K,
    /// 4-bit k-quant, 256 per super-block, 6-bit sub-block scales and mins.
    Q4_K,
    /// 5-bit k-quant, 256 per super-block.
    Q5_K,
    /// 6-bit k-quant, 256 per super-block, 8-bit sub-block scales.
    Q6_K,
    /// 8-bit k-quant, 256 per super-block, f32 scale (an activation format).
    Q8_K,
    /// 2.06-bit codebook quant.
    IQ2_XXS,
    /// 2.31-bit codebook quant.
    IQ2_XS,
    /// 3.06-bit codebook quant.
    IQ3_XXS,
    /// 1.56-bit codebook quant.
    IQ1_S,
    /// 4-bit non-linear quant, 32 per block.
    IQ4_NL,
    /// 3.44-bit codebook quant.
    IQ3_S,
    /// 2.5-bit codebook quant.
    IQ2_S,
    /// 4.25-bit non-linear quant, 256 per super-block.
    IQ4_XS,
    /// 8-bit signed integer.
    I8,
    /// 16-bit signed integer.
    I16,
    /// 32-bit signed integer.
    I32,
    /// 64-bit signed integer.
    I64,
    /// IEEE binary64.
    F64,
    /// 1.75-bit codebook quant.
    IQ1_M,
    /// bfloat16: the upper 16 bits of an f32.
    BF16,
    /// Ternary quant, 1.69 bits per weight.
    TQ1_0,
    /// Ternary quant, 2.06 bits per weight.
    TQ2_0,
    /// Microscaling FP4, 32 per block, one E8M0 scale.
    MXFP4,
}

/// Every type, for [`GgmlType::from_id`]: ids 4, 5, 31..=33 and 36..=38 were removed from ggml
/// and are refused like any unknown id.
pub(super) const ALL_TYPES: [GgmlType; 32] = [
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q8_1,
    GgmlType::Q2_K,
    GgmlType::Q3_K,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
    GgmlType::Q8_K,
    GgmlType::IQ2_XXS,
    GgmlType::IQ2_XS,
    GgmlType::IQ3_XXS,
    GgmlType::IQ1_S,
    GgmlType::IQ4_NL,
    GgmlType::IQ3_S,
    GgmlType::IQ2_S,
    GgmlType::IQ4_XS,
    GgmlType::I8,
    GgmlType::I16,
    GgmlType::I32,
    GgmlType::I64,
    GgmlType::F64,
    GgmlType::IQ1_M,
    GgmlType::BF16,
    GgmlType::TQ1_0,
    GgmlType::TQ2_0,
    GgmlType::MXFP4,
];

/// The types crossgpu has (or will have) GPU kernels for, and [`super::dequantize`] handles.
pub const SUPPORTED_TYPES: [GgmlType; 8] = [
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::BF16,
    GgmlType::Q8_0,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q4_K,
    GgmlType::Q6_K,
];

/// Elements per k-quant super-block (ggml's `QK_K`).
pub(super) const QK_K: usize = 256;
/// Elements per block of the 32-element formats (ggml's `QK4_0`, `QK4_1`, `QK8_0`).
pub(super) const QK32: usize = 32;

impl GgmlType {
    /// The type whose `enum ggml_type` value is `id`, or `None` for an id ggml does not (or no
    /// longer) define.
    pub fn from_id(id: u32) -> Option<Self> {
        ALL_TYPES.iter().copied().find(|t| t.id() == id)
    }

    /// The `enum ggml_type` value, as stored in a GGUF tensor info.
    pub fn id(self) -> u32 {
        use GgmlType::*;
        match self {
            F32 => 0,
            F16 => 1,
            Q4_0 => 2,
            Q4_1 => 3,
            Q5_0 => 6,
            Q5_1 => 7,
            Q8_0 => 8,
            Q8_1 => 9,
            Q2_K => 10,
            Q3_K => 11,
            Q4_K => 12,
            Q5_K => 13,
            Q6_K => 14,
            Q8_K => 15,
            IQ2_XXS => 16,
            IQ2_XS => 17,
            IQ3_XXS => 18,
            IQ1_S => 19,
            IQ4_NL => 20,
            IQ3_S => 21,
            IQ2_S => 22,
            IQ4_XS => 23,
            I8 => 24,
            I16 => 25,
            I32 => 26,
            I64 => 27,
            F64 => 28,
            IQ1_M => 29,
            BF16 => 30,
            TQ1_0 => 34,
            TQ2_0 => 35,
            MXFP4 => 39,
        }
    }

    /// The name ggml gives the type (`"Q4_K"`, `"BF16"`).
    pub fn name(self) -> &'static str {
        use GgmlType::*;
        match self {
            F32 => "F32",
            F16 => "F16",
            Q4_0 => "Q4_0",
            Q4_1 => "Q4_1",
            Q5_0 => "Q5_0",
            Q5_1 => "Q5_1",
            Q8_0 => "Q8_0",
            Q8_1 => "Q8_1",
            Q2_K => "Q2_K",
            Q3_K => "Q3_K",
            Q4_K => "Q4_K",
            Q5_K => "Q5_K",
            Q6_K => "Q6_K",
            Q8_K => "Q8_K",
            IQ2_XXS => "IQ2_XXS",
            IQ2_XS => "IQ2_XS",
            IQ3_XXS => "IQ3_XXS",
            IQ1_S => "IQ1_S",
            IQ4_NL => "IQ4_NL",
            IQ3_S => "IQ3_S",
            IQ2_S => "IQ2_S",
            IQ4_XS => "IQ4_XS",
            I8 => "I8",
            I16 => "I16",
            I32 => "I32",
            I64 => "I64",
            F64 => "F64",
            IQ1_M => "IQ1_M",
            BF16 => "BF16",
            TQ1_0 => "TQ1_0",
            TQ2_0 => "TQ2_0",
            MXFP4 => "MXFP4",
        }
    }

    /// `(elements, bytes)` of one block: ggml's `blck_size` and `type_size`.
    pub(super) fn block(self) -> (u64, u64) {
        use GgmlType::*;
        match self {
            F32 | I32 => (1, 4),
            F16 | BF16 | I16 => (1, 2),
            I8 => (1, 1),
            I64 | F64 => (1, 8),
            Q4_0 | IQ4_NL => (32, 18),
            Q4_1 => (32, 20),
            Q5_0 => (32, 22),
            Q5_1 => (32, 24),
            Q8_0 => (32, 34),
            Q8_1 => (32, 36),
            MXFP4 => (32, 17),
            Q2_K => (256, 84),
            Q3_K | IQ3_S => (256, 110),
            Q4_K => (256, 144),
            Q5_K => (256, 176),
            Q6_K => (256, 210),
            Q8_K => (256, 292),
            IQ2_XXS | TQ2_0 => (256, 66),
            IQ2_XS => (256, 74),
            IQ3_XXS => (256, 98),
            IQ1_S => (256, 50),
            IQ2_S => (256, 82),
            IQ4_XS => (256, 136),
            IQ1_M => (256, 56),
            TQ1_0 => (256, 54),
        }
    }

    /// Elements per block (1 for the plain element types).
    pub fn block_elems(self) -> u64 {
        self.block().0
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> u64 {
        self.block().1
    }

    /// The block format [`crate::group::Member::upload_quant`] takes for this type (its blocks
    /// as stored, for [`crate::group::Member::matvec_quant`]), or `None` for a type without a
    /// kernel reading it as stored (F32 and F16 go through `Member::matvec`, F32 after a
    /// conversion). BF16's format reads rows of a multiple of 8 columns.
    pub fn quant_format(self) -> Option<QuantFormat> {
        use QuantFormat as Q;
        match self {
            GgmlType::Q8_0 => Some(Q::Q8_0),
            GgmlType::Q4_0 => Some(Q::Q4_0),
            GgmlType::Q4_1 => Some(Q::Q4_1),
            GgmlType::Q4_K => Some(Q::Q4_K),
            GgmlType::Q6_K => Some(Q::Q6_K),
            GgmlType::BF16 => Some(Q::BF16),
            _ => None,
        }
    }

    /// Whether crossgpu computes with this type: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q6_K.
    pub fn supported(self) -> bool {
        SUPPORTED_TYPES.contains(&self)
    }

    /// Bytes of a row of `row_len` elements, or `None` when `row_len` is not a whole number of
    /// blocks (ggml cannot store such a row) or the size overflows `u64`.
    pub fn row_bytes(self, row_len: u64) -> Option<u64> {
        let (elems, bytes) = self.block();
        if !row_len.is_multiple_of(elems) {
            return None;
        }
        (row_len / elems).checked_mul(bytes)
    }
}

impl std::fmt::Display for GgmlType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The names of [`SUPPORTED_TYPES`], for messages.
pub fn supported_type_names() -> String {
    SUPPORTED_TYPES.iter().map(|t| t.name()).collect::<Vec<_>>().join(", ")
}
