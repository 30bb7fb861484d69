//! [`Matrix`]: one member's slice of a weight matrix, as the device holds it — f16 elements, or
//! ggml blocks as the checkpoint stores them ([`QuantMatrix`]: Q8_0, Q4_0, Q4_1, Q4_K, Q6_K),
//! dequantized in registers by the product's kernel. The tensor-parallel layers hold these and
//! multiply through [`Matrix::matvec`] whatever the storage; the decoder's fused kernels take
//! f16 slices only ([`Matrix::dense`]) and a quantized layer runs the unfused dispatches.

use vk_native::BindRange;

use crate::error::{Error, Result};
use crate::group::{Member, MemberShared};
use crate::ops::{Q8Vector, QuantFormat, QuantMatrix};
use crate::tensor::{DType, Tensor};

/// A product's input on one member: x in f32 and, where the decoder quantizes activations
/// ([`crate::tp::Decoder::set_q8_activations`]), the same x as 8-bit blocks, which the slices
/// that take them ([`Matrix::takes_q8`]) read instead.
#[derive(Clone, Copy)]
pub(crate) struct ProductX<'a> {
    pub(crate) x: &'a Tensor,
    pub(crate) q8: Option<&'a Q8Vector>,
}

impl<'a> ProductX<'a> {
    /// x alone, in f32.
    pub(crate) fn f32(x: &'a Tensor) -> Self {
        Self { x, q8: None }
    }

    /// x for `readers`, quantized into `q8` first (on `m`) where one of them takes 8-bit
    /// blocks: one quantization for every product that reads the same x.
    pub(crate) fn for_readers(
        m: &Member,
        x: &'a Tensor,
        q8: Option<&'a Q8Vector>,
        readers: &[&Matrix],
    ) -> Result<Self> {
        match q8 {
            Some(xq) if readers.iter().any(|r| r.takes_q8()) => {
                m.quantize_q8(x, xq)?;
                Ok(Self { x, q8: Some(xq) })
            }
            _ => Ok(Self::f32(x)),
        }
    }
}

/// Each member's vector for one activation's 8-bit blocks, where that member's readers take
/// them (empty: none quantized, the default).
#[derive(Default)]
pub(crate) struct Q8Slots(pub(crate) Vec<Option<Q8Vector>>);

impl Q8Slots {
    /// Member `i`'s vector, if it has one.
    pub(crate) fn get(&self, i: usize) -> Option<&Q8Vector> {
        self.0.get(i).and_then(Option::as_ref)
    }
}

/// A weight slice `[rows, cols]` on one member.
#[derive(Debug)]
pub enum Matrix {
    /// f16 elements, row-major.
    F16(Tensor),
    /// ggml blocks as stored, dequantized by the kernels.
    Quant(QuantMatrix),
}

impl From<Tensor> for Matrix {
    fn from(t: Tensor) -> Self {
        Matrix::F16(t)
    }
}

impl From<QuantMatrix> for Matrix {
    fn from(q: QuantMatrix) -> Self {
        Matrix::Quant(q)
    }
}

impl Matrix {
    /// `(rows, cols)`; an error for an f16 tensor that is not a matrix.
    pub fn dims(&self) -> Result<(usize, usize)> {
        match self {
            Matrix::F16(t) => {
                t.check_dtype(DType::F16, "a weight slice")?;
                t.matrix_dims("a weight slice")
            }
            Matrix::Quant(q) => Ok((q.rows(), q.cols())),
        }
    }

    /// The f16 tensor, where the slice is stored so.
    pub fn dense(&self) -> Option<&Tensor> {
        match self {
            Matrix::F16(t) => Some(t),
            Matrix::Quant(_) => None,
        }
    }

    /// The block format, where the slice is quantized.
    pub fn quant_format(&self) -> Option<QuantFormat> {
        match self {
            Matrix::F16(_) => None,
            Matrix::Quant(q) => Some(q.format()),
        }
    }

    /// Bytes the slice takes on its device.
    pub fn bytes(&self) -> u64 {
        match self {
            Matrix::F16(t) => t.len() as u64 * 2,
            Matrix::Quant(q) => q.bytes() as u64,
        }
    }

    /// The tensor that holds the slice (f16 elements or the blocks' words).
    pub fn tensor(&self) -> &Tensor {
        match self {
            Matrix::F16(t) => t,
            Matrix::Quant(q) => q.tensor(),
        }
    }

    pub(crate) fn check_on(&self, m: &MemberShared, what: &str) -> Result<()> {
        self.tensor().check_on(m, what)
    }

    /// Whether the slice multiplies x as 8-bit blocks ([`Member::matvec_quant_q8`]: every ggml
    /// block format, not f16 or BF16).
    pub fn takes_q8(&self) -> bool {
        self.quant_format().is_some_and(QuantFormat::takes_q8_vector)
    }

    /// The 8-bit x this slice reads from `x`, if it takes one and `x` has it.
    fn q8_of<'a>(&self, x: ProductX<'a>) -> Option<(&QuantMatrix, &'a Q8Vector)> {
        match (self, x.q8) {
            (Matrix::Quant(q), Some(xq)) if self.takes_q8() => Some((q, xq)),
            _ => None,
        }
    }

    /// [`Matrix::matvec`] from a [`ProductX`]: its 8-bit blocks where this slice takes them.
    pub(crate) fn matvec_x(&self, m: &Member, x: ProductX<'_>, y: &Tensor) -> Result<()> {
        match self.q8_of(x) {
            Some((q, xq)) => m.matvec_quant_q8(q, xq, y),
            None => self.matvec(m, x.x, y),
        }
    }

    /// [`Matrix::matvec_into`] from a [`ProductX`].
    pub(crate) fn matvec_into_x(
        &self,
        m: &Member,
        x: ProductX<'_>,
        out: BindRange<'_>,
        at: u64,
    ) -> Result<()> {
        match self.q8_of(x) {
            Some((q, xq)) => m.matvec_quant_q8_into(q, xq, out, at),
            None => self.matvec_into(m, x.x, out, at),
        }
    }

    /// `y = W x` on `m` (f32 `x` of `cols`, f32 `y` of `rows`).
    pub fn matvec(&self, m: &Member, x: &Tensor, y: &Tensor) -> Result<()> {
        match self {
            Matrix::F16(t) => m.matvec(t, x, y),
            Matrix::Quant(q) => m.matvec_quant(q, x, y),
        }
    }

    /// `y += W x` on `m`, the sum rounded once, as `matvec` then `add` (the decoder's residual
    /// stream taking a row-parallel product in, where there is nothing to reduce).
    pub fn matvec_accumulate(&self, m: &Member, x: &Tensor, y: &Tensor) -> Result<()> {
        match self {
            Matrix::F16(t) => m.matvec_accumulate(t, x, y),
            Matrix::Quant(q) => m.matvec_quant_accumulate(q, x, y),
        }
    }

    /// `y[t] = W x[t]` for `positions` rows on `m` (f32 `x` `[positions, cols]`, f32 `y`
    /// `[positions, rows]`): the prompt's product.
    pub fn matmul(&self, m: &Member, x: &Tensor, y: &Tensor, positions: usize) -> Result<()> {
        match self {
            Matrix::F16(t) => m.matmul(t, x, y, positions),
            Matrix::Quant(q) => m.matmul_quant(q, x, y, positions),
        }
    }

    /// [`Matrix::matmul`] with `x_half`, x rounded to f16, where the member runs the prompt on
    /// its matrix units: an f16 slice's whole tiles then go through
    /// [`Member::matmul_cooperative`]; a quantized slice, or `None`, is [`Matrix::matmul`].
    pub fn matmul_prompt(
        &self,
        m: &Member,
        x: &Tensor,
        x_half: Option<&Tensor>,
        y: &Tensor,
        positions: usize,
    ) -> Result<()> {
        match (self, x_half) {
            (Matrix::F16(t), Some(h)) => m.matmul_cooperative(t, x, h, y, positions),
            _ => self.matmul(m, x, y, positions),
        }
    }

    /// `matvec` into words `at..` of `out` (a DevicePoll slot region).
    pub(crate) fn matvec_into(&self, m: &Member, x: &Tensor, out: BindRange<'_>, at: u64) -> Result<()> {
        match self {
            Matrix::F16(t) => m.matvec_into(t, x, out, at),
            Matrix::Quant(q) => m.matvec_quant_into(q, x, out, at),
        }
    }

    /// The f16 tensor, or an error naming `what` for a quantized slice.
    pub(crate) fn f16(&self, what: &str) -> Result<&Tensor> {
        self.dense().ok_or_else(|| {
            Error::Unsupported(format!(
                "{what}: the slice is stored as {} blocks, not f16 (use the layer's matrix)",
                self.quant_format().map_or("?", QuantFormat::name)
            ))
        })
    }
}
