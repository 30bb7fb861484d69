//! The shape of a decoder-only transformer ([`DecoderConfig`]) and its presets.

use crate::error::{Error, Result};

/// Shape of the model.
#[derive(Debug, Clone, PartialEq)]
pub struct DecoderConfig {
    /// Width of the residual stream (model dimension), in elements.
    pub hidden: usize,
    /// Intermediate features of the MLP (gate, up and down projections); split at 64.
    pub ffn: usize,
    /// Transformer layers.
    pub layers: usize,
    /// Query heads, a positive multiple of `kv_heads`.
    pub q_heads: usize,
    /// Key/value heads (grouped-query attention); the attention split is in whole KV heads.
    pub kv_heads: usize,
    /// Elements per head, even (RoPE rotates pairs).
    pub head_dim: usize,
    /// Vocabulary size: token ids are `0..vocab`, below 2^24; the output projection is split
    /// at 64 entries.
    pub vocab: usize,
    /// KV-cache capacity in tokens.
    pub max_seq: usize,
    /// Seed the weights are generated from on the devices: the same seed gives the same model
    /// on any split.
    pub seed: u32,
    /// RoPE frequency base (10000 in both presets).
    pub rope_base: f32,
    /// The epsilon added to the mean square in RMSNorm.
    pub eps: f32,
}

impl DecoderConfig {
    /// A small model for tests and CI (runs in seconds on lavapipe).
    pub fn small() -> Self {
        Self {
            hidden: 256,
            ffn: 640,
            layers: 2,
            q_heads: 8,
            kv_heads: 4,
            head_dim: 32,
            vocab: 1000,
            max_seq: 64,
            seed: 7,
            rope_base: 10_000.0,
            eps: 1e-5,
        }
    }

    /// A 27B-class shape: hidden 5120, FFN 17408, 64 layers, 40 query and 8 KV heads of 128.
    pub fn preset_27b() -> Self {
        Self {
            hidden: 5120,
            ffn: 17408,
            layers: 64,
            q_heads: 40,
            kv_heads: 8,
            head_dim: 128,
            vocab: 32_000,
            max_seq: 256,
            seed: 7,
            rope_base: 10_000.0,
            eps: 1e-5,
        }
    }

    /// `small` or `27b`.
    pub fn preset(name: &str) -> Result<Self> {
        match name {
            "small" => Ok(Self::small()),
            "27b" => Ok(Self::preset_27b()),
            _ => Err(Error::BadConfig {
                name: "--preset",
                value: name.into(),
                why: "expected small or 27b".into(),
            }),
        }
    }

    /// Checks the shape before anything is allocated; the error names the field.
    pub fn validate(&self) -> Result<()> {
        let bad = |why: String| Err(Error::InvalidArgument(format!("decoder shape: {why}")));
        for (name, v) in [
            ("hidden", self.hidden),
            ("ffn", self.ffn),
            ("layers", self.layers),
            ("vocab", self.vocab),
            ("max_seq", self.max_seq),
            ("kv_heads", self.kv_heads),
            ("head_dim", self.head_dim),
        ] {
            if v == 0 {
                return bad(format!("{name} is 0; it must be at least 1"));
            }
        }
        if !self.q_heads.is_multiple_of(self.kv_heads) || self.q_heads == 0 {
            return bad(format!(
                "q_heads ({}) must be a positive multiple of kv_heads ({})",
                self.q_heads, self.kv_heads
            ));
        }
        if !self.head_dim.is_multiple_of(2) {
            return bad(format!("head_dim ({}) must be even (RoPE rotates pairs)", self.head_dim));
        }
        // Kernels index with 32-bit integers and the greedy pair carries the token id in an f32.
        let fits = |a: usize, b: usize| a.checked_mul(b).is_some_and(|p| p <= u32::MAX as usize);
        let q_width = self.q_heads.saturating_mul(self.head_dim);
        let kv_width = self.kv_heads.saturating_mul(self.head_dim);
        if !(fits(self.hidden, self.ffn)
            && fits(self.hidden, q_width)
            && fits(self.vocab, self.hidden)
            && fits(q_width, self.max_seq)
            && fits(kv_width, self.max_seq))
        {
            return bad(
                "a weight matrix or KV cache would exceed 2^32 elements (kernels index with 32 bits)".into(),
            );
        }
        if self.vocab >= 1 << 24 {
            return bad(format!(
                "vocab ({}) must be below 2^24 (token ids travel as exact f32 values)",
                self.vocab
            ));
        }
        Ok(())
    }

    /// Parameters (weights) in the model.
    pub fn parameters(&self) -> u128 {
        let (h, f, d) = (self.hidden as u128, self.ffn as u128, self.head_dim as u128);
        let attn = h * d * (self.q_heads as u128 * 2 + self.kv_heads as u128 * 2);
        let mlp = 3 * h * f;
        self.layers as u128 * (attn + mlp) + 2 * self.vocab as u128 * h
    }
}
