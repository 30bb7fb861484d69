//! [`TransformerOps`], a member's transformer kernels, and what they share: checked
//! arithmetic for their parameters, and where a kernel takes the decode position from.

use vk_native::GpuBuffer;

use crate::error::{Error, Result};
use crate::group::Member;
use crate::tensor::{DType, Tensor};

/// `a * b`, or an error naming `what` when it overflows.
pub(super) fn mul(what: &str, a: usize, b: usize) -> Result<usize> {
    a.checked_mul(b).ok_or_else(|| Error::InvalidArgument(format!("{what}: {a} * {b} overflows")))
}

/// `a + b`, or an error naming `what` when it overflows.
pub(super) fn add(what: &str, a: usize, b: usize) -> Result<usize> {
    a.checked_add(b).ok_or_else(|| Error::InvalidArgument(format!("{what}: {a} + {b} overflows")))
}

/// `v` as a kernel parameter (32 bits), or an error naming `what`.
pub(super) fn word(what: &str, v: usize) -> Result<u32> {
    u32::try_from(v).map_err(|_| {
        Error::InvalidArgument(format!("{what}: {v} does not fit the kernel's 32-bit parameter"))
    })
}

pub(super) fn need_len(what: &str, t: &Tensor, n: usize) -> Result<()> {
    if t.len() != n {
        return Err(Error::LengthMismatch { what: what.into(), expected: n, got: t.len() });
    }
    Ok(())
}

/// Where a decoder kernel takes its position from: `base`, plus the u32 `counter[0]` on the
/// device when there is one. The decoder keeps its position in such a counter, which
/// [`TransformerOps::select_sampled`]'s decoder form advances at the end of every token, so a
/// token's commands are the same at every step and can be recorded once and replayed. The kernels
/// store nothing past the cache whatever the counter holds; the decoder checks its own count.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Position<'a> {
    pub(crate) base: usize,
    pub(crate) counter: Option<&'a Tensor>,
}

impl<'a> Position<'a> {
    /// `pos` alone (the member's counter that stays 0 is bound).
    pub(crate) fn fixed(pos: usize) -> Self {
        Self { base: pos, counter: None }
    }

    /// The counter's buffer (checked: a u32 tensor of this member), or the member's zero.
    pub(super) fn buffer(&self, m: &'a Member) -> Result<&'a dyn GpuBuffer> {
        match self.counter {
            Some(t) => {
                t.check_on(&m.shared, "position counter")?;
                t.check_dtype(DType::U32, "position counter")?;
                need_len("position counter", t, 1)?;
                Ok(&t.buffer)
            }
            None => Ok(m.shared.zero_position()?),
        }
    }
}

/// The transformer kernels of one member ([`Member::transformer`]): each records one dispatch
/// into the member's stream, like the member's general operations.
#[derive(Clone, Copy)]
pub struct TransformerOps<'m> {
    pub(super) m: &'m Member,
}

impl Member {
    /// The transformer's kernels (norms, RoPE, attention, the fused products, the greedy
    /// token) on this member's tensors.
    pub fn transformer(&self) -> TransformerOps<'_> {
        TransformerOps { m: self }
    }
}

impl<'m> TransformerOps<'m> {
    /// The member the kernels run on.
    pub fn member(&self) -> &'m Member {
        self.m
    }

    pub(super) fn own(&self, ts: &[(&Tensor, &str)]) -> Result<()> {
        ts.iter().try_for_each(|(t, what)| t.check_on(&self.m.shared, what))
    }
}

/// The input vector of a fused product ([`TransformerOps::matvec_gate_up_silu`],
/// [`TransformerOps::matvec_qkv_rope_store`]): a tensor as it is, or an RMSNorm the product
/// before left pending ([`TransformerOps::matvec_add_norm_pending`]), which the product finishes
/// on its way in (no norm dispatch before it, no normed vector in memory): it reads the
/// weighted vector `y · weight` that product wrote, sums the partial sums of `y²` it left
/// (every workgroup alike) and multiplies each finished dot product by `1 / sqrt(mean(y²) +
/// eps)`. Within rounding of [`TransformerOps::rmsnorm`] then the product, not bitwise (the
/// scale multiplies the sum instead of every element). A `&Tensor` is [`ProductInput::Plain`].
#[derive(Clone, Copy, Debug)]
pub enum ProductInput<'a> {
    /// `x` itself.
    Plain(&'a Tensor),
    /// `y / sqrt(mean(y²) + eps) * weight`, left pending by
    /// [`TransformerOps::matvec_add_norm_pending`].
    PendingNorm {
        /// `y · weight`, f32 (the product's input length).
        weighted: &'a Tensor,
        /// The partial sums of `y²`, f32 ([`pending_norm_squares`] of them).
        squares: &'a Tensor,
        /// Added to the mean of squares.
        eps: f32,
    },
}

/// How many partial sums of squares [`TransformerOps::matvec_add_norm_pending`] leaves for a
/// stream of `len` elements (one per eight rows): the length of a pending norm's `squares`.
pub fn pending_norm_squares(len: usize) -> usize {
    len.div_ceil(PENDING_NORM_ROWS)
}

/// Rows of the stream per partial sum of squares (one workgroup of the producing kernel).
pub(super) const PENDING_NORM_ROWS: usize = 8;

impl<'a> From<&'a Tensor> for ProductInput<'a> {
    fn from(x: &'a Tensor) -> Self {
        ProductInput::Plain(x)
    }
}

impl<'a> ProductInput<'a> {
    /// The vector read (x, normed or not).
    pub fn x(&self) -> &'a Tensor {
        match *self {
            ProductInput::Plain(x) | ProductInput::PendingNorm { weighted: x, .. } => x,
        }
    }

    /// Checks the input on `ops`'s member: f32 of `cols`, a pending norm's partial sums f32 of
    /// [`pending_norm_squares`]`(cols)` (`what` names the product).
    pub(super) fn check(&self, ops: &TransformerOps<'_>, what: &str, cols: usize) -> Result<()> {
        let x = self.x();
        let named = format!("{what} input");
        ops.own(&[(x, &named)])?;
        x.check_dtype(DType::F32, &named)?;
        need_len(&named, x, cols)?;
        if let ProductInput::PendingNorm { weighted, squares, eps } = *self {
            let named = format!("{what} norm's sums of squares");
            ops.own(&[(squares, &named)])?;
            squares.check_dtype(DType::F32, &named)?;
            need_len(&named, squares, pending_norm_squares(cols))?;
            if squares.id() == weighted.id() {
                return Err(Error::InvalidArgument(format!(
                    "{what}: the pending norm's sums of squares must be apart from its weighted vector"
                )));
            }
            if !(eps.is_finite() && eps >= 0.0) {
                return Err(Error::InvalidArgument(format!(
                    "{what}: the pending norm's eps is {eps}; it must be finite and not negative"
                )));
            }
        }
        Ok(())
    }

    /// Whether `t` is one of the tensors the input reads (an output must not be).
    pub(super) fn reads(&self, t: &Tensor) -> bool {
        match *self {
            ProductInput::Plain(x) => x.id() == t.id(),
            ProductInput::PendingNorm { weighted, squares, .. } => {
                weighted.id() == t.id() || squares.id() == t.id()
            }
        }
    }
}
