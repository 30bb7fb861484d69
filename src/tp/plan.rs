//! How a model is cut across the members ([`Plan`]: attention at whole KV heads, the MLP and
//! the vocabulary at 64), what each member then allocates ([`Footprint`]), and the refusal of
//! a model the members cannot hold, before anything is allocated ([`check_fits`]).

use std::ops::Range;

use super::block::splits_attention;
use super::config::DecoderConfig;
use super::ops::{attention_partials_len, AttentionShape};
use super::split::split_ranges;
use super::weights::{Seeded, Weight, WeightSource};
use crate::error::{Error, Result};
use crate::group::Member;
use crate::tensor::DType;

/// How the features were shared out.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The weight each member's share was cut by (measured ones for `SplitSpec::Auto`).
    pub weights: Vec<f64>,
    /// KV heads per member (query heads follow, `group` per KV head).
    pub kv_heads: Vec<Range<usize>>,
    /// MLP features per member, cut at multiples of 64.
    pub ffn: Vec<Range<usize>>,
    /// Vocabulary entries (rows of the output projection) per member, cut at multiples of 64.
    pub vocab: Vec<Range<usize>>,
}

impl Plan {
    /// Cuts the model for members weighted `weights`: attention at whole KV heads, the MLP at
    /// 64 features, the vocabulary at 64 entries.
    pub fn new(cfg: &DecoderConfig, weights: &[f64]) -> Result<Self> {
        Ok(Self {
            weights: weights.to_vec(),
            kv_heads: split_ranges(cfg.kv_heads, 1, weights)?,
            ffn: split_ranges(cfg.ffn, 64, weights)?,
            vocab: split_ranges(cfg.vocab, 64, weights)?,
        })
    }
}

/// What one member allocates for the model, known before anything is allocated.
#[derive(Debug, Clone, PartialEq)]
pub struct Footprint {
    /// Bytes of every tensor the member holds (weights, KV caches, activations).
    pub bytes: u64,
    /// Weight bytes the member reads for every token: its slices of every layer's matrices and
    /// of the vocabulary projection (the embedding table gives one row per token).
    pub streamed_weight_bytes: u64,
    /// The largest single tensor: its name and bytes (one storage binding must cover it).
    pub largest: (&'static str, u64),
}

impl Plan {
    /// Member `i`'s allocations for `cfg` under this plan, its weights f16 (the seeded
    /// decoder's).
    pub fn footprint(&self, cfg: &DecoderConfig, i: usize) -> Footprint {
        self.footprint_with(cfg, i, &Seeded::new(cfg))
    }

    /// Member `i`'s allocations for `cfg` under this plan, each weight slice as `source` will
    /// hold it ([`WeightSource::slice_bytes`]: a checkpoint's quantized blocks take their bytes).
    pub fn footprint_with(&self, cfg: &DecoderConfig, i: usize, source: &dyn WeightSource) -> Footprint {
        let f16 = |n: usize| DType::F16.storage_bytes(n);
        let f32b = |n: usize| DType::F32.storage_bytes(n);
        let (h, d, g) = (cfg.hidden, cfg.head_dim, cfg.q_heads / cfg.kv_heads.max(1));
        let kv = self.kv_heads.get(i).cloned().unwrap_or(0..0);
        let (q_rows, kv_rows) = (kv.start * g * d..kv.end * g * d, kv.start * d..kv.end * d);
        let (qd, kvd) = (q_rows.len(), kv_rows.len());
        let ffn = self.ffn.get(i).cloned().unwrap_or(0..0);
        let vocab = self.vocab.get(i).cloned().unwrap_or(0..0);
        // A matrix of every layer: the largest layer's slice, and all of them.
        let layers = |w: fn(usize) -> Weight, rows: Range<usize>, cols: Range<usize>| -> (u64, u64) {
            (0..cfg.layers)
                .map(|l| source.slice_bytes(w(l), rows.clone(), cols.clone()))
                .fold((0, 0), |(one, all), b| (one.max(b), all.saturating_add(b)))
        };
        let output = source.slice_bytes(Weight::Output, vocab.clone(), 0..h);
        let one = |b: u64| (b, b);
        let times = |b: u64, n: u64| (b, b.saturating_mul(n));
        let l = cfg.layers as u64;
        // (name, bytes of the largest one, of all, read in full for every token: the weights
        // the member streams; the embedding table gives one row per token).
        let partials = match splits_attention(cfg.max_seq) {
            true => {
                let q_heads = qd / d.max(1);
                let shape = AttentionShape { q_heads, group: g, head_dim: d, pos: 0, max_seq: cfg.max_seq };
                attention_partials_len(shape).map_or(u64::MAX, f32b)
            }
            false => 0,
        };
        let tensors: [(&'static str, (u64, u64), bool); 13] = [
            ("q weight", layers(Weight::Q, q_rows.clone(), 0..h), true),
            ("k weight", layers(Weight::K, kv_rows.clone(), 0..h), true),
            ("v weight", layers(Weight::V, kv_rows, 0..h), true),
            ("o weight", layers(Weight::O, 0..h, q_rows), true),
            ("gate weight", layers(Weight::Gate, ffn.clone(), 0..h), true),
            ("up weight", layers(Weight::Up, ffn.clone(), 0..h), true),
            ("down weight", layers(Weight::Down, 0..h, ffn.clone()), true),
            ("KV cache", times(f32b(kvd * cfg.max_seq), 2 * l), false),
            ("vocabulary weight", one(output), true),
            ("embedding table", one(f16(cfg.vocab * h)), false),
            ("attention scores", one(f32b(qd / d.max(1) * cfg.max_seq)), false),
            ("attention partials", one(partials), false),
            (
                "activations",
                one(f32b(6 * h + 3 * qd + 2 * kvd + 3 * ffn.len() + vocab.len() + cfg.max_seq + 16)),
                false,
            ),
        ];
        let total = |keep: &dyn Fn(bool) -> bool| {
            tensors.iter().filter(|t| keep(t.2)).map(|t| t.1 .1).fold(0u64, u64::saturating_add)
        };
        let (bytes, streamed_weight_bytes) = (total(&|_| true), total(&|streamed| streamed));
        // The activations are several small tensors, never one binding.
        let largest = tensors
            .iter()
            .filter(|t| t.0 != "activations")
            .max_by_key(|t| t.1 .0)
            .map_or(("none", 0), |t| (t.0, t.1 .0));
        Footprint { bytes, streamed_weight_bytes, largest }
    }
}

fn gib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 30) as f64
}

/// Refuses a model the members cannot hold, before anything is allocated: each member's
/// largest tensor against its device's `maxStorageBufferRange`, and the members on one
/// adapter together against that adapter's largest device-local heap (on a CPU device or an
/// iGPU that is system memory, which the host also needs).
pub fn check_fits(members: &[Member], cfg: &DecoderConfig, plan: &Plan) -> Result<()> {
    check_fits_with(members, cfg, plan, &Seeded::new(cfg))
}

/// [`check_fits`] with each weight slice as `source` will hold it ([`Plan::footprint_with`]).
pub fn check_fits_with(
    members: &[Member],
    cfg: &DecoderConfig,
    plan: &Plan,
    source: &dyn WeightSource,
) -> Result<()> {
    let mut per_adapter: Vec<(usize, u64, usize)> = Vec::new();
    for (i, m) in members.iter().enumerate() {
        let f = plan.footprint_with(cfg, i, source);
        let caps = &m.adapter().caps;
        if f.largest.1 > caps.max_storage_buffer_range {
            let remedy = if f.largest.0 == "embedding table" {
                "every member holds it whole: use a smaller vocabulary or hidden size"
            } else {
                "use a smaller model or spread it over more members"
            };
            return Err(Error::Unsupported(format!(
                "the model's {} on {} needs {} bytes in one tensor, more than that device binds in one tensor (maxStorageBufferRange {} bytes): {remedy}",
                f.largest.0,
                m.label(),
                f.largest.1,
                caps.max_storage_buffer_range
            )));
        }
        match per_adapter.iter_mut().find(|a| a.0 == m.adapter().index) {
            Some(a) => {
                a.1 = a.1.saturating_add(f.bytes);
                a.2 += 1;
            }
            None => per_adapter.push((m.adapter().index, f.bytes, 1)),
        }
    }
    for (adapter, bytes, n) in per_adapter {
        let Some(m) = members.iter().find(|m| m.adapter().index == adapter) else { continue };
        let heap = m.adapter().caps.device_local_heap_bytes;
        if heap > 0 && bytes > heap {
            return Err(Error::OutOfDeviceMemory {
                device: m.adapter().name.clone(),
                detail: format!(
                    " (adapter {adapter}): the model needs {:.1} GiB on its {n} member(s) there, its largest device-local memory heap holds {:.1} GiB; nothing was allocated. Use a smaller model, or spread it over more devices",
                    gib(bytes),
                    gib(heap)
                ),
            });
        }
    }
    Ok(())
}
