//! The residual stream's norms between a decoder block's halves: each half ends by adding its
//! row-parallel product into the replicated stream `x` and norming it for the next half
//! ([`AddNorm`]); the normed vector is either written out (`h`, [`Normed::Ready`]) or, where
//! the stream stays on one member, left pending by the product that adds into it (its
//! weighted vector and partial sums of squares, [`PendingNorm`]) for the products that read it
//! to finish on their way in ([`Normed::Pending`]), which saves the norm's dispatch.

use super::ops::ProductInput;
use super::sharded::Sharded;
use crate::error::Result;
use crate::group::Member;
use crate::tensor::Tensor;

/// The residual norm that ends a decoder block's half: the output is added to the residual
/// stream `x`, which is then normed with `weight` into `h` (all replicated).
#[derive(Clone, Copy)]
pub(crate) struct AddNorm<'a> {
    pub(crate) x: &'a Sharded,
    pub(crate) weight: &'a Sharded,
    pub(crate) h: &'a Sharded,
    pub(crate) eps: f32,
    /// Where the norm may be left pending for the products that read it ([`Normed::Pending`])
    /// when the stream stays on one member; `None` writes it.
    pub(crate) fold: Option<PendingNorm<'a>>,
}

/// Where a pending norm's product leaves what its readers finish the norm from: `x · weight`
/// and the partial sums of `x²` ([`crate::tp::TransformerOps::matvec_add_norm_pending`]).
#[derive(Clone, Copy)]
pub(crate) struct PendingNorm<'a> {
    pub(crate) weighted: &'a Sharded,
    pub(crate) squares: &'a Sharded,
}

impl<'a> AddNorm<'a> {
    /// Member `i`'s x, weight and h.
    pub(crate) fn parts(&self, i: usize) -> Result<(&'a Tensor, &'a Tensor, &'a Tensor)> {
        Ok((self.x.part(i)?, self.weight.part(i)?, self.h.part(i)?))
    }
}

/// The normed vector a half starts from.
#[derive(Clone, Copy)]
pub(crate) enum Normed<'a> {
    /// In `h` on every member.
    Ready(&'a Sharded),
    /// `rmsnorm(x) · weight` of the [`AddNorm`], left pending in the [`PendingNorm`] (its `h`
    /// is where it goes when a reader needs it in memory).
    Pending(AddNorm<'a>, PendingNorm<'a>),
}

impl<'a> Normed<'a> {
    /// Member `i`'s input for a product that can norm its own input (the fused q/k/v and
    /// gate/up kernels).
    pub(crate) fn product_input(&self, i: usize) -> Result<ProductInput<'a>> {
        Ok(match *self {
            Normed::Ready(h) => ProductInput::Plain(h.part(i)?),
            Normed::Pending(n, p) => ProductInput::PendingNorm {
                weighted: p.weighted.part(i)?,
                squares: p.squares.part(i)?,
                eps: n.eps,
            },
        })
    }

    /// Member `i`'s normed vector in memory: `h`, normed into it first where pending (on `m`,
    /// member `i`).
    pub(crate) fn tensor(&self, m: &Member, i: usize) -> Result<&'a Tensor> {
        match *self {
            Normed::Ready(h) => h.part(i),
            Normed::Pending(n, _) => {
                let (x, w, h) = n.parts(i)?;
                m.transformer().rmsnorm(x, w, h, n.eps)?;
                Ok(h)
            }
        }
    }
}
