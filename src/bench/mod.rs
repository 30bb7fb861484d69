//! Measurements behind `crossgpu bench`: the hardware's limits, the all-reduce in every mode
//! beside the wgpu baseline, every collective nccl-tests style, the matrix–vector product's bandwidth. Every figure is a
//! summary (median, p10, p90) over repetitions after warm-up; GPU work is timed from the host
//! around a submit and a timeline-semaphore wait (each repetition long enough that the wait's
//! own cost is small), never estimated.

pub mod allreduce;
pub mod baseline;
pub mod collectives;
pub mod limits;
pub mod matvec;

use serde::Serialize;

/// Median, 10th and 90th percentile of a set of samples.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct Summary {
    /// The middle sample.
    pub median: f64,
    /// The 10th percentile.
    pub p10: f64,
    /// The 90th percentile.
    pub p90: f64,
    /// Finite samples summarised.
    pub samples: usize,
}

/// Summarises `samples` (any order; empty gives NaNs).
pub fn summarize(samples: &[f64]) -> Summary {
    let mut v: Vec<f64> = samples.iter().copied().filter(|x| x.is_finite()).collect();
    v.sort_by(f64::total_cmp);
    let at = |q: f64| if v.is_empty() { f64::NAN } else { v[((v.len() - 1) as f64 * q).round() as usize] };
    Summary { median: at(0.5), p10: at(0.1), p90: at(0.9), samples: v.len() }
}

/// Deterministic pseudo-random values in [-0.5, 0.5), never zero: benchmark and demo data.
pub fn data(seed: u64, n: usize) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) - 0.5 + 1e-3
        })
        .collect()
}
