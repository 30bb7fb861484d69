//! The products over quantized weights with x quantized to 8-bit blocks (`Member::quantize_q8`,
//! `Member::matvec_quant_q8`: llama.cpp's integer path), in two checks that together bound the
//! product against the f64 one:
//!
//! - the blocks `quantize_q8` writes hold x: per block `d` within rounding of `max|x| / 127`,
//!   `s` within one rounding of `d·Σ q` (±Inf past f32), every `q` in -127 ..= 127 and
//!   `|x - d·q| <= d·(1/2 + 2^-16)` (a block below 2^-100: `d`, `s` and every `q` 0; one
//!   holding an Inf or NaN: `d` and `s` NaN, every `q` 0);
//! - the products, given those blocks (read back from the device), are within a dot product's
//!   rounding of the exact f64 product they stand for: per block, the weight split into its
//!   scaled quants `a = d_w·q_w` and the block's constant `c` (Q4_1's min `m`, Q4_0's `-8·d_w`,
//!   Q4_K's `-dmin·m` per sub-block of 32, Q8_0's and Q6_K's 0), `Σ a·(d·q) + c·s`. Bound
//!   `gamma(cols + 1)·Σ|terms|`: a term is rounded by the scalings and the sums of its unit
//!   (at most 5 times), then in the row's sum, at most `5 + cols/8 <= cols + 1` times (the
//!   integer dot products are exact).
//!
//! So against x itself each row is off by at most `Σ|w|·|x - d·q|` (≤ `Σ|w|·d/2`) more, and
//! the rounding of each `s` (`s` sums the quantized values, so the block's constant meets them
//! too): checked, and the error printed beside the f32 kernel's.

use crate::common;

use crate::common::reference::{self, gamma};
use crate::common::serial;
use crate::quant_matvec::{cols, dequantized, random_blocks};
use crossgpu::{DType, Error, Member, Q8Vector, QuantFormat, Q8_BLOCK_ELEMS, Q8_BLOCK_WORDS};
use rand::Rng;

const FORMATS: [QuantFormat; 5] =
    [QuantFormat::Q8_0, QuantFormat::Q4_0, QuantFormat::Q4_1, QuantFormat::Q4_K, QuantFormat::Q6_K];

/// One block of a Q8Vector as read back.
struct Block {
    d: f32,
    s: f32,
    q: [i8; 32],
}

fn blocks(xq: &Q8Vector) -> Vec<Block> {
    let words = xq.tensor().read_u32().unwrap();
    words
        .chunks_exact(Q8_BLOCK_WORDS)
        .take(xq.cols() / Q8_BLOCK_ELEMS)
        .map(|w| {
            let mut q = [0i8; 32];
            for (j, word) in w[2..].iter().enumerate() {
                for (i, b) in word.to_le_bytes().into_iter().enumerate() {
                    q[4 * j + i] = b as i8;
                }
            }
            Block { d: f32::from_bits(w[0]), s: f32::from_bits(w[1]), q }
        })
        .collect()
}

/// x of `n` elements, never zero, its blocks of mixed magnitudes (1, 1e-3, 1e3, 2^-120) so a
/// block's scale follows its own largest element.
fn mixed_x(rng: &mut impl Rng, n: usize) -> Vec<f32> {
    let scales = [1.0f32, 1e-3, 1e3, 1.0, 7.5e-37];
    let mut x = common::random(rng, n);
    for (b, chunk) in x.chunks_mut(Q8_BLOCK_ELEMS).enumerate() {
        let s = scales[b % scales.len()];
        chunk.iter_mut().for_each(|v| *v *= s);
    }
    x
}

/// Checks `got`'s blocks against x (the module comment); returns the largest `|x - d·q| / d`.
fn check_blocks(what: &str, x: &[f32], got: &[Block]) -> f64 {
    assert_eq!(got.len(), x.len() / Q8_BLOCK_ELEMS, "{what}: blocks");
    let mut worst = 0.0f64;
    for (b, (block, xs)) in got.iter().zip(x.chunks_exact(Q8_BLOCK_ELEMS)).enumerate() {
        let (d, s) = (block.d as f64, block.s as f64);
        if xs.iter().any(|v| !v.is_finite()) {
            assert!(d.is_nan() && s.is_nan(), "{what}: block {b} holds an Inf or NaN: d {d}, s {s}");
            assert_eq!(block.q, [0; 32], "{what}: block {b} holds an Inf or NaN: its quants");
            continue;
        }
        let amax = xs.iter().map(|v| v.abs() as f64).fold(0.0, f64::max);
        if amax < 2f64.powi(-100) {
            assert_eq!((d, s, block.q), (0.0, 0.0, [0; 32]), "{what}: block {b} of max {amax:e}");
            continue;
        }
        let sum_q: f64 = block.q.iter().map(|&q| q as f64).sum();
        assert!(
            (d - amax / 127.0).abs() <= 4.0 * f32::EPSILON as f64 * amax / 127.0,
            "{what}: block {b}: d {d} for max|x| {amax}"
        );
        // One rounding of d·Σq, or its overflow past f32 (a block near the largest magnitude).
        let sum = d * sum_q;
        let ok = if sum.abs() > f32::MAX as f64 {
            s.is_infinite() && s.signum() == sum.signum()
        } else {
            (s - sum).abs() <= gamma(1) * sum.abs()
        };
        assert!(ok, "{what}: block {b}: s {s} for d·Σq {sum}");
        for (k, (&q, &v)) in block.q.iter().zip(xs).enumerate() {
            assert!(q >= -127, "{what}: block {b} element {k}: q {q}");
            let off = (v as f64 - d * q as f64).abs() / d;
            assert!(
                off <= 0.5 + 2f64.powi(-16),
                "{what}: block {b} element {k}: x {v}, d {d}, q {q}: off by {off} steps"
            );
            worst = worst.max(off);
        }
    }
    worst
}

/// The edges of x: a block with a NaN, one with an Inf (d and s NaN, quants 0, and the rows
/// that read them NaN), the largest finite magnitude (quantized like any other: 127 at the
/// top), exact zeros and subnormals (d 0, quants 0), beside ordinary blocks that stay as they
/// would alone.
#[test]
fn quantize_q8_edges() {
    let _s = serial();
    let g = common::logical(1);
    let m = g.member(0).unwrap();
    let mut rng = common::rng(44);
    let n = 8 * 32;
    let mut x = common::random(&mut rng, n);
    x[32 + 5] = f32::NAN;
    x[64 + 31] = f32::INFINITY;
    x[96..128].iter_mut().for_each(|v| *v *= f32::MAX);
    x[96 + 3] = -f32::MAX;
    x[128..160].fill(0.0);
    x[160..192].iter_mut().for_each(|v| *v *= 1e-40);
    let (xt, xq) = (m.upload_f32(&x).unwrap(), m.q8_vector(n).unwrap());
    m.quantize_q8(&xt, &xq).unwrap();
    let got = blocks(&xq);
    check_blocks("edges", &x, &got);
    assert_eq!(got[3].q[3], -127, "the largest magnitude is the block's step 127");
    let alone = m.q8_vector(32).unwrap();
    m.quantize_q8(&m.upload_f32(&x[192..224]).unwrap(), &alone).unwrap();
    assert_eq!(blocks(&alone)[0].q, got[6].q, "a block beside non-finite ones, as it is alone");
    // Rows reading the NaN and Inf blocks are NaN; a matrix over the ordinary blocks only is not.
    for format in FORMATS {
        let cols = if format.block_elems() == 256 { 256 } else { 96 };
        let w = m.upload_quant(format, 3, cols, &random_blocks(&mut rng, format, 3, cols)).unwrap();
        let (x, xq) = (m.upload_f32(&x[..cols]).unwrap(), m.q8_vector(cols).unwrap());
        m.quantize_q8(&x, &xq).unwrap();
        let y = m.empty(&[3], DType::F32).unwrap();
        m.matvec_quant_q8(&w, &xq, &y).unwrap();
        assert!(y.read().unwrap().iter().all(|v| v.is_nan()), "{format}: rows over a NaN block");
    }
    common::assert_no_validation_errors();
}

#[test]
fn quantize_q8_holds_x_within_half_a_step() {
    let _s = serial();
    let g = common::logical(1);
    let m = g.member(0).unwrap();
    let mut rng = common::rng(41);
    let mut worst = 0.0f64;
    for n in [32usize, 96, 576, 1536, 4128, 17408] {
        let xq = m.q8_vector(n).unwrap();
        for round in 0..3 {
            let x = mixed_x(&mut rng, n);
            let xt = m.upload_f32(&x).unwrap();
            m.quantize_q8(&xt, &xq).unwrap();
            worst = worst.max(check_blocks(&format!("{n} elements, round {round}"), &x, &blocks(&xq)));
        }
    }
    eprintln!("quantize_q8: largest |x - d·q| / d {worst:.6}");
    common::assert_no_validation_errors();
}

/// The part of each weight that does not scale with its quant — Q4_1's min, Q4_0's `-8·d`,
/// Q4_K's `-dmin·m`, Q8_0's and Q6_K's 0 — as the value of a zero quant: the blocks with every quant
/// byte zeroed, dequantized.
fn constant_part(format: QuantFormat, bytes: &[u8], elems: usize) -> Vec<f64> {
    let quants = match format {
        QuantFormat::Q8_0 => 2..34,
        QuantFormat::Q4_0 => 2..18,
        QuantFormat::Q4_1 => 4..20,
        QuantFormat::Q4_K => 16..144,
        // The offset of 32 goes into the integer dot products with the quants.
        QuantFormat::Q6_K => return vec![0.0; elems],
        _ => unreachable!("{format}"),
    };
    let mut zeroed = bytes.to_vec();
    for block in zeroed.chunks_exact_mut(format.block_bytes()) {
        block[quants.clone()].fill(0);
    }
    dequantized(format, &zeroed, elems)
}

/// Each row's exact f64 product with the x the blocks stand for, and its bound (the module
/// comment): the scaled quants `a = w - c` meet `x̂ = d·q`, the constant `c` (one per block of
/// x) the block's `s`.
fn twin(format: QuantFormat, bytes: &[u8], rows: usize, cols: usize, xb: &[Block]) -> (Vec<f64>, Vec<f64>) {
    let w = dequantized(format, bytes, rows * cols);
    let c = constant_part(format, bytes, rows * cols);
    let (mut want, mut bound) = (vec![0.0; rows], vec![0.0; rows]);
    for r in 0..rows {
        let (mut sum, mut abs) = (0.0f64, 0.0f64);
        for (b, block) in xb.iter().enumerate() {
            let at = r * cols + b * 32;
            let cb = c[at];
            assert!(c[at..at + 32].iter().all(|&v| v == cb), "{format}: one constant per block of x");
            for k in 0..32 {
                let t = (w[at + k] - cb) * (block.d as f64 * block.q[k] as f64);
                sum += t;
                abs += t.abs();
            }
            let t = cb * block.s as f64;
            sum += t;
            abs += t.abs();
        }
        want[r] = sum;
        bound[r] = gamma(cols + 1) * abs;
    }
    (want, bound)
}

#[test]
fn products_match_the_f64_product_of_the_blocks() {
    let _s = serial();
    let g = common::logical(1);
    let m = g.member(0).unwrap();
    let mut rng = common::rng(42);
    for format in FORMATS {
        let (mut worst, mut worst_x, mut worst_f32) = (0.0f64, 0.0f64, 0.0f64);
        for rows in [1usize, 3, 7, 97, 577] {
            for cols in cols(format) {
                let bytes = random_blocks(&mut rng, format, rows, cols);
                let w = m.upload_quant(format, rows, cols, &bytes).unwrap();
                let x = mixed_x(&mut rng, cols);
                let (xt, xq) = (m.upload_f32(&x).unwrap(), m.q8_vector(cols).unwrap());
                m.quantize_q8(&xt, &xq).unwrap();
                let y0 = common::random(&mut rng, rows);
                let yt = m.upload_f32(&y0).unwrap();
                m.matvec_quant_q8(&w, &xq, &yt).unwrap();
                let xb = blocks(&xq);
                let (want, bound) = twin(format, &bytes, rows, cols, &xb);
                let what = format!("{format} [{rows}, {cols}]");
                let got = yt.read().unwrap();
                worst = worst.max(common::assert_within(&what, &got, &want, &bound));
                // Accumulating: the same sum added to what y held, once rounded.
                let acc = m.upload_f32(&y0).unwrap();
                m.matvec_quant_q8_accumulate(&w, &xq, &acc).unwrap();
                let sums: Vec<f32> = got.iter().zip(&y0).map(|(p, y)| p + y).collect();
                common::assert_bits(&format!("{what} accumulated"), &acc.read().unwrap(), &sums);
                // Against x itself, beside the f32 kernel's error, per row over Σ|w·x|: what
                // the 8 bits cost.
                let wf = dequantized(format, &bytes, rows * cols);
                let exact = reference::matvec(
                    &wf,
                    rows,
                    &reference::Ev::from_f32(&x),
                    reference::ErrorModel::Bound { extra: 1 },
                );
                let f32y = m.empty(&[rows], DType::F32).unwrap();
                m.matvec_quant(&w, &xt, &f32y).unwrap();
                let err = |y: &[f32]| {
                    (0..rows)
                        .map(|r| {
                            let abs: f64 = (0..cols).map(|k| (wf[r * cols + k] * x[k] as f64).abs()).sum();
                            (y[r] as f64 - exact.v[r]).abs() / abs
                        })
                        .fold(0.0, f64::max)
                };
                worst_x = worst_x.max(err(&got));
                worst_f32 = worst_f32.max(err(&f32y.read().unwrap()));
                // And within the derived bound: the blocks' bound, plus Σ|w|·|x - x̂| (x̂ = d·q
                // meets the whole weight, since s sums the x̂), plus the rounding of each s.
                let c = constant_part(format, &bytes, rows * cols);
                for r in 0..rows {
                    let moved: f64 = (0..cols)
                        .map(|k| {
                            let xb = &xb[k / 32];
                            wf[r * cols + k].abs() * (x[k] as f64 - xb.d as f64 * xb.q[k % 32] as f64).abs()
                        })
                        .sum();
                    let sums: f64 =
                        xb.iter().enumerate().map(|(b, xb)| (c[r * cols + b * 32] * xb.s as f64).abs()).sum();
                    let limit = bound[r] + moved + gamma(2) * sums;
                    let off = (got[r] as f64 - exact.v[r]).abs();
                    assert!(
                        off <= limit,
                        "{what}, row {r}: {off:e} from the product with x, bound {limit:e}"
                    );
                }
            }
        }
        eprintln!(
            "{format} × 8-bit x: largest error / bound {worst:.3e} against the blocks; against x, largest error / Σ|w·x| {worst_x:.2e} (the f32 kernel: {worst_f32:.2e})"
        );
    }
    common::assert_no_validation_errors();
}

#[test]
fn q8_calls_refuse_bad_input_before_any_work() {
    let _s = serial();
    let g = common::logical(1);
    let m = g.member(0).unwrap();
    let mut rng = common::rng(43);
    assert!(matches!(m.q8_vector(33), Err(Error::InvalidArgument(_))), "33 elements");
    let (xq, xq_short, xq256) =
        (m.q8_vector(64).unwrap(), m.q8_vector(32).unwrap(), m.q8_vector(256).unwrap());
    let x = m.upload_f32(&common::random(&mut rng, 64)).unwrap();
    let xh = m.empty(&[64], DType::F16).unwrap();
    let y = m.upload_f32(&common::random(&mut rng, 3)).unwrap();
    let y4 = m.upload_f32(&common::random(&mut rng, 4)).unwrap();
    let q41 =
        m.upload_quant(QuantFormat::Q4_1, 3, 64, &random_blocks(&mut rng, QuantFormat::Q4_1, 3, 64)).unwrap();
    let bf = QuantFormat::BF16;
    let bf16 = m.upload_quant(bf, 3, 256, &random_blocks(&mut rng, bf, 3, 256)).unwrap();
    let g2 = common::logical(2);
    let other = g2.member(1).unwrap().q8_vector(64).unwrap();
    let m1 = g2.member(1).unwrap();
    let x_other = m1.upload_f32(&common::random(&mut rng, 64)).unwrap();
    let w_other = m1
        .upload_quant(QuantFormat::Q4_1, 3, 64, &random_blocks(&mut rng, QuantFormat::Q4_1, 3, 64))
        .unwrap();
    let y_u32 = m.empty(&[3], DType::U32).unwrap();
    m.flush().unwrap();
    let before = m.stats().submits;

    assert!(matches!(m.quantize_q8(&x, &xq_short), Err(Error::LengthMismatch { .. })), "x of 64 into 32");
    assert!(m.quantize_q8(&xh, &xq).is_err(), "an f16 x");
    assert!(
        matches!(m.matvec_quant_q8(&q41, &xq_short, &y), Err(Error::LengthMismatch { .. })),
        "32 columns of x for 64"
    );
    assert!(
        matches!(m.matvec_quant_q8(&q41, &xq, &y4), Err(Error::LengthMismatch { .. })),
        "4 rows of y for 3"
    );
    assert!(matches!(m.matvec_quant_q8(&bf16, &xq256, &y), Err(Error::Unsupported(_))), "BF16");
    assert!(m.matvec_quant_q8(&q41, &other, &y).is_err(), "another member's x");
    assert!(m.quantize_q8(&x_other, &xq).is_err(), "quantize_q8: another member's x");
    assert!(m.quantize_q8(&x, &other).is_err(), "quantize_q8: another member's vector");
    assert!(m.matvec_quant_q8(&w_other, &xq, &y).is_err(), "another member's w");
    assert!(m.matvec_quant_q8(&q41, &xq, &y_u32).is_err(), "a u32 y");
    assert!(m.matvec_quant_q8_accumulate(&q41, &xq, &y4).is_err(), "accumulating into 4 rows for 3");
    for format in QuantFormat::ALL {
        assert_eq!(format.takes_q8_vector(), FORMATS.contains(&format), "{format}");
    }
    nothing_recorded(m, before);
    common::assert_no_validation_errors();
}

/// No columns: a vector of no blocks quantizes to nothing, and a product over it writes zeros
/// (accumulating, leaves y), as the f32 kernels do.
#[test]
fn no_columns() {
    let _s = serial();
    let g = common::logical(1);
    let m = g.member(0).unwrap();
    let xq = m.q8_vector(0).unwrap();
    m.quantize_q8(&m.upload_f32(&[]).unwrap(), &xq).unwrap();
    for format in FORMATS {
        let w = m.upload_quant(format, 5, 0, &[]).unwrap();
        let y = m.upload_f32(&[3.0; 5]).unwrap();
        m.matvec_quant_q8_accumulate(&w, &xq, &y).unwrap();
        assert_eq!(y.read().unwrap(), vec![3.0; 5], "{format}: accumulating no columns");
        m.matvec_quant_q8(&w, &xq, &y).unwrap();
        assert_eq!(y.read().unwrap(), vec![0.0; 5], "{format}: no columns");
    }
    common::assert_no_validation_errors();
}

/// Nothing the calls since `before` submits was recorded: a flush submits nothing.
fn nothing_recorded(m: &Member, before: u64) {
    m.flush().unwrap();
    assert_eq!(m.stats().submits, before, "a refused call recorded work into {m:?}'s stream");
}
