//! Matrix–vector product bandwidth: f16 or ggml-quantized weights, f32 vectors; bytes moved
//! (weights once, as stored, x and y) per second.

use std::time::Instant;

use serde::Serialize;

use super::{data, summarize, Summary};
use crate::error::Result;
use crate::group::Member;
use crate::ops::QuantFormat;
use crate::tensor::DType;

/// One measured shape and kernel.
#[derive(Debug, Clone, Serialize)]
pub struct MatvecPoint {
    /// Rows of the weight matrix (outputs).
    pub rows: usize,
    /// Columns (inputs).
    pub cols: usize,
    /// The WGSL kernel measured.
    pub kernel: &'static str,
    /// Bytes moved (weights once, x and y) per second, GB/s.
    pub gbps: Summary,
    /// Time per product, µs.
    pub us_per_matvec: Summary,
}

/// Times `reps` batches of products `y = W x` (about 20 ms of work each, 20 to 1000 products)
/// with `W [rows, cols]` f16, through the kernel `matvec` picks.
pub fn measure(m: &Member, rows: usize, cols: usize, reps: usize) -> Result<MatvecPoint> {
    measure_with(m, None, rows, cols, reps)
}

/// [`measure`] through a named f16 kernel (one of [`crate::MATVEC_F16_KERNELS`]; `cols % 8 == 0`).
pub fn measure_with(
    m: &Member,
    kernel: Option<&'static str>,
    rows: usize,
    cols: usize,
    reps: usize,
) -> Result<MatvecPoint> {
    let w = m.empty(&[rows, cols], DType::F16)?;
    m.transformer().init_weights(&w, 1, cols, 0, 0, 12)?;
    let x = m.upload_f32(&data(2, cols))?;
    let y = m.empty(&[rows], DType::F32)?;
    m.synchronize()?;
    let name = kernel.unwrap_or(crate::ops::matvec_f16_kernel(cols));
    time_batches(m, (rows, cols), rows * cols * 2, name, reps, &|| match kernel {
        Some(k) => m.matvec_f16_with(k, &w, &x, &y),
        None => m.matvec(&w, &x, &y),
    })
}

/// Times `reps` batches of products `y = W x` (as [`measure`]) with `W [rows, cols]` of `format` (`cols` a
/// whole number of its blocks), through `kernel` (one of `format.kernel_names()`). The blocks are pseudo-random bytes with
/// finite scales (the time does not depend on the values); GB/s count the blocks' bytes.
pub fn measure_quant(
    m: &Member,
    kernel: &'static str,
    format: QuantFormat,
    rows: usize,
    cols: usize,
    reps: usize,
) -> Result<MatvecPoint> {
    let row_bytes = format.row_bytes(cols).ok_or_else(|| {
        crate::Error::InvalidArgument(format!("{cols} columns are not a whole number of {format} blocks"))
    })?;
    let bytes = quant_blocks(format, rows * row_bytes);
    let w = m.upload_quant(format, rows, cols, &bytes)?;
    drop(bytes);
    let x = m.upload_f32(&data(2, cols))?;
    let y = m.empty(&[rows], DType::F32)?;
    m.synchronize()?;
    time_batches(m, (rows, cols), w.bytes(), kernel, reps, &|| m.matvec_quant_with(kernel, &w, &x, &y))
}

/// `n` bytes of whole `format` blocks: xorshift bytes, each f16 field (scale, min) 2^-4; bf16
/// elements of 2^-5 .. 2^-4 (their high byte fixed: finite, normal).
fn quant_blocks(format: QuantFormat, n: usize) -> Vec<u8> {
    let halves: &[usize] = match format {
        QuantFormat::Q8_0 | QuantFormat::Q4_0 => &[0],
        QuantFormat::Q4_1 | QuantFormat::Q4_K => &[0, 2],
        QuantFormat::Q6_K => &[208],
        QuantFormat::BF16 => &[],
    };
    let mut s = 0x9E37_79B9_7F4A_7C15u64;
    let mut out: Vec<u8> = (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 56) as u8
        })
        .collect();
    if format == QuantFormat::BF16 {
        out.chunks_exact_mut(2).for_each(|e| e[1] = 0x3d);
    }
    for block in out.chunks_exact_mut(format.block_bytes()) {
        for &at in halves {
            block[at..at + 2].copy_from_slice(&half::f16::from_f32(0.0625).to_le_bytes());
        }
    }
    out
}

/// The most products in one timed batch.
const MAX_BATCH: usize = 1000;

/// Times `reps` batches of calls of `product` (after one untimed batch), each a product of
/// a `[rows, cols]` matrix of `weight_bytes`: GB/s count the weights once, x and y. The time is
/// the GPU's, from the batch's first command to its last (timestamps, as the decoder's
/// `--profile` takes them: the host's submit and wait are not in it); where the device has no
/// timestamps, the host's around the batch and its submit, a lower bound on the rate.
fn time_batches(
    m: &Member,
    shape: (usize, usize),
    weight_bytes: usize,
    kernel: &'static str,
    reps: usize,
    product: &dyn Fn() -> Result<()>,
) -> Result<MatvecPoint> {
    // A product is at most six dispatches (the unfused q/k/v), one timestamp each, and a window
    // has one more at its start.
    let gpu = m.start_profile(6 * MAX_BATCH as u32 + 1).is_ok();
    let timed = time_batches_on(m, gpu, shape, weight_bytes, kernel, reps, product);
    if gpu {
        // Also after an error: the member's later work must not be stamped. Nothing may be
        // recorded when the profile stops, so what the error left goes first (its own error,
        // if any, is the one already in `timed`).
        let stopped = m.synchronize().and_then(|()| m.stop_profile());
        if timed.is_ok() {
            stopped?;
        }
    }
    timed
}

fn time_batches_on(
    m: &Member,
    gpu: bool,
    (rows, cols): (usize, usize),
    weight_bytes: usize,
    kernel: &'static str,
    reps: usize,
    product: &dyn Fn() -> Result<()>,
) -> Result<MatvecPoint> {
    let bytes = (weight_bytes + cols * 4 + rows * 4) as f64;
    let (mut gbps, mut us) = (Vec::new(), Vec::new());
    // The untimed first batch of 20 sets the batch: products for about 20 ms of work, so the
    // GPU runs at the clocks it keeps under load (a 1 ms burst between waits ran the decoder's
    // products 20-40% slower on the H200 than the decoder's own profile shows), 20 to 1000.
    let mut batch = 20;
    for rep in 0..reps + 1 {
        let t = Instant::now();
        for _ in 0..batch {
            product()?;
        }
        m.synchronize()?;
        let mut s = t.elapsed().as_secs_f64();
        if gpu {
            let ns: f64 = m.take_profile()?.iter().map(|(_, t)| t).sum();
            if ns > 0.0 {
                s = ns * 1e-9;
            }
        }
        if rep == 0 {
            batch = ((0.02 / (s / batch as f64)) as usize).clamp(20, MAX_BATCH);
        } else {
            gbps.push(batch as f64 * bytes / s / 1e9);
            us.push(s / batch as f64 * 1e6);
        }
    }
    Ok(MatvecPoint { rows, cols, kernel, gbps: summarize(&gbps), us_per_matvec: summarize(&us) })
}

/// The decoder's fused kernels against the dispatches each replaces, at one member's shapes of
/// a model (`hidden` inputs; `ffn` MLP rows; `q_rows` and `kv_rows` attention rows of
/// `head_dim`): `matvec_gate_up_silu` against two four-row products and `silu_mul`, and
/// `matvec_qkv_rope_store` against three four-row products, two ropes and `kv_store`. Each
/// point's GB/s counts the weights once (plus x and the outputs), so fused and unfused read
/// the same bytes and their times compare directly.
pub fn measure_decoder_kernels(
    m: &Member,
    (hidden, ffn, q_rows, kv_rows, head_dim): (usize, usize, usize, usize, usize),
    reps: usize,
) -> Result<Vec<MatvecPoint>> {
    let weights = |rows: usize, seed: u32| -> Result<crate::tensor::Tensor> {
        let w = m.empty(&[rows, hidden], DType::F16)?;
        m.transformer().init_weights(&w, seed, hidden, 0, 0, 12)?;
        Ok(w)
    };
    let x = m.upload_f32(&data(3, hidden))?;
    let f32t = |n: usize| m.empty(&[n], DType::F32);
    let (wg, wu) = (weights(ffn, 5)?, weights(ffn, 6)?);
    let (g, u, a) = (f32t(ffn)?, f32t(ffn)?, f32t(ffn)?);
    let (wq, wk, wv) = (weights(q_rows, 1)?, weights(kv_rows, 2)?, weights(kv_rows, 3)?);
    let (q, k, v) = (f32t(q_rows)?, f32t(kv_rows)?, f32t(kv_rows)?);
    let max_seq = 64;
    let (kc, vc) =
        (m.full(&[kv_rows * max_seq], DType::F32, 0.0)?, m.full(&[kv_rows * max_seq], DType::F32, 0.0)?);
    m.synchronize()?;
    let four = "matvec_f16_vec8_rows4";
    let (q_heads, kv_heads) = (q_rows / head_dim, kv_rows / head_dim);
    let time = |rows: usize, kernel: &'static str, f: &dyn Fn() -> Result<()>| {
        time_batches(m, (rows, hidden), rows * hidden * 2, kernel, reps, f)
    };
    Ok(vec![
        time(2 * ffn, "matvec_gate_up_silu (fused)", &|| {
            m.transformer().matvec_gate_up_silu(&wg, &wu, &x, &a)
        })?,
        time(2 * ffn, "matvec_gate_up_silu_x2 (fused, x shared)", &|| {
            m.transformer().matvec_gate_up_silu_with("matvec_gate_up_silu_x2", &wg, &wu, &x, &a)
        })?,
        time(2 * ffn, "matvec_gate_up_silu_x4 (fused, x shared)", &|| {
            m.transformer().matvec_gate_up_silu_with("matvec_gate_up_silu_x4", &wg, &wu, &x, &a)
        })?,
        time(2 * ffn, "gate, up (four rows each), silu_mul", &|| {
            m.matvec_f16_with(four, &wg, &x, &g)?;
            m.matvec_f16_with(four, &wu, &x, &u)?;
            m.transformer().silu_mul(&g, &u, &a)
        })?,
        time(q_rows + 2 * kv_rows, "matvec_qkv_rope_store (fused)", &|| {
            m.transformer().matvec_qkv_rope_store(
                (&wq, &wk, &wv),
                &x,
                &q,
                (&kc, &vc),
                head_dim,
                5,
                max_seq,
                10_000.0,
            )
        })?,
        time(q_rows + 2 * kv_rows, "q, k, v (four rows each), 2 ropes, kv_store", &|| {
            m.matvec_f16_with(four, &wq, &x, &q)?;
            m.matvec_f16_with(four, &wk, &x, &k)?;
            m.matvec_f16_with(four, &wv, &x, &v)?;
            m.transformer().rope(&q, q_heads, head_dim, 5, 10_000.0)?;
            m.transformer().rope(&k, kv_heads, head_dim, 5, 10_000.0)?;
            m.transformer().kv_store(&k, &v, &kc, &vc, kv_heads, head_dim, 5, max_seq)
        })?,
    ])
}
