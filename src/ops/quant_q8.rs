//! The products over quantized weights with x quantized too, llama.cpp's integer path:
//! [`Member::quantize_q8`] writes x as 8-bit blocks ([`Q8Vector`]), and
//! [`Member::matvec_quant_q8`] multiplies Q8_0, Q4_0, Q4_1, Q4_K and Q6_K weights by it with
//! integer dot products of the two blocks' quants (`dot4I8Packed`), scaled by both blocks'
//! scales.
//!
//! # Layout
//! Per block of 32 elements, 10 words: `d` (f32) `= max|x| / 127`, `s` (f32) `= d · Σ q`, then
//! the 32 values `q = round(x · 127 / max|x|)` in `-127 ..= 127` as signed bytes, element
//! `4j + i` in byte `i` of word `2 + j`; a block whose largest magnitude is below 2^-100 gets
//! `q = 0`. ggml's `block_q8_1` holds the same with `d` and `s` in f16.
//!
//! # Arithmetic
//! The product of the weights with `x̂ = d · q`, not with x: each element of x moves by up to
//! about `d / 2` (half a step of 1/127 of its block's largest magnitude). `s` is the sum of
//! the block's `x̂`, not of x, so Q4_1's min and Q4_0's offset of 8 meet the same `x̂` as the
//! quants do and the weights' cancellation carries over (`q · d + m` is small where `q · d`
//! and `m` are not): with the exact `Σ x` instead, SmolLM2's first-token distribution moved 50
//! times as far from the f32 decoder's. The rest is exact or rounded as a dot product is: a
//! block unit's `Σ q_w · q_x` is an exact integer (below 2^24 in magnitude, so exact in f32),
//! scaled by `d_w · d_x` (and Q4_K's and Q6_K's sub-block scales); the mins and offsets multiply
//! `s` (Q4_1, Q4_0, Q4_K: a share of it per unit) or go into the integer sums (Q6_K's 32, as
//! `32 · Σ q_x`). So per row, against the exact product with the given x: `Σ_k |w_k| · |x_k - x̂_k|`,
//! plus the rounding of a dot product of `cols` terms. `tests/suite/quant_q8.rs` checks the
//! kernels against the blocks the device wrote (tight), and the blocks against x.

//! What it buys: the f32 kernels were bound by the work per element (docs/BENCHMARKS.md,
//! "Quantized weights as stored"); here four multiply-adds are one instruction. On one H200
//! (2026-12-05, "8-bit inputs") the 27B-class shape cut to 16 layers decodes a Q4_1 file at
//! 369 tokens/s against 307 in f32, and a Q4_K_M file at 273 against 85; on lavapipe it is 2.4
//! times slower. The decoder takes it where asked ([`crate::tp::Decoder::set_q8_activations`]),
//! and `crossgpu decode` and `generate` by default on GPUs.

use vk_native::BindRange;

use super::quant::{QuantFormat, QuantMatrix};
use crate::error::{Error, Result};
use crate::group::Member;
use crate::kernels::{
    Entry, MatvecParams, QuantizeParams, MATVEC_Q4_0_Q8, MATVEC_Q4_1_Q8, MATVEC_Q4_K_Q8, MATVEC_Q6_K_Q8,
    MATVEC_Q8_0_Q8, QUANTIZE_Q8,
};
use crate::tensor::{DType, Tensor, MAX_ELEMENTS};

/// Elements per block of a [`Q8Vector`].
pub const Q8_BLOCK_ELEMS: usize = 32;

/// Words per block of a [`Q8Vector`]: `d`, `s` and 8 words of quants.
pub const Q8_BLOCK_WORDS: usize = 10;

/// Invocations per workgroup of `quantize_q8` (`WG` in its WGSL): one a block.
const QUANTIZE_WG: usize = 64;

/// The kernels that take x as a [`Q8Vector`], per format, and their rows per workgroup.
const KERNELS: [(QuantFormat, Entry<MatvecParams>, usize); 5] = [
    (QuantFormat::Q8_0, MATVEC_Q8_0_Q8, 8),
    (QuantFormat::Q4_0, MATVEC_Q4_0_Q8, 8),
    (QuantFormat::Q4_1, MATVEC_Q4_1_Q8, 8),
    (QuantFormat::Q4_K, MATVEC_Q4_K_Q8, 8),
    (QuantFormat::Q6_K, MATVEC_Q6_K_Q8, 4),
];

impl QuantFormat {
    /// Whether [`Member::matvec_quant_q8`] multiplies this format (Q8_0, Q4_0, Q4_1, Q4_K and
    /// Q6_K, whose blocks or sub-blocks are x's blocks of 32; not BF16).
    pub fn takes_q8_vector(self) -> bool {
        KERNELS.iter().any(|k| k.0 == self)
    }
}

/// A vector of `cols` elements quantized to 8-bit blocks of 32 (layout: the module's), on
/// one member: made by [`Member::q8_vector`], written by [`Member::quantize_q8`].
pub struct Q8Vector {
    tensor: Tensor,
    cols: usize,
}

impl std::fmt::Debug for Q8Vector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Q8Vector")
            .field("member", &self.tensor.member_index())
            .field("cols", &self.cols)
            .finish()
    }
}

impl Q8Vector {
    /// Elements of the vector it holds.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// The u32 tensor of its blocks ([`Q8_BLOCK_WORDS`] words each).
    pub fn tensor(&self) -> &Tensor {
        &self.tensor
    }

    /// The member that holds it.
    pub fn member_index(&self) -> usize {
        self.tensor.member_index()
    }
}

impl Member {
    /// A [`Q8Vector`] for vectors of `cols` elements, a multiple of 32; its contents are
    /// undefined until [`Member::quantize_q8`] writes it.
    pub fn q8_vector(&self, cols: usize) -> Result<Q8Vector> {
        if !cols.is_multiple_of(Q8_BLOCK_ELEMS) {
            return Err(Error::InvalidArgument(format!(
                "q8_vector: {cols} elements are not a whole number of blocks of {Q8_BLOCK_ELEMS}"
            )));
        }
        if cols > MAX_ELEMENTS {
            return Err(Error::Unsupported(format!(
                "q8_vector: {cols} elements: at most {MAX_ELEMENTS} (kernels index with 32-bit integers)"
            )));
        }
        let words = (cols / Q8_BLOCK_ELEMS).max(1) * Q8_BLOCK_WORDS;
        Ok(Q8Vector { tensor: self.empty(&[words], DType::U32)?, cols })
    }

    /// Writes the f32 vector `x` into `xq` as 8-bit blocks (layout and error: the module's).
    /// Checked (member, dtype, length) before the dispatch is recorded.
    pub fn quantize_q8(&self, x: &Tensor, xq: &Q8Vector) -> Result<()> {
        x.check_on(&self.shared, "quantize_q8 x")?;
        x.check_dtype(DType::F32, "quantize_q8 x")?;
        xq.tensor.check_on(&self.shared, "quantize_q8 xq")?;
        if x.len() != xq.cols {
            return Err(Error::LengthMismatch {
                what: "quantize_q8 x vs xq".into(),
                expected: xq.cols,
                got: x.len(),
            });
        }
        let blocks = xq.cols / Q8_BLOCK_ELEMS;
        if blocks == 0 {
            return Ok(());
        }
        let groups = blocks.div_ceil(QUANTIZE_WG);
        let gx = groups.min(65_535);
        self.shared.dispatch(
            QUANTIZE_Q8,
            &[&x.buffer, &xq.tensor.buffer],
            &[],
            &QuantizeParams { blocks: blocks as u32 },
            [gx as u32, groups.div_ceil(gx) as u32, 1],
        )
    }

    /// `y = W x` with `x` given as the 8-bit blocks [`Member::quantize_q8`] wrote (not the f32
    /// product: the module's "Arithmetic"), for `w` in Q8_0, Q4_0, Q4_1, Q4_K or Q6_K
    /// ([`QuantFormat::takes_q8_vector`]; another format is an error). All checked before the
    /// dispatch is recorded.
    pub fn matvec_quant_q8(&self, w: &QuantMatrix, xq: &Q8Vector, y: &Tensor) -> Result<()> {
        self.matvec_quant_q8_checked(w, xq, y, false)
    }

    /// `y += W x`, as [`Member::matvec_quant_q8`] computes it: each row's sum added to the `y`
    /// it finds.
    pub fn matvec_quant_q8_accumulate(&self, w: &QuantMatrix, xq: &Q8Vector, y: &Tensor) -> Result<()> {
        self.matvec_quant_q8_checked(w, xq, y, true)
    }

    fn matvec_quant_q8_checked(
        &self,
        w: &QuantMatrix,
        xq: &Q8Vector,
        y: &Tensor,
        accumulate: bool,
    ) -> Result<()> {
        self.check_product_y("matvec_quant_q8 y", w, y)?;
        self.matvec_quant_q8_into_with(w, xq, BindRange::whole(&y.buffer), 0, accumulate)
    }

    /// [`Member::matvec_quant_q8`] into words `at..` of `out` (a DevicePoll slot region),
    /// checked to hold them.
    pub(crate) fn matvec_quant_q8_into(
        &self,
        w: &QuantMatrix,
        xq: &Q8Vector,
        out: BindRange<'_>,
        at: u64,
    ) -> Result<()> {
        self.matvec_quant_q8_into_with(w, xq, out, at, false)
    }

    fn matvec_quant_q8_into_with(
        &self,
        w: &QuantMatrix,
        xq: &Q8Vector,
        out: BindRange<'_>,
        at: u64,
        accumulate: bool,
    ) -> Result<()> {
        let &(_, entry, rows) = KERNELS.iter().find(|k| k.0 == w.format()).ok_or_else(|| {
            Error::Unsupported(format!(
                "matvec_quant_q8: {} weights have no product with an 8-bit x (every ggml block format does; BF16 does not)",
                w.format()
            ))
        })?;
        w.tensor().check_on(&self.shared, "matvec_quant_q8 w")?;
        xq.tensor.check_on(&self.shared, "matvec_quant_q8 xq")?;
        if xq.cols != w.cols() {
            return Err(Error::LengthMismatch {
                what: "matvec_quant_q8 xq vs w columns".into(),
                expected: w.cols(),
                got: xq.cols,
            });
        }
        self.quant_product(w, BindRange::whole(&xq.tensor.buffer), out, at, (entry, rows), accumulate)
    }
}
