//! An activation held across the members as one value: member i holds part i, either a full
//! copy (a replicated activation: the residual stream, the normed input of a layer) or its
//! shard (its heads of q, its slice of the MLP's hidden features). Layers take and give
//! `Sharded` values, the way candle's tensor-parallel model passes one tensor per rank.

use crate::error::{Error, Result};
use crate::group::Member;
use crate::tensor::{DType, Tensor};

/// One activation across the members, part i on member i.
pub struct Sharded {
    parts: Vec<Tensor>,
}

impl std::fmt::Debug for Sharded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sharded")
            .field("lens", &self.parts.iter().map(Tensor::len).collect::<Vec<_>>())
            .finish()
    }
}

impl Sharded {
    /// The activation made of `parts`, one per member in group order.
    pub fn new(parts: Vec<Tensor>) -> Self {
        Self { parts }
    }

    /// An f32 activation of `len(i)` elements on member i, filled with `value`.
    pub fn full(members: &[Member], len: impl Fn(usize) -> usize, value: f32) -> Result<Self> {
        let parts = members.iter().enumerate().map(|(i, m)| m.full(&[len(i)], DType::F32, value));
        Ok(Self { parts: parts.collect::<Result<Vec<_>>>()? })
    }

    /// Member i's part.
    pub fn part(&self, i: usize) -> Result<&Tensor> {
        self.parts.get(i).ok_or(Error::IndexOutOfRange {
            what: "member index",
            index: i,
            len: self.parts.len(),
            of: "parts in the activation",
        })
    }

    /// Every part, in member order.
    pub fn parts(&self) -> &[Tensor] {
        &self.parts
    }

    /// References to every part, as the layers' and the all-reduce's calls take them.
    pub fn refs(&self) -> Vec<&Tensor> {
        self.parts.iter().collect()
    }

    /// Members the activation spans.
    pub fn len(&self) -> usize {
        self.parts.len()
    }

    /// Whether it spans no member.
    pub fn is_empty(&self) -> bool {
        self.parts.is_empty()
    }
}
