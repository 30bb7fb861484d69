//! Where a decoder's weights come from: a [`WeightSource`] makes each member's slice of each
//! matrix, and the replicated tensors, on that member, so that no member ever holds more than
//! its share. [`Seeded`] generates them on the devices from a seed (`wgsl/init_weights.wgsl`,
//! so that even a 27B-class model loads in seconds and every split holds exactly the slices
//! of the one-member model); a checkpoint reader is another source.

use std::ops::Range;

use super::config::DecoderConfig;
use super::init::{matrix_seed, shift_for_fan_in};
use super::matrix::Matrix;
use crate::error::{Error, Result};
use crate::group::Member;
use crate::tensor::{DType, Tensor};

/// A matrix of the model, `[out, in]` (rows are output features).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Weight {
    /// Layer `l`'s query projection, `[q_heads · head_dim, hidden]`.
    Q(usize),
    /// Layer `l`'s key projection, `[kv_heads · head_dim, hidden]`.
    K(usize),
    /// Layer `l`'s value projection, `[kv_heads · head_dim, hidden]`.
    V(usize),
    /// Layer `l`'s attention output projection, `[hidden, q_heads · head_dim]`.
    O(usize),
    /// Layer `l`'s MLP gate, `[ffn, hidden]`.
    Gate(usize),
    /// Layer `l`'s MLP up projection, `[ffn, hidden]`.
    Up(usize),
    /// Layer `l`'s MLP down projection, `[hidden, ffn]`.
    Down(usize),
    /// The vocabulary projection, `[vocab, hidden]`.
    Output,
}

impl Weight {
    /// Every matrix of a model of `layers` layers: the vocabulary projection, then each layer's
    /// q, k, v, o, gate, up and down.
    pub fn every(layers: usize) -> impl Iterator<Item = Weight> {
        use Weight::*;
        std::iter::once(Output)
            .chain((0..layers).flat_map(|l| [Q(l), K(l), V(l), O(l), Gate(l), Up(l), Down(l)]))
    }

    /// `[out, in]` of this matrix in a model of `cfg`'s shape.
    pub fn shape(self, cfg: &DecoderConfig) -> (usize, usize) {
        let (h, q, kv) = (cfg.hidden, cfg.q_heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim);
        match self {
            Weight::Q(_) => (q, h),
            Weight::K(_) | Weight::V(_) => (kv, h),
            Weight::O(_) => (h, q),
            Weight::Gate(_) | Weight::Up(_) => (cfg.ffn, h),
            Weight::Down(_) => (h, cfg.ffn),
            Weight::Output => (cfg.vocab, h),
        }
    }
}

/// A norm's weight, `[hidden]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Norm {
    /// Before layer `l`'s attention.
    Attention(usize),
    /// Before layer `l`'s MLP.
    Mlp(usize),
    /// After the last layer.
    Final,
}

impl Norm {
    /// Every norm of a model of `layers` layers: the final one, then each layer's two.
    pub fn every(layers: usize) -> impl Iterator<Item = Norm> {
        std::iter::once(Norm::Final).chain((0..layers).flat_map(|l| [Norm::Attention(l), Norm::Mlp(l)]))
    }
}

/// Makes a model's tensors on the members, each member's share only.
pub trait WeightSource {
    /// Rows `rows` and columns `cols` of `weight` as a `[rows.len(), cols.len()]` matrix on
    /// `member`: f16 where the source stores floats, its blocks as stored where it is quantized
    /// and the columns are whole blocks ([`Matrix::Quant`]).
    fn matrix(
        &mut self,
        member: &Member,
        weight: Weight,
        rows: Range<usize>,
        cols: Range<usize>,
    ) -> Result<Matrix>;

    /// The token embedding table, `[vocab, hidden]`, whole on every member.
    fn embedding(&mut self, member: &Member) -> Result<Tensor>;

    /// Bytes a member's slice of `weight` (rows `rows`, columns `cols`) will take on its device,
    /// known before anything is read or allocated (the decoder's [`super::check_fits`] sums
    /// them): f16 elements, unless the source keeps quantized blocks.
    fn slice_bytes(&self, weight: Weight, rows: Range<usize>, cols: Range<usize>) -> u64 {
        let _ = weight;
        DType::F16.storage_bytes(rows.len().saturating_mul(cols.len()))
    }

    /// `norm`'s weight, `[hidden]` f32, on `member`.
    fn norm(&mut self, member: &Member, norm: Norm) -> Result<Tensor>;

    /// Rows `rows` of `weight`'s bias, f32 on `member`, where the model adds one after that
    /// product (qwen2's q, k and v); `None` where it has none (the default: llama has none).
    fn bias(&mut self, member: &Member, weight: Weight, rows: Range<usize>) -> Result<Option<Tensor>> {
        let _ = (member, weight, rows);
        Ok(None)
    }
}

/// Weights generated on the devices from [`DecoderConfig::seed`]: every matrix element is
/// `k·2^-shift` with `k` an integer in [-1024, 1023] (exact in f16), the shift chosen for the
/// matrix's fan-in; norms are ones.
#[derive(Debug, Clone)]
pub struct Seeded {
    seed: u32,
    hidden: usize,
    /// Query features, `q_heads · head_dim`.
    q_features: usize,
    ffn: usize,
    vocab: usize,
}

impl Seeded {
    /// The weights of `cfg`'s seed and shape.
    pub fn new(cfg: &DecoderConfig) -> Self {
        Self {
            seed: cfg.seed,
            hidden: cfg.hidden,
            q_features: cfg.q_heads.saturating_mul(cfg.head_dim),
            ffn: cfg.ffn,
            vocab: cfg.vocab,
        }
    }

    /// The matrix's seed and fan-in (its full columns).
    fn drawn(&self, weight: Weight) -> (u32, usize) {
        let at = |l, id| matrix_seed(self.seed, l, id);
        match weight {
            Weight::Q(l) => (at(l, 1), self.hidden),
            Weight::K(l) => (at(l, 2), self.hidden),
            Weight::V(l) => (at(l, 3), self.hidden),
            Weight::O(l) => (at(l, 4), self.q_features),
            Weight::Gate(l) => (at(l, 5), self.hidden),
            Weight::Up(l) => (at(l, 6), self.hidden),
            Weight::Down(l) => (at(l, 7), self.ffn),
            Weight::Output => (at(usize::MAX, 8), self.hidden),
        }
    }
}

impl WeightSource for Seeded {
    fn matrix(
        &mut self,
        member: &Member,
        weight: Weight,
        rows: Range<usize>,
        cols: Range<usize>,
    ) -> Result<Matrix> {
        let (seed, fan_in) = self.drawn(weight);
        if cols.end > fan_in || rows.start > rows.end || cols.start > cols.end {
            return Err(Error::InvalidArgument(format!(
                "{weight:?}: rows {rows:?} and columns {cols:?} of a matrix of {fan_in} columns"
            )));
        }
        let t = member.empty(&[rows.len(), cols.len()], DType::F16)?;
        member.transformer().init_weights(
            &t,
            seed,
            fan_in,
            rows.start,
            cols.start,
            shift_for_fan_in(fan_in),
        )?;
        Ok(Matrix::F16(t))
    }

    fn embedding(&mut self, member: &Member) -> Result<Tensor> {
        let h = self.hidden;
        let t = member.empty(&[self.vocab, h], DType::F16)?;
        // Embedding rows of amplitude 1: k · 2^-10.
        member.transformer().init_weights(&t, matrix_seed(self.seed, usize::MAX, 9), h, 0, 0, 10)?;
        Ok(t)
    }

    fn norm(&mut self, member: &Member, _norm: Norm) -> Result<Tensor> {
        member.full(&[self.hidden], DType::F32, 1.0)
    }
}
