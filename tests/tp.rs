//! Tensor parallelism, part 1: the decoder's kernels as `Member` operations, the column- and
//! row-parallel linear layers over 1, 2 and 3 logical devices, and bad requests. Everything is
//! checked against a CPU reference computed in f64 on random inputs (never all zeros); the
//! validation layer (with synchronization validation) is on and any error it reports fails the
//! test. The decoder itself is tested in `tests/tp_model.rs`.
//!
//! Tolerances come from the arithmetic (U = 2^-24, the unit roundoff of f32; one ULP of a
//! normal f32 `v` is at most 2U·|v|):
//! - f32 `+ - *` are correctly rounded: one op is off by at most U relative;
//! - a dot product or sum of K terms (any order: tree, strided, fused or not) is off by at most
//!   `gamma_K · sum|terms|` with `gamma_K = K·U / (1 - K·U)` (Higham, *Accuracy and Stability
//!   of Numerical Algorithms*, §3.1);
//! - the built-ins carry the Vulkan precision requirements (Vulkan spec, "Precision and
//!   Operation of SPIR-V Instructions"): `a / b` 2.5 ULP, `inverseSqrt` 2 ULP, `exp`/`exp2`
//!   (3 + 2|x|) ULP, `log2` 3 ULP, `pow(b, e)` inherited from `exp2(e·log2 b)`, `sin`/`cos`
//!   2^-11 absolute;
//! - moves (embed, copy_region, argmax/select, init_weights) must be exact, bit for bit.
//!
//! Tests whose failure message starts with `BUG (file): ...` document library bugs found while
//! writing them (bad requests that are accepted or panic); they fail until the library is fixed.

mod common;

use std::ops::Range;
use std::sync::{Mutex, MutexGuard};

use crossgpu::tp::{
    init, split_ranges, ColumnParallelLinear, Decoder, DecoderConfig, RowParallelLinear, SplitSpec,
};
use crossgpu::{AllReduceOptions, AttentionShape, Comm, DType, DeviceGroup, Error, Precision, Tensor};
use rand::Rng;

/// Unit roundoff of f32 (round to nearest).
const U: f64 = 1.0 / (1u64 << 24) as f64;

/// The tests of this file run one at a time, so that a validation error is reported by the test
/// that caused it (the layer's messages are collected process-wide).
fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

/// `gamma_K`: the error bound factor of a K-term f32 dot product or sum.
fn gamma(k: usize) -> f64 {
    let ku = k as f64 * U;
    ku / (1.0 - ku)
}

/// Asserts `got == want` bit for bit.
fn assert_bits(what: &str, got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    if let Some(i) = (0..got.len()).find(|&i| got[i].to_bits() != want[i].to_bits()) {
        panic!(
            "{what}: element {i} of {}: got {:e} ({:#010x}) want {:e} ({:#010x})",
            got.len(),
            got[i],
            got[i].to_bits(),
            want[i],
            want[i].to_bits()
        );
    }
}

/// Asserts `|got[i] - want[i]| <= bound[i]` for every i, naming the worst element (largest
/// error / bound); returns the largest error / bound ratio seen.
fn assert_within(what: &str, got: &[f32], want: &[f64], bound: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let mut worst = (0usize, 0.0f64);
    for i in 0..got.len() {
        let err = (got[i] as f64 - want[i]).abs();
        let ratio = if got[i].is_nan() { f64::INFINITY } else { err / bound[i].max(f64::MIN_POSITIVE) };
        if ratio > worst.1 {
            worst = (i, ratio);
        }
    }
    let i = worst.0;
    assert!(
        worst.1 <= 1.0,
        "{what}: element {i} of {}: got {:e} want {:e} (error {:e} > bound {:e})",
        got.len(),
        got[i],
        want[i],
        (got[i] as f64 - want[i]).abs(),
        bound[i]
    );
    worst.1
}

fn f16_round(v: f32) -> f32 {
    half::f16::from_f32(v).to_f32()
}

fn scaled(rng: &mut impl Rng, n: usize, s: f32) -> Vec<f32> {
    common::random(rng, n).into_iter().map(|v| v * s).collect()
}

// ---------------------------------------------------------------------------------------------
// Kernels
// ---------------------------------------------------------------------------------------------

/// rmsnorm `y = x / sqrt(mean(x²) + eps) · w`. Error: the sum of squares is a K = n term dot
/// product (all terms positive), so relative gamma_n; `/n` and `+eps` add U each; inverseSqrt
/// halves that relative error and adds 2 ULP ≤ 4U; `x·scale·w` adds 2U. So
/// `|y - y*| <= (gamma_n / 2 + U + 4U + 2U) |y*|`, with one more gamma step for second-order
/// terms: rtol = gamma_{n+1} / 2 + 7U.
#[test]
fn rmsnorm_matches_f64_reference() {
    let _s = serial();
    let g = common::logical(1);
    let m = g.member(0).unwrap();
    let mut rng = common::rng(101);
    let eps = 1e-5f32;
    // 1, odd, exactly one workgroup, and > 256 so each thread's strided loop iterates; scales
    // from where eps matters to large.
    for (n, scale) in [(1, 1.0f32), (7, 3.0), (256, 0.01), (1001, 1.0), (4099, 20.0)] {
        let x = scaled(&mut rng, n, scale);
        let w = scaled(&mut rng, n, 2.0);
        let (xt, wt) = (m.upload_f32(&x).unwrap(), m.upload_f32(&w).unwrap());
        let yt = m.upload_f32(&common::random(&mut rng, n)).unwrap();
        m.rmsnorm(&xt, &wt, &yt, eps).unwrap();
        let got = yt.read().unwrap();
        let ss: f64 = x.iter().map(|&v| (v as f64) * (v as f64)).sum();
        let s = 1.0 / (ss / n as f64 + eps as f64).sqrt();
        let want: Vec<f64> = (0..n).map(|i| x[i] as f64 * s * w[i] as f64).collect();
        let rtol = gamma(n + 1) / 2.0 + 7.0 * U;
        let bound: Vec<f64> = want.iter().map(|v| v.abs() * rtol).collect();
        assert_within(&format!("rmsnorm n={n} scale={scale}"), &got, &want, &bound);
        // x and w are inputs only.
        assert_bits("rmsnorm leaves x", &xt.read().unwrap(), &x);
    }
    // Empty vectors are accepted and do nothing; mismatched lengths are errors.
    let e = m.upload_f32(&[]).unwrap();
    m.rmsnorm(&e, &e, &e, eps).unwrap();
    let (a, b) = (m.upload_f32(&[1.0; 5]).unwrap(), m.upload_f32(&[1.0; 4]).unwrap());
    assert!(matches!(m.rmsnorm(&a, &b, &a, eps), Err(Error::LengthMismatch { .. })));
    assert!(matches!(m.rmsnorm(&a, &a, &b, eps), Err(Error::LengthMismatch { .. })));
    common::assert_no_validation_errors();
}

/// add_rmsnorm `x += r; y = rmsnorm(x) * w`: x is exactly the f32 sum, y is bit for bit what
/// `add` then `rmsnorm` give (the decoder's results must not depend on the fusion), and within
/// rmsnorm's bound of the f64 norm of that x. Aliased tensors are errors.
#[test]
fn add_rmsnorm_equals_add_then_rmsnorm() {
    let _s = serial();
    let g = common::logical(1);
    let m = g.member(0).unwrap();
    let mut rng = common::rng(110);
    let eps = 1e-5f32;
    for (n, scale) in [(1, 1.0f32), (7, 3.0), (255, 0.01), (256, 1.0), (257, 5.0), (5120, 1.0), (10007, 20.0)]
    {
        let (x, r, w) = (scaled(&mut rng, n, scale), scaled(&mut rng, n, scale), scaled(&mut rng, n, 2.0));
        let (xt, rt, wt) = (m.upload_f32(&x).unwrap(), m.upload_f32(&r).unwrap(), m.upload_f32(&w).unwrap());
        let yt = m.upload_f32(&common::random(&mut rng, n)).unwrap();
        m.add_rmsnorm(&xt, &rt, &wt, &yt, eps).unwrap();
        let (fx, fy) = (xt.read().unwrap(), yt.read().unwrap());
        let sum: Vec<f32> = x.iter().zip(&r).map(|(a, b)| a + b).collect();
        assert_bits(&format!("add_rmsnorm n={n}: x"), &fx, &sum);
        // The two separate kernels on the same inputs.
        let (x2, y2) = (m.upload_f32(&x).unwrap(), m.upload_f32(&vec![0.0; n]).unwrap());
        m.add(&x2, &rt).unwrap();
        m.rmsnorm(&x2, &wt, &y2, eps).unwrap();
        assert_bits(&format!("add_rmsnorm n={n}: y vs add + rmsnorm"), &fy, &y2.read().unwrap());
        let ss: f64 = sum.iter().map(|&v| (v as f64) * (v as f64)).sum();
        let s = 1.0 / (ss / n as f64 + eps as f64).sqrt();
        let want: Vec<f64> = (0..n).map(|i| sum[i] as f64 * s * w[i] as f64).collect();
        let rtol = gamma(n + 1) / 2.0 + 7.0 * U;
        let bound: Vec<f64> = want.iter().map(|v| v.abs() * rtol).collect();
        assert_within(&format!("add_rmsnorm n={n} scale={scale}"), &fy, &want, &bound);
    }
    let (a, b, c) = (
        m.upload_f32(&[1.0; 5]).unwrap(),
        m.upload_f32(&[1.0; 5]).unwrap(),
        m.upload_f32(&[1.0; 4]).unwrap(),
    );
    assert!(matches!(m.add_rmsnorm(&a, &b, &b, &c, eps), Err(Error::LengthMismatch { .. })));
    assert!(matches!(m.add_rmsnorm(&a, &b, &b, &a, eps), Err(Error::InvalidArgument(_))));
    assert!(matches!(m.add_rmsnorm(&a, &a, &b, &c, eps), Err(Error::LengthMismatch { .. })));
    let y = m.upload_f32(&[0.0; 5]).unwrap();
    assert!(matches!(m.add_rmsnorm(&a, &a, &b, &y, eps), Err(Error::InvalidArgument(_))));
    assert_bits("add_rmsnorm errors leave x", &a.read().unwrap(), &[1.0; 5]);
    common::assert_no_validation_errors();
}

/// silu_mul `a = g / (1 + exp(-g)) · u`. Error: exp(-g) is within (3 + 2|g|) ULP ≤
/// 2(3 + 2|g|)U relative; `1 + E` passes at most that relative error on (E/(1+E) ≤ 1) and adds
/// U; the division adds 2.5 ULP ≤ 5U, the product U. rtol = 2(3 + 2|g|)U + 7U.
#[test]
fn silu_mul_matches_f64_reference() {
    let _s = serial();
    let g = common::logical(1);
    let m = g.member(0).unwrap();
    let mut rng = common::rng(102);
    for n in [1usize, 7, 1001, 70_001] {
        // Gate in [-8, 8): both tails of the sigmoid.
        let gate = scaled(&mut rng, n, 8.0);
        let up = scaled(&mut rng, n, 2.0);
        let (gt, ut) = (m.upload_f32(&gate).unwrap(), m.upload_f32(&up).unwrap());
        let at = m.upload_f32(&common::random(&mut rng, n)).unwrap();
        m.silu_mul(&gt, &ut, &at).unwrap();
        let got = at.read().unwrap();
        let want: Vec<f64> = (0..n)
            .map(|i| {
                let x = gate[i] as f64;
                x / (1.0 + (-x).exp()) * up[i] as f64
            })
            .collect();
        let bound: Vec<f64> = (0..n)
            .map(|i| want[i].abs() * (2.0 * (3.0 + 2.0 * (gate[i] as f64).abs()) * U + 7.0 * U))
            .collect();
        assert_within(&format!("silu_mul n={n}"), &got, &want, &bound);
    }
    let e = m.upload_f32(&[]).unwrap();
    m.silu_mul(&e, &e, &e).unwrap();
    let (a, b) = (m.upload_f32(&[1.0; 3]).unwrap(), m.upload_f32(&[1.0; 2]).unwrap());
    assert!(matches!(m.silu_mul(&a, &b, &a), Err(Error::LengthMismatch { .. })));
    common::assert_no_validation_errors();
}

/// The fused MLP product `a = silu(Wg x) * (Wu x)` (issue 15): bitwise what the two products
/// through `matvec_f16_vec8_rows4` and `silu_mul` give, at awkward shapes (odd rows, so a
/// workgroup's second row is out of range; more than 65535 row pairs, so the dispatch is 2-D;
/// the 27B model's half FFN), and within the f64 bound: each dot product is off by at most
/// gamma_cols Σ|w x| (`eg`, `eu`); silu's slope is below 1.1 everywhere, so
/// `|a - a*| <= 1.1 eg |u| + |silu(g)| eu + eg eu + (silu_mul's rtol) |a*|`.
#[test]
fn gate_up_silu_is_bitwise_the_two_products_and_silu_mul() {
    let _s = serial();
    let g = common::logical(1);
    let m = g.member(0).unwrap();
    let mut rng = common::rng(115);
    for (rows, cols) in [(1usize, 8usize), (3, 24), (129, 256), (2 * 65_535 + 3, 8), (1031, 5120)] {
        let wg: Vec<f32> = common::random(&mut rng, rows * cols).into_iter().map(f16_round).collect();
        let wu: Vec<f32> = common::random(&mut rng, rows * cols).into_iter().map(f16_round).collect();
        let x = scaled(&mut rng, cols, 2.0);
        let (wgt, wut) = (
            m.upload(&wg, &[rows, cols], DType::F16).unwrap(),
            m.upload(&wu, &[rows, cols], DType::F16).unwrap(),
        );
        let xt = m.upload_f32(&x).unwrap();
        let fused = m.upload_f32(&common::random(&mut rng, rows)).unwrap();
        m.matvec_gate_up_silu(&wgt, &wut, &xt, &fused).unwrap();
        let (gt, ut, at) = (
            m.empty(&[rows], DType::F32).unwrap(),
            m.empty(&[rows], DType::F32).unwrap(),
            m.empty(&[rows], DType::F32).unwrap(),
        );
        m.matvec_f16_with("matvec_f16_vec8_rows4", &wgt, &xt, &gt).unwrap();
        m.matvec_f16_with("matvec_f16_vec8_rows4", &wut, &xt, &ut).unwrap();
        m.silu_mul(&gt, &ut, &at).unwrap();
        let got = fused.read().unwrap();
        assert_bits(&format!("gate/up {rows}x{cols} vs the unfused kernels"), &got, &at.read().unwrap());
        let (mut want, mut bound) = (Vec::with_capacity(rows), Vec::with_capacity(rows));
        for r in 0..rows {
            let dot = |w: &[f32]| -> (f64, f64) {
                let row = &w[r * cols..(r + 1) * cols];
                (
                    row.iter().zip(&x).map(|(&a, &b)| a as f64 * b as f64).sum(),
                    row.iter().zip(&x).map(|(&a, &b)| (a as f64 * b as f64).abs()).sum(),
                )
            };
            let ((g64, gabs), (u64_, uabs)) = (dot(&wg), dot(&wu));
            let (eg, eu) = (gamma(cols) * gabs, gamma(cols) * uabs);
            let silu = g64 / (1.0 + (-g64).exp());
            let a = silu * u64_;
            want.push(a);
            let rtol = 2.0 * (3.0 + 2.0 * g64.abs()) * U + 7.0 * U;
            bound.push(
                1.1 * eg * (u64_.abs() + eu)
                    + silu.abs() * eu
                    + rtol * (a.abs() + 1.1 * eg * uabs + silu.abs() * eu)
                    + f64::MIN_POSITIVE,
            );
        }
        assert_within(&format!("gate/up {rows}x{cols} vs f64"), &got, &want, &bound);
    }
    // Bad requests: shapes that disagree, columns not a multiple of 8, wrong lengths.
    let w8 = m.upload(&[0.5; 16], &[2, 8], DType::F16).unwrap();
    let w9 = m.upload(&[0.5; 18], &[2, 9], DType::F16).unwrap();
    let w4 = m.upload(&[0.5; 32], &[4, 8], DType::F16).unwrap();
    let (x8, x9, y2) = (
        m.upload_f32(&[1.0; 8]).unwrap(),
        m.upload_f32(&[1.0; 9]).unwrap(),
        m.upload_f32(&[3.0; 2]).unwrap(),
    );
    assert!(matches!(m.matvec_gate_up_silu(&w8, &w4, &x8, &y2), Err(Error::InvalidArgument(_))));
    assert!(matches!(m.matvec_gate_up_silu(&w9, &w9, &x9, &y2), Err(Error::InvalidArgument(_))));
    assert!(matches!(m.matvec_gate_up_silu(&w8, &w8, &x9, &y2), Err(Error::LengthMismatch { .. })));
    assert!(matches!(m.matvec_gate_up_silu(&w4, &w4, &x8, &y2), Err(Error::LengthMismatch { .. })));
    assert_eq!(y2.read().unwrap(), vec![3.0; 2], "a refused call writes nothing");
    common::assert_no_validation_errors();
}

/// The fused attention input (issue 15): `matvec_qkv_rope_store` is bitwise the three products
/// through `matvec_f16_vec8_rows4`, the two ropes and kv_store, caches included (every other
/// position keeps its bits), at shapes with head_dim 2 and 6, odd pair counts (a workgroup's
/// second pair out of range), the first and the last position, and the 27B model's half.
#[test]
fn qkv_rope_store_is_bitwise_the_six_dispatches_it_replaces() {
    let _s = serial();
    let g = common::logical(1);
    let m = g.member(0).unwrap();
    let mut rng = common::rng(151);
    let base = 10_000.0f32;
    // (query heads, KV heads, head_dim, cols, pos, max_seq)
    for (qh, kvh, d, cols, pos, max_seq) in [
        (2usize, 1usize, 2usize, 8usize, 0usize, 1usize),
        (3, 1, 6, 24, 2, 5),
        (8, 4, 32, 256, 0, 4),
        (8, 4, 32, 256, 3, 4),
        (20, 4, 128, 5120, 7, 16),
    ] {
        let what = format!("qkv {qh}/{kvh} heads of {d}, {cols} cols, pos {pos} of {max_seq}");
        let w = |rng: &mut rand::rngs::StdRng, rows: usize| -> Vec<f32> {
            common::random(rng, rows * cols).into_iter().map(f16_round).collect()
        };
        let (wq, wk, wv) = (w(&mut rng, qh * d), w(&mut rng, kvh * d), w(&mut rng, kvh * d));
        let up = |v: &[f32], rows: usize| m.upload(v, &[rows, cols], DType::F16).unwrap();
        let (tq, tk, tv) = (up(&wq, qh * d), up(&wk, kvh * d), up(&wv, kvh * d));
        let x = m.upload_f32(&scaled(&mut rng, cols, 2.0)).unwrap();
        let cache0 = common::random(&mut rng, kvh * max_seq * d);
        let cache1 = common::random(&mut rng, kvh * max_seq * d);
        // Fused.
        let (q, kc, vc) = (
            m.empty(&[qh * d], DType::F32).unwrap(),
            m.upload_f32(&cache0).unwrap(),
            m.upload_f32(&cache1).unwrap(),
        );
        m.matvec_qkv_rope_store((&tq, &tk, &tv), &x, &q, (&kc, &vc), d, pos, max_seq, base).unwrap();
        // The six dispatches it replaces.
        let (q2, k2, v2) = (
            m.empty(&[qh * d], DType::F32).unwrap(),
            m.empty(&[kvh * d], DType::F32).unwrap(),
            m.empty(&[kvh * d], DType::F32).unwrap(),
        );
        let (kc2, vc2) = (m.upload_f32(&cache0).unwrap(), m.upload_f32(&cache1).unwrap());
        for (wt, out) in [(&tq, &q2), (&tk, &k2), (&tv, &v2)] {
            m.matvec_f16_with("matvec_f16_vec8_rows4", wt, &x, out).unwrap();
        }
        m.rope(&q2, qh, d, pos, base).unwrap();
        m.rope(&k2, kvh, d, pos, base).unwrap();
        m.kv_store(&k2, &v2, &kc2, &vc2, kvh, d, pos, max_seq).unwrap();
        assert_bits(&format!("{what}: q"), &q.read().unwrap(), &q2.read().unwrap());
        assert_bits(&format!("{what}: k cache"), &kc.read().unwrap(), &kc2.read().unwrap());
        assert_bits(&format!("{what}: v cache"), &vc.read().unwrap(), &vc2.read().unwrap());
    }
    // Bad requests: an odd head_dim, k and v shapes that differ, a position past the cache,
    // the cache passed as q.
    let w = |rows: usize| m.upload(&vec![0.5; rows * 8], &[rows, 8], DType::F16).unwrap();
    let (wq, wk, w6) = (w(4), w(2), w(6));
    let x = m.upload_f32(&[1.0; 8]).unwrap();
    let (q, kc, vc) = (
        m.upload_f32(&[7.0; 4]).unwrap(),
        m.upload_f32(&[7.0; 4]).unwrap(),
        m.upload_f32(&[7.0; 4]).unwrap(),
    );
    let call = |wk: &Tensor, d: usize, pos: usize, q: &Tensor| {
        m.matvec_qkv_rope_store((&wq, wk, wk), &x, q, (&kc, &vc), d, pos, 2, base)
    };
    assert!(matches!(call(&wk, 1, 0, &q), Err(Error::InvalidArgument(_))));
    assert!(matches!(
        m.matvec_qkv_rope_store((&wq, &wk, &w6), &x, &q, (&kc, &vc), 2, 0, 2, base),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(call(&wk, 2, 2, &q), Err(Error::InvalidArgument(_))));
    assert!(matches!(call(&wk, 2, 0, &kc), Err(Error::InvalidArgument(_) | Error::LengthMismatch { .. })));
    assert_eq!(q.read().unwrap(), vec![7.0; 4], "a refused call writes nothing");
    assert_eq!(kc.read().unwrap(), vec![7.0; 4]);
    common::assert_no_validation_errors();
}

/// embed: `x = f32(table[token])`, exact. Odd row lengths make rows start in the high half of a
/// packed f16 word; ids past the end are clamped to the last row (documented).
#[test]
fn embed_reads_the_token_row_exactly() {
    let _s = serial();
    let g = common::logical(1);
    let m = g.member(0).unwrap();
    let mut rng = common::rng(103);
    for (vocab, n) in [(1usize, 1usize), (5, 7), (3, 1001), (37, 64)] {
        let data = scaled(&mut rng, vocab * n, 4.0);
        let table = m.upload(&data, &[vocab, n], DType::F16).unwrap();
        let rows: Vec<Vec<f32>> =
            (0..vocab).map(|r| data[r * n..(r + 1) * n].iter().map(|&v| f16_round(v)).collect()).collect();
        let x = m.upload_f32(&common::random(&mut rng, n)).unwrap();
        let mut tokens = vec![0u32, (vocab - 1) as u32, (vocab / 2) as u32];
        if vocab > 2 {
            tokens.push(rng.random_range(1..vocab as u32 - 1));
        }
        for &t in &tokens {
            let tok = m.upload_u32(&[t]).unwrap();
            m.embed(&table, &tok, &x).unwrap();
            assert_bits(
                &format!("embed vocab={vocab} n={n} token={t}"),
                &x.read().unwrap(),
                &rows[t as usize],
            );
        }
        // Past the end: the last row.
        let tok = m.upload_u32(&[vocab as u32 + 3]).unwrap();
        m.embed(&table, &tok, &x).unwrap();
        assert_bits(&format!("embed vocab={vocab} n={n} clamped"), &x.read().unwrap(), &rows[vocab - 1]);
        // The token tensor is rewritten between steps without re-recording anything else.
        let tok = m.upload_u32(&[0]).unwrap();
        m.embed(&table, &tok, &x).unwrap();
        m.write(&tok, &[(vocab - 1) as f32]).unwrap();
        let y = m.upload_f32(&common::random(&mut rng, n)).unwrap();
        m.embed(&table, &tok, &y).unwrap();
        assert_bits("embed before the token write", &x.read().unwrap(), &rows[0]);
        assert_bits("embed after the token write", &y.read().unwrap(), &rows[vocab - 1]);
    }
    // Bad requests.
    let table = m.upload(&[1.0; 6], &[2, 3], DType::F16).unwrap();
    let tok = m.upload_u32(&[0]).unwrap();
    let x = m.upload_f32(&[0.5; 3]).unwrap();
    let f32_token = m.upload_f32(&[0.0]).unwrap();
    assert!(matches!(m.embed(&table, &f32_token, &x), Err(Error::DtypeMismatch { .. })));
    let f32_table = m.upload(&[1.0; 6], &[2, 3], DType::F32).unwrap();
    assert!(matches!(m.embed(&f32_table, &tok, &x), Err(Error::DtypeMismatch { .. })));
    let short = m.upload_f32(&[0.5; 2]).unwrap();
    assert!(matches!(m.embed(&table, &tok, &short), Err(Error::LengthMismatch { .. })));
    let two_tokens = m.upload_u32(&[0, 1]).unwrap();
    assert!(matches!(m.embed(&table, &two_tokens, &x), Err(Error::LengthMismatch { .. })));
    common::assert_no_validation_errors();
}

/// The rotation angle's relative error bound for pair `i` of a `dim`-wide head (see
/// `rope_matches_f64_reference`).
fn rope_theta_rel_error(i: usize, dim: usize, base: f64) -> f64 {
    // x = e·log2(base) with e = -2i/dim; pow(base, e) = exp2(x).
    let x = (2.0 * i as f64 / dim as f64) * base.log2();
    2.0 * (3.0 + 2.0 * x) * U + std::f64::consts::LN_2 * x * 8.0 * U + U
}

/// sin/cos absolute error: the Vulkan bound (2^-11), assumed to hold for the angles used here
/// after the implementation's range reduction.
const TRIG_ABS: f64 = 1.0 / 2048.0;

/// rope: pairs (i, i + dim/2) of every head rotated by θ_i = pos·base^(-2i/dim).
/// Error of θ: `-2i/dim` rounds once (U relative on e, so ln2·U·|x| on pow with x = e·log2 b);
/// pow = exp2(e·log2 b): the product rounds (U), log2 is within 3 ULP ≤ 6U·|log2 b| (ln2·6U·|x|
/// relative on the result), exp2 within (3 + 2|x|) ULP; `pos·pow` adds U. So
/// `|δθ| <= θ·(2(3 + 2|x|)U + ln2·8U·|x| + U)`; sin and cos add 2^-11 each. The output
/// `a·c - b·s` is then within `(|a| + |b|)(|δθ| + 2^-11 + 3U)`. At pos 0 θ is exactly 0 and the
/// rotation must be the identity, bit for bit.
#[test]
fn rope_matches_f64_reference() {
    let _s = serial();
    let g = common::logical(1);
    let m = g.member(0).unwrap();
    let mut rng = common::rng(104);
    let base = 10_000.0f32;
    let mut worst_rel = 0.0f64;
    for (heads, dim) in [(1usize, 2usize), (3, 16), (8, 32), (5, 130), (2, 600)] {
        for pos in [0usize, 1, 37, 63] {
            let v = common::random(&mut rng, heads * dim);
            let t = m.upload_f32(&v).unwrap();
            m.rope(&t, heads, dim, pos, base).unwrap();
            let got = t.read().unwrap();
            let what = format!("rope heads={heads} dim={dim} pos={pos}");
            if pos == 0 {
                assert_bits(&what, &got, &v);
                continue;
            }
            let half = dim / 2;
            let (mut want, mut bound) = (vec![0.0f64; v.len()], vec![0.0f64; v.len()]);
            for h in 0..heads {
                for i in 0..half {
                    let (ia, ib) = (h * dim + i, h * dim + i + half);
                    let (a, b) = (v[ia] as f64, v[ib] as f64);
                    let theta = pos as f64 * (base as f64).powf(-2.0 * i as f64 / dim as f64);
                    let (s, c) = theta.sin_cos();
                    want[ia] = a * c - b * s;
                    want[ib] = a * s + b * c;
                    let e = (a.abs() + b.abs())
                        * (theta * rope_theta_rel_error(i, dim, base as f64) + TRIG_ABS + 3.0 * U);
                    bound[ia] = e;
                    bound[ib] = e;
                    for k in [ia, ib] {
                        worst_rel = worst_rel.max((got[k] as f64 - want[k]).abs() / (a.abs() + b.abs()));
                    }
                }
            }
            assert_within(&what, &got, &want, &bound);
        }
    }
    eprintln!("rope: largest |error| / (|a| + |b|) = {worst_rel:.3e} ({:.1} U)", worst_rel / U);
    // Zero heads is a no-op; an odd head dimension and a wrong length are errors.
    let e = m.upload_f32(&[]).unwrap();
    m.rope(&e, 0, 8, 3, base).unwrap();
    let t = m.upload_f32(&[1.0; 6]).unwrap();
    assert!(matches!(m.rope(&t, 2, 3, 1, base), Err(Error::InvalidArgument(_))));
    assert!(matches!(m.rope(&t, 2, 4, 1, base), Err(Error::LengthMismatch { .. })));
    common::assert_no_validation_errors();
}

/// Reference decode attention for exact inputs, and its error bound.
///
/// Scores `s_t = σ·q·k_t` (σ = 1/sqrt(d)): the dot is within gamma_d·Σ|q k|, σ is rounded twice
/// on the host (sqrt, divide) and the product once: `|δs_t| <= σ·gamma_d·Σ|q k| + 3U|s_t|`.
/// A perturbation δs of the scores moves the softmax weights by `|δp_t| <= p_t(|δs_t| +
/// Σ_u p_u|δs_u|)`. The softmax itself: `s_t - m` rounds (U|x_t|, x_t = s_t - m, relative on
/// the exponential), exp is within (3 + 2|x_t|) ULP, so each e_t is within
/// `ε_t = U|x_t| + 2(3 + 2|x_t|)U` relative; the sum of e's is within gamma_len (positive
/// terms), as is the weighted sum of V; the reciprocal adds 2.5 ULP ≤ 5U and the last product
/// U. So `|out_d - out*_d| <= Σ_t p_t|v_td| (|δs_t| + Σ_u p_u|δs_u| + ε_t + max ε + 2·gamma_len
/// + 6U)`.
fn attention_reference(q: &[f32], kc: &[f32], vc: &[f32], s: AttentionShape) -> (Vec<f64>, Vec<f64>) {
    let (d, len) = (s.head_dim, s.pos + 1);
    let sigma = 1.0 / (d as f64).sqrt();
    let (mut want, mut bound) = (vec![0.0; s.q_heads * d], vec![0.0; s.q_heads * d]);
    for h in 0..s.q_heads {
        let kv = h / s.group;
        let qh = &q[h * d..(h + 1) * d];
        let row = |c: &[f32], t: usize| -> Vec<f64> {
            let at = (kv * s.max_seq + t) * d;
            c[at..at + d].iter().map(|&v| v as f64).collect()
        };
        let mut scores = Vec::with_capacity(len);
        let mut ds = Vec::with_capacity(len);
        for t in 0..len {
            let k = row(kc, t);
            let dot: f64 = qh.iter().zip(&k).map(|(&a, b)| a as f64 * b).sum();
            let abs: f64 = qh.iter().zip(&k).map(|(&a, b)| (a as f64 * b).abs()).sum();
            let st = sigma * dot;
            scores.push(st);
            ds.push(sigma * gamma(d) * abs + 3.0 * U * st.abs());
        }
        let mx = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let e: Vec<f64> = scores.iter().map(|&st| (st - mx).exp()).collect();
        let sum: f64 = e.iter().sum();
        let p: Vec<f64> = e.iter().map(|v| v / sum).collect();
        let eps: Vec<f64> = scores
            .iter()
            .map(|&st| {
                let x = (st - mx).abs();
                U * x + 2.0 * (3.0 + 2.0 * x) * U
            })
            .collect();
        let eps_max = eps.iter().cloned().fold(0.0, f64::max);
        let spread: f64 = p.iter().zip(&ds).map(|(a, b)| a * b).sum();
        for dd in 0..d {
            let (mut o, mut b) = (0.0, 0.0);
            for t in 0..len {
                let v = row(vc, t)[dd];
                o += p[t] * v;
                b += p[t] * v.abs() * (ds[t] + spread + eps[t] + eps_max + 2.0 * gamma(len) + 6.0 * U);
            }
            want[h * d + dd] = o;
            bound[h * d + dd] = b;
        }
    }
    (want, bound)
}

/// (q_heads, group, head_dim, max_seq, positions, q scale)
type AttentionCase = (usize, usize, usize, usize, &'static [usize], f32);

/// Grouped-query decode attention at positions 0, 1, 20 and past 256 (the score loop
/// iterates), a head dimension past 256 (the output loop iterates), over a KV cache of random
/// values (the unused positions must be ignored).
#[test]
fn attention_matches_f64_reference() {
    let _s = serial();
    let g = common::logical(1);
    let m = g.member(0).unwrap();
    let mut rng = common::rng(105);
    // (q_heads, group, head_dim, max_seq, positions, q scale)
    let cases: [AttentionCase; 6] = [
        (8, 4, 32, 24, &[0, 1, 20, 23], 1.0),
        (6, 3, 16, 300, &[0, 5, 299], 1.0),
        (4, 1, 8, 40, &[0, 1, 37], 6.0),
        (2, 2, 260, 5, &[0, 4], 0.25),
        (1, 1, 2, 1, &[0], 1.0),
        (3, 3, 1, 9, &[8], 3.0),
    ];
    for (q_heads, group, d, max_seq, positions, qs) in cases {
        let kv = q_heads / group;
        let kc_data = common::random(&mut rng, kv * max_seq * d);
        let vc_data = scaled(&mut rng, kv * max_seq * d, 2.0);
        let kc = m.upload_f32(&kc_data).unwrap();
        let vc = m.upload_f32(&vc_data).unwrap();
        for &pos in positions {
            let q = scaled(&mut rng, q_heads * d, qs);
            let qt = m.upload_f32(&q).unwrap();
            let scores = m.upload_f32(&common::random(&mut rng, q_heads * max_seq)).unwrap();
            let out = m.upload_f32(&common::random(&mut rng, q_heads * d)).unwrap();
            let shape = AttentionShape { q_heads, group, head_dim: d, pos, max_seq };
            m.attention(&qt, &kc, &vc, &scores, &out, shape).unwrap();
            let (want, bound) = attention_reference(&q, &kc_data, &vc_data, shape);
            let what = format!("attention q_heads={q_heads} group={group} d={d} max_seq={max_seq} pos={pos}");
            assert_within(&what, &out.read().unwrap(), &want, &bound);
            assert_bits(&format!("{what}: k cache untouched"), &kc.read().unwrap(), &kc_data);
        }
    }
    // Bad shapes.
    let t = |n: usize| m.upload_f32(&vec![0.5; n]).unwrap();
    let (q, c, sc, o) = (t(4 * 8), t(2 * 10 * 8), t(4 * 10), t(4 * 8));
    let ok = AttentionShape { q_heads: 4, group: 2, head_dim: 8, pos: 9, max_seq: 10 };
    m.attention(&q, &c, &c, &sc, &o, ok).unwrap();
    let past = AttentionShape { pos: 10, ..ok };
    assert!(matches!(m.attention(&q, &c, &c, &sc, &o, past), Err(Error::InvalidArgument(_))));
    let groups = AttentionShape { group: 3, ..ok };
    assert!(matches!(m.attention(&q, &c, &c, &sc, &o, groups), Err(Error::InvalidArgument(_))));
    let no_group = AttentionShape { group: 0, ..ok };
    assert!(matches!(m.attention(&q, &c, &c, &sc, &o, no_group), Err(Error::InvalidArgument(_))));
    let wide = AttentionShape { head_dim: 16, ..ok };
    assert!(matches!(m.attention(&q, &c, &c, &sc, &o, wide), Err(Error::LengthMismatch { .. })));
    common::assert_no_validation_errors();
}

/// The (value, index) pair argmax_pair must write: the largest value, the lowest index among
/// equal values, offset; an empty slice gives (-3.4e38, -1).
fn argmax_reference(v: &[f32], offset: usize) -> (f32, f32) {
    if v.is_empty() {
        return (-3.4e38, -1.0);
    }
    let mut best = 0;
    for i in 1..v.len() {
        if v[i] > v[best] {
            best = i;
        }
    }
    (v[best], (best + offset) as f32)
}

/// argmax_pair alone: sizes 1, odd, > 256 (each thread's loop iterates and the tree reduction
/// compares indices), ties within one thread and across threads, all-equal and all-negative
/// values, an empty slice; only the pair's own slot is written.
#[test]
fn argmax_pair_writes_value_and_lowest_index() {
    let _s = serial();
    let g = common::logical(1);
    let m = g.member(0).unwrap();
    let mut rng = common::rng(106);
    let slots = 4;
    let mut cases: Vec<(String, Vec<f32>)> = Vec::new();
    for n in [1usize, 7, 300, 1001, 4099] {
        cases.push((format!("random {n}"), scaled(&mut rng, n, 10.0)));
    }
    // Ties: the same thread (i and i + 256), different threads in either order, many.
    for ties in [vec![3usize, 259], vec![300, 44], vec![5, 300], vec![999, 700, 1, 256, 511]] {
        let mut v = common::random(&mut rng, 1001);
        for &i in &ties {
            v[i] = 7.5;
        }
        cases.push((format!("ties at {ties:?}"), v));
    }
    cases.push(("all equal".into(), vec![0.25; 777]));
    cases.push(("all negative".into(), scaled(&mut rng, 513, 1.0).iter().map(|v| -v.abs() - 1.0).collect()));
    cases.push(("empty".into(), vec![]));
    for (k, (what, v)) in cases.iter().enumerate() {
        let slot = k % slots;
        let offset = [0usize, 64, 12_345, 999_936][k % 4];
        let logits = m.upload_f32(v).unwrap();
        let before = common::random(&mut rng, 2 * slots);
        let pairs = m.upload_f32(&before).unwrap();
        m.argmax_pair(&logits, offset, &pairs, slot).unwrap();
        let mut want = before.clone();
        let (bv, bi) = argmax_reference(v, offset);
        want[2 * slot] = bv;
        want[2 * slot + 1] = bi;
        assert_bits(
            &format!("argmax_pair {what} (slot {slot}, offset {offset})"),
            &pairs.read().unwrap(),
            &want,
        );
    }
    let l = m.upload_f32(&[1.0; 3]).unwrap();
    let pairs = m.upload_f32(&[0.0; 4]).unwrap();
    assert!(matches!(
        m.argmax_pair(&l, 0, &pairs, 2),
        Err(Error::IndexOutOfRange { what: "argmax pair slot", .. })
    ));
    assert!(matches!(m.argmax_pair(&l, (1 << 24) - 3, &pairs, 0), Err(Error::InvalidArgument(_))));
    common::assert_no_validation_errors();
}

/// (what, (value, index) pairs, the token to pick)
type SelectCase = (&'static str, Vec<(f32, f32)>, u32);

/// select_token alone, on hand-made pairs: largest value wins, equal values go to the lowest
/// index, index -1 (an empty slice) is skipped whatever its value, negative maxima work, and
/// the token lands in `token[0]` and `history[step]` only.
#[test]
fn select_token_picks_the_best_pair() {
    let _s = serial();
    let g = common::logical(1);
    let m = g.member(0).unwrap();
    let empty = (-3.4e38f32, -1.0f32);
    let cases: [SelectCase; 8] = [
        ("one member", vec![(0.5, 17.0)], 17),
        ("largest value", vec![(1.0, 10.0), (3.0, 500.0), (2.0, 7.0)], 500),
        ("tie goes to the lower index", vec![(3.0, 500.0), (3.0, 100.0), (-1.0, 2.0)], 100),
        ("tie, lower index first", vec![(3.0, 64.0), (3.0, 900.0)], 64),
        ("empty slice first", vec![empty, (-5.0, 3.0), (-6.0, 1.0)], 3),
        ("empty slice in the middle", vec![(-2.0, 8.0), empty, (-1.5, 900.0)], 900),
        ("an empty slice's value is ignored", vec![(1e30, -1.0), (0.5, 9.0)], 9),
        ("index 0", vec![(4.0, 0.0), (4.0, 640.0), empty], 0),
    ];
    for (step, (what, pairs, want)) in cases.iter().enumerate() {
        let flat: Vec<f32> = pairs.iter().flat_map(|&(v, i)| [v, i]).collect();
        let pt = m.upload_f32(&flat).unwrap();
        let token = m.upload_u32(&[777_777]).unwrap();
        let history: Vec<u32> = (0..12).map(|i| 1000 + i).collect();
        let ht = m.upload_u32(&history).unwrap();
        m.select_token(&pt, &token, &ht, step).unwrap();
        assert_eq!(token.read_u32().unwrap(), vec![*want], "select_token {what}: token");
        let mut h = history.clone();
        h[step] = *want;
        assert_eq!(ht.read_u32().unwrap(), h, "select_token {what}: history");
    }
    let pt = m.upload_f32(&[1.0, 2.0]).unwrap();
    let token = m.upload_u32(&[0]).unwrap();
    let ht = m.upload_u32(&[0; 4]).unwrap();
    assert!(matches!(
        m.select_token(&pt, &token, &ht, 4),
        Err(Error::IndexOutOfRange { what: "history step", .. })
    ));
    let f32_token = m.upload_f32(&[0.0]).unwrap();
    assert!(matches!(m.select_token(&pt, &f32_token, &ht, 0), Err(Error::DtypeMismatch { .. })));
    common::assert_no_validation_errors();
}

/// The greedy choice as the decoder makes it: a vocabulary split over several members (one
/// of them empty), each member's argmax pair in its own slot of a zeroed pair tensor, an f32
/// all-reduce so every member holds every pair, then select_token on every member: every
/// member must pick the global argmax (ties to the lowest index, across slices too). Also on
/// one member with all slots filled locally.
#[test]
fn argmax_pairs_of_several_members_select_the_global_argmax() {
    let _s = serial();
    let mut rng = common::rng(107);
    let vocab = 1000;
    // (weights, tie positions of the global maximum)
    let cases: [(&[f64], &[usize]); 5] = [
        (&[1.0, 1.0, 1.0], &[]),
        (&[1.0, 0.0, 1.0], &[]),
        (&[1.0, 1.0, 1.0], &[900, 100]),
        (&[2.0, 1.0, 1.0], &[700, 640, 639]),
        (&[1.0, 0.0, 1.0], &[999, 0]),
    ];
    let group = common::logical(3);
    let mut comm = Comm::new(&group).unwrap();
    for (k, (weights, ties)) in cases.iter().enumerate() {
        let mut logits = scaled(&mut rng, vocab, 5.0);
        for &t in *ties {
            logits[t] = 9.0;
        }
        let want_pair = argmax_reference(&logits, 0);
        let want = want_pair.1 as u32;
        let ranges = split_ranges(vocab, 64, weights).unwrap();
        let what = format!("case {k}: weights {weights:?} ranges {ranges:?}");
        // Across members.
        let n = group.len();
        let mut pairs = Vec::new();
        let (mut tokens, mut histories) = (Vec::new(), Vec::new());
        for (i, m) in group.members().iter().enumerate() {
            let l = m.upload_f32(&logits[ranges[i].clone()]).unwrap();
            let p = m.upload_f32(&common::random(&mut rng, 2 * n)).unwrap();
            m.fill(&p, 0.0).unwrap();
            m.argmax_pair(&l, ranges[i].start, &p, i).unwrap();
            pairs.push(p);
            tokens.push(m.upload_u32(&[12345]).unwrap());
            histories.push(m.upload_u32(&[7; 3]).unwrap());
        }
        comm.all_reduce(&mut pairs, &AllReduceOptions { precision: Precision::F32, ..Default::default() })
            .unwrap();
        let gathered: Vec<f32> = ranges
            .iter()
            .flat_map(|r| {
                let (v, i) = argmax_reference(&logits[r.clone()], r.start);
                [v, i]
            })
            .collect();
        for (i, m) in group.members().iter().enumerate() {
            assert_bits(
                &format!("{what}: gathered pairs on member {i}"),
                &pairs[i].read().unwrap(),
                &gathered,
            );
            m.select_token(&pairs[i], &tokens[i], &histories[i], 1).unwrap();
            assert_eq!(tokens[i].read_u32().unwrap(), vec![want], "{what}: token on member {i}");
            assert_eq!(histories[i].read_u32().unwrap(), vec![7, want, 7], "{what}: history on member {i}");
        }
        // On one member, every slot written locally.
        let m = group.member(0).unwrap();
        let p = m.full(&[2 * n], DType::F32, 0.0).unwrap();
        let slices: Vec<Tensor> = ranges.iter().map(|r| m.upload_f32(&logits[r.clone()]).unwrap()).collect();
        for (i, (l, r)) in slices.iter().zip(&ranges).enumerate() {
            m.argmax_pair(l, r.start, &p, i).unwrap();
        }
        let (token, history) = (m.upload_u32(&[0]).unwrap(), m.upload_u32(&[0]).unwrap());
        m.select_token(&p, &token, &history, 0).unwrap();
        assert_eq!(token.read_u32().unwrap(), vec![want], "{what}: token on one member");
        assert_eq!(history.read_u32().unwrap(), vec![want], "{what}: history on one member");
    }
    drop(comm);
    common::assert_no_validation_errors();
}

/// copy_region on f32 and u32 tensors: exact, nothing outside the region changes; F16 and out
/// of range are errors.
#[test]
fn copy_region_copies_exactly_that_region() {
    let _s = serial();
    let g = common::logical(1);
    let m = g.member(0).unwrap();
    let mut rng = common::rng(108);
    let (ns, nd) = (1001usize, 1500usize);
    let src_data = common::random(&mut rng, ns);
    let src = m.upload_f32(&src_data).unwrap();
    let src_u: Vec<u32> = (0..ns as u32).map(|i| i.wrapping_mul(2_654_435_761)).collect();
    let src_ut = m.upload_u32(&src_u).unwrap();
    for (so, dof, len) in
        [(0usize, 0usize, 1usize), (3, 7, 1), (5, 400, 777), (0, 0, 1001), (1000, 1499, 1), (9, 2, 0)]
    {
        let dst_data = common::random(&mut rng, nd);
        let dst = m.upload_f32(&dst_data).unwrap();
        m.copy_region(&src, so, &dst, dof, len).unwrap();
        let mut want = dst_data.clone();
        want[dof..dof + len].copy_from_slice(&src_data[so..so + len]);
        assert_bits(&format!("copy_region f32 {so}->{dof} x{len}"), &dst.read().unwrap(), &want);

        let dst_u: Vec<u32> = (0..nd as u32).map(|i| !i).collect();
        let dut = m.upload_u32(&dst_u).unwrap();
        m.copy_region(&src_ut, so, &dut, dof, len).unwrap();
        let mut want = dst_u.clone();
        want[dof..dof + len].copy_from_slice(&src_u[so..so + len]);
        assert_eq!(dut.read_u32().unwrap(), want, "copy_region u32 {so}->{dof} x{len}");
    }
    // Within one tensor, disjoint regions.
    let t = m.upload_f32(&src_data).unwrap();
    m.copy_region(&t, 0, &t, 600, 300).unwrap();
    let mut want = src_data.clone();
    want.copy_within(0..300, 600);
    assert_bits("copy_region within one tensor", &t.read().unwrap(), &want);
    // Errors.
    let dst = m.upload_f32(&vec![0.5; nd]).unwrap();
    assert!(matches!(m.copy_region(&src, 1000, &dst, 0, 2), Err(Error::LengthMismatch { .. })));
    assert!(matches!(m.copy_region(&src, 0, &dst, 1499, 2), Err(Error::LengthMismatch { .. })));
    assert!(matches!(m.copy_region(&src_ut, 0, &dst, 0, 1), Err(Error::DtypeMismatch { .. })));
    let h = m.upload(&[1.0; 8], &[8], DType::F16).unwrap();
    let h2 = m.upload(&[1.0; 8], &[8], DType::F16).unwrap();
    assert!(matches!(m.copy_region(&h, 0, &h2, 0, 2), Err(Error::DtypeMismatch { .. })));
    common::assert_no_validation_errors();
}

/// kv_store: every head's key and value land at `pos` of the caches, bit for bit, nothing else
/// changes; steps recorded back to back (the decode pattern) each land; bad requests are errors.
#[test]
fn kv_store_writes_each_heads_row_exactly() {
    let _s = serial();
    let g = common::logical(1);
    let m = g.member(0).unwrap();
    let mut rng = common::rng(109);
    for (heads, dim, max_seq) in [(1usize, 1usize, 1usize), (3, 5, 7), (8, 128, 33), (2, 2, 300)] {
        let cache_len = heads * max_seq * dim;
        let (kc0, vc0) = (common::random(&mut rng, cache_len), common::random(&mut rng, cache_len));
        let (kc, vc) = (m.upload_f32(&kc0).unwrap(), m.upload_f32(&vc0).unwrap());
        let (mut want_k, mut want_v) = (kc0.clone(), vc0.clone());
        // Every position in an odd order, with nothing read in between.
        let order: Vec<usize> = (0..max_seq).map(|i| (i * 5 + 3) % max_seq).collect();
        let mut seen = vec![false; max_seq];
        for &pos in &order {
            if std::mem::replace(&mut seen[pos], true) {
                continue;
            }
            let (kd, vd) = (common::random(&mut rng, heads * dim), common::random(&mut rng, heads * dim));
            let (k, v) = (m.upload_f32(&kd).unwrap(), m.upload_f32(&vd).unwrap());
            m.kv_store(&k, &v, &kc, &vc, heads, dim, pos, max_seq).unwrap();
            for h in 0..heads {
                let at = (h * max_seq + pos) * dim;
                want_k[at..at + dim].copy_from_slice(&kd[h * dim..(h + 1) * dim]);
                want_v[at..at + dim].copy_from_slice(&vd[h * dim..(h + 1) * dim]);
            }
        }
        let what = format!("kv_store {heads} heads x {dim}, {max_seq} positions");
        assert_bits(&format!("{what}: k cache"), &kc.read().unwrap(), &want_k);
        assert_bits(&format!("{what}: v cache"), &vc.read().unwrap(), &want_v);
    }
    // Errors: position past the cache, wrong lengths, aliasing, wrong dtype.
    let (k, v) = (m.upload_f32(&[0.5; 6]).unwrap(), m.upload_f32(&[0.25; 6]).unwrap());
    let (kc, vc) = (m.upload_f32(&[1.0; 24]).unwrap(), m.upload_f32(&[2.0; 24]).unwrap());
    assert!(matches!(m.kv_store(&k, &v, &kc, &vc, 2, 3, 4, 4), Err(Error::InvalidArgument(_))));
    assert!(matches!(m.kv_store(&k, &v, &kc, &vc, 2, 3, 0, 5), Err(Error::LengthMismatch { .. })));
    assert!(matches!(m.kv_store(&k, &v, &kc, &vc, 3, 3, 0, 4), Err(Error::LengthMismatch { .. })));
    assert!(matches!(m.kv_store(&k, &v, &kc, &kc, 2, 3, 0, 4), Err(Error::InvalidArgument(_))));
    let h = m.upload(&[1.0; 6], &[6], DType::F16).unwrap();
    assert!(matches!(m.kv_store(&h, &v, &kc, &vc, 2, 3, 0, 4), Err(Error::DtypeMismatch { .. })));
    assert_bits("kv_store errors leave the k cache", &kc.read().unwrap(), &[1.0; 24]);
    assert_bits("kv_store errors leave the v cache", &vc.read().unwrap(), &[2.0; 24]);
    common::assert_no_validation_errors();
}

/// The logical matrix the CPU twin defines, rows `rows` × columns `cols` of a `[*, full_cols]`
/// matrix.
fn cpu_slice(seed: u32, full_cols: usize, rows: Range<usize>, cols: Range<usize>, shift: u32) -> Vec<f32> {
    let mut out = Vec::with_capacity(rows.len() * cols.len());
    for r in rows {
        for c in cols.clone() {
            out.push(init::weight(seed, (r * full_cols + c) as u32, shift));
        }
    }
    out
}

/// init_weights equals its CPU twin bit for bit: single elements, odd element counts (the last
/// packed word is half padding), slices at row and column offsets of a larger matrix, and
/// shifts from 0 (integers up to 1024) to 24 (f16 subnormals); slices tile the full matrix.
#[test]
fn init_weights_equals_cpu_twin_bit_for_bit() {
    let _s = serial();
    let g = common::logical(1);
    let m = g.member(0).unwrap();
    // (rows, cols, full_cols, row_offset, col_offset, shift, seed)
    let cases = [
        (1usize, 1usize, 1usize, 0usize, 0usize, 10u32, 1u32),
        (3, 5, 5, 0, 0, 0, 2),
        (17, 300, 1000, 5, 123, 13, 3),
        (4, 7, 9, 2, 2, 24, 4),
        (64, 256, 256, 1000, 0, 14, 5),
        (33, 1, 77, 3, 76, 15, 0xdead_beef),
        (1, 999, 1000, 12, 1, 8, 7),
    ];
    for (rows, cols, full_cols, ro, co, shift, seed) in cases {
        let t = m.full(&[rows, cols], DType::F16, 3.0).unwrap();
        m.init_weights(&t, seed, full_cols, ro, co, shift).unwrap();
        let got = t.read().unwrap();
        let want = cpu_slice(seed, full_cols, ro..ro + rows, co..co + cols, shift);
        let what = format!("init_weights {rows}x{cols} of [*, {full_cols}] at ({ro}, {co}) shift {shift}");
        assert_bits(&what, &got, &want);
        // The CPU twin's values: k·2^-shift, k in [-1024, 1023], not all zero.
        for &v in &want {
            let k = v as f64 * 2f64.powi(shift as i32);
            assert!(k.fract() == 0.0 && (-1024.0..=1023.0).contains(&k), "{what}: {v} is not k*2^-{shift}");
        }
        assert!(want.len() < 4 || want.iter().any(|&v| v != 0.0), "{what}: all zero");
    }
    // Slices tile the full matrix: 2×2 blocks cut at odd places.
    let (r, c, seed, shift) = (37usize, 101usize, 9u32, 12u32);
    let full = m.empty(&[r, c], DType::F16).unwrap();
    m.init_weights(&full, seed, c, 0, 0, shift).unwrap();
    let full_v = full.read().unwrap();
    assert_bits("init_weights full", &full_v, &cpu_slice(seed, c, 0..r, 0..c, shift));
    for (rr, cc) in [(0..11, 0..45), (11..37, 0..45), (0..11, 45..101), (11..37, 45..101)] {
        let t = m.empty(&[rr.len(), cc.len()], DType::F16).unwrap();
        m.init_weights(&t, seed, c, rr.start, cc.start, shift).unwrap();
        let want: Vec<f32> = rr
            .clone()
            .flat_map(|i| cc.clone().map(move |j| (i, j)))
            .map(|(i, j)| full_v[i * c + j])
            .collect();
        assert_bits(&format!("init_weights block {rr:?} x {cc:?}"), &t.read().unwrap(), &want);
    }
    // Errors: columns past the logical matrix, wrong dtype, not 2-D; empty is a no-op.
    let t = m.empty(&[2, 5], DType::F16).unwrap();
    assert!(matches!(m.init_weights(&t, 1, 9, 0, 5, 10), Err(Error::LengthMismatch { .. })));
    let f = m.empty(&[2, 5], DType::F32).unwrap();
    assert!(matches!(m.init_weights(&f, 1, 9, 0, 0, 10), Err(Error::DtypeMismatch { .. })));
    let one_d = m.empty(&[10], DType::F16).unwrap();
    assert!(matches!(m.init_weights(&one_d, 1, 10, 0, 0, 10), Err(Error::LengthMismatch { .. })));
    let e = m.empty(&[0, 5], DType::F16).unwrap();
    m.init_weights(&e, 1, 5, 0, 0, 10).unwrap();
    common::assert_no_validation_errors();
}

// ---------------------------------------------------------------------------------------------
// Linear layers
// ---------------------------------------------------------------------------------------------

/// The splits the linear-layer tests run: (members, weights, granularity). Uneven, weighted,
/// and with empty members (a zero weight; or too few units for three members).
const SPLITS: [(usize, &[f64], usize); 7] = [
    (1, &[1.0], 1),
    (2, &[1.0, 1.0], 1),
    (2, &[2.0, 1.0], 8),
    (3, &[1.0, 1.0, 1.0], 1),
    (3, &[1.0, 0.0, 1.0], 64),
    (3, &[3.0, 1.0, 1.0], 64),
    (3, &[1.0, 1.0, 1.0], 512),
];

/// Shapes (in_features, out_features): odd (the generic f16 kernel, rows starting mid-word),
/// multiples of 8 (the vec8 kernel), and > 256 columns (the strided loop iterates).
const SHAPES: [(usize, usize); 3] = [(301, 37), (256, 130), (640, 72)];

fn groups() -> Vec<DeviceGroup> {
    (1..=3).map(common::logical).collect()
}

/// The full weight matrix `[out, inp]` as the CPU twin draws it, exactly (f64).
fn full_matrix(seed: u32, inp: usize, out: usize, shift: u32) -> Vec<f64> {
    (0..out * inp).map(|i| init::weight(seed, i as u32, shift) as f64).collect()
}

/// `W x` in f64 and `sum_k |W_rk x_k|` per row.
fn cpu_matvec(w: &[f64], x: &[f32], out: usize) -> (Vec<f64>, Vec<f64>) {
    let inp = x.len();
    (0..out)
        .map(|r| {
            let row = &w[r * inp..(r + 1) * inp];
            row.iter()
                .zip(x)
                .fold((0.0, 0.0), |(s, a), (&wv, &xv)| (s + wv * xv as f64, a + (wv * xv as f64).abs()))
        })
        .unzip()
}

/// ColumnParallelLinear: every member holds exactly rows `ranges[i]` of the twin's matrix; the
/// concatenated outputs equal the CPU product within gamma_K·Σ|W x| (K = in_features) and are
/// bitwise the one-member product (each row is the same dot product with the same kernel).
#[test]
fn column_parallel_linear_matches_full_matrix() {
    let _s = serial();
    let mut rng = common::rng(109);
    let groups = groups();
    for (k, &(inp, out)) in SHAPES.iter().enumerate() {
        let seed = 1000 + k as u32;
        let shift = init::shift_for_fan_in(inp);
        let w = full_matrix(seed, inp, out, shift);
        let x = common::random(&mut rng, inp);
        let (want, abs) = cpu_matvec(&w, &x, out);
        let bound: Vec<f64> = abs.iter().map(|a| gamma(inp) * a).collect();
        // The one-member product of the whole matrix, for the bitwise comparison.
        let m0 = groups[0].member(0).unwrap();
        let wt = m0.empty(&[out, inp], DType::F16).unwrap();
        m0.init_weights(&wt, seed, inp, 0, 0, shift).unwrap();
        let (xt, yt) = (m0.upload_f32(&x).unwrap(), m0.empty(&[out], DType::F32).unwrap());
        m0.matvec(&wt, &xt, &yt).unwrap();
        let whole = yt.read().unwrap();
        assert_within(&format!("matvec {out}x{inp}"), &whole, &want, &bound);
        for &(n, weights, granularity) in &SPLITS {
            let group = &groups[n - 1];
            let members = group.members();
            let ranges = split_ranges(out, granularity, weights).unwrap();
            let what = format!("column-parallel {out}x{inp} over {n}, ranges {ranges:?}");
            let layer = ColumnParallelLinear::random(members, inp, out, ranges.clone(), seed, shift).unwrap();
            assert_eq!((layer.in_features, layer.out_features, &layer.ranges), (inp, out, &ranges));
            let xs: Vec<Tensor> = members.iter().map(|m| m.upload_f32(&x).unwrap()).collect();
            let ys: Vec<Tensor> = members
                .iter()
                .zip(&ranges)
                .map(|(m, r)| m.upload_f32(&common::random(&mut rng, r.len())).unwrap())
                .collect();
            layer.forward(members, &xs.iter().collect::<Vec<_>>(), &ys.iter().collect::<Vec<_>>()).unwrap();
            let mut cat = Vec::with_capacity(out);
            for (i, r) in ranges.iter().enumerate() {
                let slice: Vec<f32> = w[r.start * inp..r.end * inp].iter().map(|&v| v as f32).collect();
                assert_eq!(
                    layer.weight(i).unwrap().shape(),
                    &[r.len(), inp],
                    "{what}: member {i} weight shape"
                );
                assert_bits(
                    &format!("{what}: member {i} weights"),
                    &layer.weight(i).unwrap().read().unwrap(),
                    &slice,
                );
                let y = ys[i].read().unwrap();
                assert_eq!(y.len(), r.len());
                cat.extend(y);
            }
            assert_within(&what, &cat, &want, &bound);
            assert_bits(&format!("{what}: vs the one-member product"), &cat, &whole);
        }
    }
    common::assert_no_validation_errors();
}

/// RowParallelLinear: every member holds exactly columns `ranges[i]`; each computes a partial
/// product of its K_i columns (within gamma_{K_i} of its exact value), the all-reduce adds the
/// N partials in f32 (N - 1 more roundings of terms bounded by Σ|W x|), so the sum is within
/// gamma_{K + N - 1}·Σ_k|W_rk x_k|, and every member must hold bitwise the same output. A
/// member with an empty range must contribute zeros (its output tensor starts as garbage).
#[test]
fn row_parallel_linear_matches_full_matrix_on_every_member() {
    let _s = serial();
    let mut rng = common::rng(110);
    let groups = groups();
    let mut comms: Vec<Option<Comm>> =
        groups.iter().map(|g| if g.len() > 1 { Some(Comm::new(g).unwrap()) } else { None }).collect();
    for (k, &(inp, out)) in SHAPES.iter().enumerate() {
        let seed = 2000 + k as u32;
        let shift = init::shift_for_fan_in(inp);
        let w = full_matrix(seed, inp, out, shift);
        let x = common::random(&mut rng, inp);
        let (want, abs) = cpu_matvec(&w, &x, out);
        for &(n, weights, granularity) in &SPLITS {
            let group = &groups[n - 1];
            let members = group.members();
            let ranges = split_ranges(inp, granularity, weights).unwrap();
            let what = format!("row-parallel {out}x{inp} over {n}, ranges {ranges:?}");
            let layer = RowParallelLinear::random(members, inp, out, ranges.clone(), seed, shift).unwrap();
            assert_eq!((layer.in_features, layer.out_features, &layer.ranges), (inp, out, &ranges));
            for (i, r) in ranges.iter().enumerate() {
                let cols: Vec<f32> = (0..out)
                    .flat_map(|row| r.clone().map(move |c| (row, c)))
                    .map(|(row, c)| w[row * inp + c] as f32)
                    .collect();
                assert_eq!(
                    layer.weight(i).unwrap().shape(),
                    &[out, r.len()],
                    "{what}: member {i} weight shape"
                );
                assert_bits(
                    &format!("{what}: member {i} weights"),
                    &layer.weight(i).unwrap().read().unwrap(),
                    &cols,
                );
            }
            let xs: Vec<Tensor> =
                members.iter().zip(&ranges).map(|(m, r)| m.upload_f32(&x[r.clone()]).unwrap()).collect();
            let ys: Vec<Tensor> =
                members.iter().map(|m| m.upload_f32(&common::random(&mut rng, out)).unwrap()).collect();
            // An empty member's partial alone: zeros, whatever the output held.
            for (i, r) in ranges.iter().enumerate().filter(|(_, r)| r.is_empty()) {
                let probe = members[i].upload_f32(&common::random(&mut rng, out)).unwrap();
                members[i].matvec(layer.weight(i).unwrap(), &xs[i], &probe).unwrap();
                assert_bits(
                    &format!("{what}: empty member {i} ({r:?}) partial"),
                    &probe.read().unwrap(),
                    &vec![0.0; out],
                );
            }
            let mut yrefs: Vec<&Tensor> = ys.iter().collect();
            layer
                .forward(members, comms[n - 1].as_mut(), &xs.iter().collect::<Vec<_>>(), &mut yrefs)
                .unwrap();
            let bound: Vec<f64> = abs.iter().map(|a| gamma(inp + n - 1) * a).collect();
            let first = ys[0].read().unwrap();
            assert_within(&what, &first, &want, &bound);
            for (i, y) in ys.iter().enumerate().skip(1) {
                assert_bits(&format!("{what}: member {i} vs member 0"), &y.read().unwrap(), &first);
            }
        }
    }
    drop(comms);
    common::assert_no_validation_errors();
}

/// Issue 13, bug 1: a layer built over some members and called with more (or other) members
/// was an index out of bounds panic; it is an error naming the mismatch, and nothing runs.
#[test]
fn linear_forward_over_more_members_than_built_is_an_error() {
    let _s = serial();
    let group = common::logical(2);
    let ms = group.members();
    let col = ColumnParallelLinear::random(&ms[..1], 8, 4, std::iter::once(0..4).collect(), 1, 10).unwrap();
    let row = RowParallelLinear::random(&ms[..1], 8, 4, std::iter::once(0..8).collect(), 1, 10).unwrap();
    let x: Vec<Tensor> = ms.iter().map(|m| m.upload_f32(&[0.5; 8]).unwrap()).collect();
    let y: Vec<Tensor> = ms.iter().map(|m| m.upload_f32(&[0.25; 4]).unwrap()).collect();
    let e = col.forward(ms, &[&x[0], &x[1]], &[&y[0], &y[1]]).unwrap_err();
    assert!(
        matches!(e, Error::LengthMismatch { expected: 1, got: 2, .. })
            && e.to_string().contains("built over 1"),
        "{e}"
    );
    let mut comm = Comm::new(&group).unwrap();
    let mut ys: Vec<&Tensor> = y.iter().collect();
    let e = row.forward(ms, Some(&mut comm), &[&x[0], &x[1]], &mut ys).unwrap_err();
    assert!(matches!(e, Error::LengthMismatch { expected: 1, got: 2, .. }), "{e}");
    // A member's slice past the layer's members is an error too.
    assert!(matches!(col.weight(1), Err(Error::IndexOutOfRange { index: 1, len: 1, .. })));
    assert!(matches!(row.weight(7), Err(Error::IndexOutOfRange { index: 7, len: 1, .. })));
    // Nothing ran: y is as uploaded, and the layer still works over its own member.
    assert_eq!(y[1].read().unwrap(), vec![0.25; 4]);
    col.forward(&ms[..1], &[&x[0]], &[&y[0]]).unwrap();
    assert_eq!(comm.all_reduce_count(), 0);
    drop(comm);
    common::assert_no_validation_errors();
}

/// The linear layers' bad requests: ranges per member, coverage, tensors per member, and a
/// row-parallel layer over several members without a communicator.
#[test]
fn linear_layers_reject_bad_requests() {
    let _s = serial();
    let group = common::logical(2);
    let ms = group.members();
    let r2 = vec![0..5, 5..10];
    assert!(matches!(
        ColumnParallelLinear::random(ms, 8, 10, std::iter::once(0..10).collect(), 1, 10),
        Err(Error::LengthMismatch { .. })
    ));
    assert!(matches!(
        ColumnParallelLinear::random(ms, 8, 11, r2.clone(), 1, 10),
        Err(Error::LengthMismatch { .. })
    ));
    assert!(matches!(
        RowParallelLinear::random(ms, 10, 8, std::iter::once(0..10).collect(), 1, 10),
        Err(Error::LengthMismatch { .. })
    ));
    assert!(matches!(
        RowParallelLinear::random(ms, 9, 8, r2.clone(), 1, 10),
        Err(Error::LengthMismatch { .. })
    ));
    let col = ColumnParallelLinear::random(ms, 8, 10, r2.clone(), 1, 10).unwrap();
    let row = RowParallelLinear::random(ms, 10, 8, r2.clone(), 1, 10).unwrap();
    let x8: Vec<Tensor> = ms.iter().map(|m| m.upload_f32(&[0.5; 8]).unwrap()).collect();
    let x5: Vec<Tensor> = ms.iter().map(|m| m.upload_f32(&[0.5; 5]).unwrap()).collect();
    let y5: Vec<Tensor> = ms.iter().map(|m| m.upload_f32(&[0.5; 5]).unwrap()).collect();
    let y8: Vec<Tensor> = ms.iter().map(|m| m.upload_f32(&[0.5; 8]).unwrap()).collect();
    assert!(matches!(col.forward(ms, &[&x8[0]], &[&y5[0], &y5[1]]), Err(Error::LengthMismatch { .. })));
    col.forward(ms, &[&x8[0], &x8[1]], &[&y5[0], &y5[1]]).unwrap();
    let mut ys: Vec<&Tensor> = y8.iter().collect();
    assert!(matches!(row.forward(ms, None, &[&x5[0], &x5[1]], &mut ys), Err(Error::InvalidArgument(_))));
    let mut comm = Comm::new(&group).unwrap();
    assert!(matches!(
        row.forward(ms, Some(&mut comm), &[&x5[0]], &mut ys),
        Err(Error::LengthMismatch { .. })
    ));
    row.forward(ms, Some(&mut comm), &[&x5[0], &x5[1]], &mut ys).unwrap();
    assert_bits("row-parallel after rejected calls", &y8[1].read().unwrap(), &y8[0].read().unwrap());
    drop(comm);
    common::assert_no_validation_errors();
}

// ---------------------------------------------------------------------------------------------
// Bad requests to the decoder
// ---------------------------------------------------------------------------------------------

/// A decoder small enough to load in milliseconds.
fn tiny() -> DecoderConfig {
    DecoderConfig {
        hidden: 64,
        ffn: 128,
        layers: 1,
        q_heads: 4,
        kv_heads: 2,
        head_dim: 16,
        vocab: 100,
        max_seq: 4,
        ..DecoderConfig::small()
    }
}

#[test]
fn split_spec_parse_accepts_good_and_rejects_malformed_strings() {
    for (s, want) in [
        ("even", SplitSpec::Even),
        (" EVEN ", SplitSpec::Even),
        ("", SplitSpec::Even),
        ("2:1", SplitSpec::Weighted(vec![2.0, 1.0])),
        ("1:0:1", SplitSpec::Weighted(vec![1.0, 0.0, 1.0])),
        (" 0.5 : 0.25 ", SplitSpec::Weighted(vec![0.5, 0.25])),
        ("3", SplitSpec::Weighted(vec![3.0])),
    ] {
        assert_eq!(SplitSpec::parse(s).unwrap(), want, "'{s}'");
    }
    for s in [
        "2:x", "1:-1", "0:0", "0", "inf:1", "1:nan", "nan", ":", "1::2", "1:2:", ":1", "abc", "-1", "1e400",
        "2,1", "even:1",
    ] {
        match SplitSpec::parse(s) {
            Err(Error::BadConfig { name, .. }) => assert_eq!(name, "CROSSGPU_SPLIT", "'{s}'"),
            other => panic!("SplitSpec::parse('{s}') = {other:?}, want a BadConfig error"),
        }
    }
    assert_eq!(SplitSpec::Even.weights(3).unwrap(), vec![1.0; 3]);
    assert!(matches!(SplitSpec::parse("2:1").unwrap().weights(3), Err(Error::BadConfig { .. })));
}

#[test]
fn decoder_rejects_bad_requests() {
    let _s = serial();
    let g1 = common::logical(1);
    let g2 = common::logical(2);
    let g3 = common::logical(3);
    // Weights count ≠ members.
    for (g, w) in [(&g2, vec![1.0, 1.0, 1.0]), (&g3, vec![2.0, 1.0]), (&g1, vec![1.0, 1.0])] {
        let r = Decoder::new(g, tiny(), &SplitSpec::Weighted(w.clone()));
        assert!(
            matches!(r, Err(Error::BadConfig { .. })),
            "{} members, weights {w:?}: {:?}",
            g.len(),
            r.err()
        );
    }
    // All-zero, negative or non-finite weights (built directly, not parsed).
    for w in [vec![0.0, 0.0], vec![-1.0, 2.0], vec![f64::NAN, 1.0], vec![f64::INFINITY, 1.0]] {
        let r = Decoder::new(&g2, tiny(), &SplitSpec::Weighted(w.clone()));
        assert!(r.is_err(), "weights {w:?} must be rejected");
    }
    // Shapes: q_heads not a multiple of kv_heads, no KV heads, odd head_dim, zero sizes.
    let bad_shapes = [
        DecoderConfig { q_heads: 6, kv_heads: 4, ..tiny() },
        DecoderConfig { q_heads: 3, kv_heads: 2, ..tiny() },
        DecoderConfig { kv_heads: 0, ..tiny() },
        DecoderConfig { head_dim: 15, ..tiny() },
        DecoderConfig { head_dim: 0, ..tiny() },
        DecoderConfig { hidden: 0, ..tiny() },
        DecoderConfig { vocab: 0, ..tiny() },
        DecoderConfig { max_seq: 0, ..tiny() },
        DecoderConfig { layers: 0, ..tiny() },
    ];
    for cfg in bad_shapes {
        for g in [&g1, &g2] {
            let r = Decoder::new(g, cfg.clone(), &SplitSpec::Even);
            assert!(
                matches!(r, Err(Error::InvalidArgument(_))),
                "{cfg:?} on {} members: {:?}",
                g.len(),
                r.err()
            );
        }
    }
    assert!(DecoderConfig::preset("medium").is_err());
    // Several members without a communicator.
    assert!(matches!(
        Decoder::with_comm(&g2, tiny(), &SplitSpec::Even, None),
        Err(Error::InvalidArgument(_))
    ));
    // Tokens beyond the vocabulary.
    for g in [&g1, &g2] {
        let mut d = Decoder::new(g, tiny(), &SplitSpec::Even).unwrap();
        let e = d.set_token(100).unwrap_err();
        assert!(matches!(e, Error::IndexOutOfRange { what: "token id", index: 100, len: 100, .. }), "{e:?}");
        assert_eq!(e.to_string(), "token id 100 out of range: there are 100 tokens in the vocabulary");
        assert!(matches!(d.set_token(u32::MAX), Err(Error::IndexOutOfRange { .. })));
        assert!(matches!(d.generate(100, 1, |_| {}), Err(Error::IndexOutOfRange { .. })));
        assert_eq!(d.position(), 0, "a rejected token decodes nothing");
        d.set_token(99).unwrap();
    }
    // Past max_seq: in one call, and step by step after filling the cache.
    for g in [&g1, &g3] {
        let mut d = Decoder::new(g, tiny(), &SplitSpec::Even).unwrap();
        assert!(matches!(d.generate(1, 5, |_| {}), Err(Error::InvalidArgument(_))), "{} members", g.len());
        let mut d = Decoder::new(g, tiny(), &SplitSpec::Even).unwrap();
        let mut seen = Vec::new();
        let tokens = d.generate(1, 4, |i| seen.push(i)).unwrap();
        assert_eq!(seen, vec![0, 1, 2, 3], "on_step once per step, in order");
        assert_eq!(tokens.len(), 4);
        assert!(tokens.iter().all(|&t| t < 100), "{tokens:?}");
        assert_eq!(d.position(), 4);
        assert!(matches!(d.step(), Err(Error::InvalidArgument(_))));
        assert!(matches!(d.generate(1, 1, |_| {}), Err(Error::InvalidArgument(_))));
        assert_eq!(d.position(), 4);
    }
    common::assert_no_validation_errors();
}

/// Issue 13, tool 5: a model the members cannot hold is refused before anything is
/// allocated, naming the device and what it needs: a tensor past one binding
/// (`maxStorageBufferRange`), and members on one adapter together past its device-local heap.
#[test]
fn decoder_too_large_for_the_devices_is_refused_before_allocating() {
    let _s = serial();
    let g2 = common::logical(2);
    let caps = g2.members()[0].adapter().caps.clone();
    let before = crossgpu::live_objects();
    // One vocabulary row block past the binding: the replicated embedding table alone.
    let rows = (caps.max_storage_buffer_range / (2 * 256) + 64) as usize;
    let wide = DecoderConfig { vocab: rows.min((1 << 24) - 1), hidden: 256, ..tiny() };
    if (wide.vocab * wide.hidden * 2) as u64 > caps.max_storage_buffer_range {
        let e = Decoder::new(&g2, wide, &SplitSpec::Even).err().expect("refused");
        assert!(
            matches!(&e, Error::Unsupported(m) if m.contains("embedding table") && m.contains("maxStorageBufferRange")),
            "{e}"
        );
    } else {
        eprintln!(
            "SKIPPED the binding case: this device binds {} bytes, more than any vocabulary below 2^24 needs",
            caps.max_storage_buffer_range
        );
    }
    // Many layers of modest tensors: more than the heap, for each member alone (so also when
    // the members are separate GPUs). A lower bound of one member's weight bytes per layer:
    let per_member_layer = 3 * 2048 * 2048 + 4 * 2048 * 512;
    let layers = (caps.device_local_heap_bytes / per_member_layer as u64 + 1) as usize;
    let deep =
        DecoderConfig { hidden: 2048, ffn: 2048, q_heads: 16, kv_heads: 4, head_dim: 128, layers, ..tiny() };
    let e = Decoder::new(&g2, deep.clone(), &SplitSpec::Even).err().expect("refused");
    assert!(
        matches!(&e, Error::OutOfDeviceMemory { detail, .. } if detail.contains("GiB") && detail.contains("nothing was allocated")),
        "{e}"
    );
    // The plan's footprint is what was compared: over the heap for one member alone.
    let plan = crossgpu::tp::Plan::new(&deep, &[1.0, 1.0]).unwrap();
    let one = plan.footprint(&deep, 0).bytes;
    assert!(one > caps.device_local_heap_bytes, "{one} bytes vs heap {}", caps.device_local_heap_bytes);
    assert_eq!(crossgpu::live_objects().buffers, before.buffers, "nothing was allocated");
    common::assert_no_validation_errors();
}

/// A hidden size that is not a multiple of 8 takes the unfused path (three products, ropes
/// and kv_store; gate, up and silu_mul): it runs, and decodes the same tokens on one, two and
/// three members, the members' residual streams bitwise equal.
#[test]
fn decoder_without_fused_kernels_decodes_the_same_tokens_on_every_member_count() {
    let _s = serial();
    let cfg =
        DecoderConfig { hidden: 60, ffn: 100, head_dim: 6, q_heads: 4, kv_heads: 2, max_seq: 6, ..tiny() };
    let mut tokens = Vec::new();
    for n in [1, 2, 3] {
        let g = common::logical(n);
        let mut d = Decoder::new(&g, cfg.clone(), &SplitSpec::Even).unwrap();
        let got = d.generate(3, 5, |_| {}).unwrap();
        assert!(got.iter().all(|&t| (t as usize) < cfg.vocab), "{got:?}");
        let r = d.residuals().unwrap();
        for (i, x) in r.iter().enumerate().skip(1) {
            assert_bits(&format!("{n} members: member {i}'s residual"), x, &r[0]);
        }
        tokens.push(got);
    }
    assert!(tokens.iter().all(|t| *t == tokens[0]), "tokens by member count: {tokens:?}");
    common::assert_no_validation_errors();
}

/// Ranges must tile `0..features` contiguously, in member order: anything else (overlapping
/// ranges, a gap, a first range not starting at 0) is no split of the layer, and a row-parallel
/// layer built on it would silently sum some input features twice, or never. The constructors
/// only check that the last range ends at the feature count.
#[test]
fn linear_layers_reject_ranges_that_do_not_tile_the_features() {
    let _s = serial();
    let group = common::logical(2);
    let ms = group.members();
    let mut rng = common::rng(111);
    let (inp, out, seed, shift) = (10usize, 8usize, 5u32, 10u32);
    let w = full_matrix(seed, inp, out, shift);
    let x = common::random(&mut rng, inp);
    let (want, _) = cpu_matvec(&w, &x, out);
    let mut comm = Comm::new(&group).unwrap();
    let mut accepted = Vec::new();
    for ranges in [vec![0..6, 4..10], vec![0..3, 5..10], vec![2..6, 6..10]] {
        let col = ColumnParallelLinear::random(ms, out, inp, ranges.clone(), seed, shift);
        let row = RowParallelLinear::random(ms, inp, out, ranges.clone(), seed, shift);
        if let Ok(row) = &row {
            let xs: Vec<Tensor> =
                ms.iter().zip(&ranges).map(|(m, r)| m.upload_f32(&x[r.clone()]).unwrap()).collect();
            let ys: Vec<Tensor> = ms.iter().map(|m| m.upload_f32(&vec![0.0; out]).unwrap()).collect();
            let mut yrefs: Vec<&Tensor> = ys.iter().collect();
            row.forward(ms, Some(&mut comm), &xs.iter().collect::<Vec<_>>(), &mut yrefs).unwrap();
            let y = ys[0].read().unwrap();
            let off = (0..out).map(|i| (y[i] as f64 - want[i]).abs()).fold(0.0, f64::max);
            accepted.push(format!(
                "RowParallelLinear over {ranges:?} accepted; forward gives y[0] = {} where W x has {:.6} (max error {off:.3})",
                y[0], want[0]
            ));
        }
        if col.is_ok() {
            accepted.push(format!("ColumnParallelLinear over {ranges:?} (out_features {inp}) accepted"));
        }
    }
    drop(comm);
    common::assert_no_validation_errors();
    assert!(
        accepted.is_empty(),
        "BUG (src/tp/linear.rs): ColumnParallelLinear::random and RowParallelLinear::random check only \
         that the last range ends at the feature count, not that the ranges tile 0..features \
         contiguously; overlapping or gapped ranges are accepted and the row-parallel forward then \
         returns a wrong y = W x without an error:\n  {}",
        accepted.join("\n  ")
    );
}

/// Runs `f`, turning a panic into `Err(its message)`.
fn no_panic<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|e| {
        e.downcast_ref::<String>()
            .cloned()
            .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default()
    })
}

/// Offsets, slots and counts near `usize::MAX` are bad requests like any other: they must come
/// back as errors ("No public function panics on bad input", src/error.rs). The range checks of
/// the model ops add or multiply the caller's numbers unchecked: with overflow checks (debug,
/// tests) that panics; without them (release) it wraps, the check passes, and the offsets are
/// truncated to u32 for the kernel — copy_region then reads and writes element 0xFFFFFFFF of a
/// 16-element buffer (the SPIR-V is compiled without bounds checks).
#[test]
fn model_ops_reject_overflowing_arguments_without_panicking() {
    let _s = serial();
    let g = common::logical(1);
    let m = g.member(0).unwrap();
    let src = m.upload_f32(&[1.0; 16]).unwrap();
    let dst = m.upload_f32(&[0.0; 16]).unwrap();
    let pairs = m.upload_f32(&[0.0; 4]).unwrap();
    let w = m.empty(&[2, 3], DType::F16).unwrap();
    let scores = m.upload_f32(&[0.0; 16]).unwrap();
    let max = usize::MAX;
    let attn = |s: AttentionShape| m.attention(&src, &src, &src, &scores, &dst, s);
    let cases: Vec<(&str, Result<crossgpu::Result<()>, String>)> = vec![
        ("copy_region(src, usize::MAX, dst, 0, 2)", no_panic(|| m.copy_region(&src, max, &dst, 0, 2))),
        ("copy_region(src, 0, dst, usize::MAX, 2)", no_panic(|| m.copy_region(&src, 0, &dst, max, 2))),
        ("argmax_pair(logits, usize::MAX, pairs, 0)", no_panic(|| m.argmax_pair(&src, max, &pairs, 0))),
        ("argmax_pair(logits, 0, pairs, usize::MAX)", no_panic(|| m.argmax_pair(&src, 0, &pairs, max))),
        ("init_weights(t, 1, 10, 0, usize::MAX, 10)", no_panic(|| m.init_weights(&w, 1, 10, 0, max, 10))),
        ("init_weights(t, 1, 10, usize::MAX, 0, 10)", no_panic(|| m.init_weights(&w, 1, 10, max, 0, 10))),
        ("rope(v, usize::MAX, 2, 0, 1e4)", no_panic(|| m.rope(&src, max, 2, 0, 1e4))),
        (
            "attention(q_heads: usize::MAX, group 1, head_dim 2)",
            no_panic(|| attn(AttentionShape { q_heads: max, group: 1, head_dim: 2, pos: 0, max_seq: 1 })),
        ),
        (
            "attention(pos: usize::MAX - 1, max_seq: usize::MAX)",
            no_panic(|| {
                attn(AttentionShape { q_heads: 2, group: 1, head_dim: 8, pos: max - 1, max_seq: max })
            }),
        ),
    ];
    m.synchronize().unwrap();
    assert_bits("dst after the rejected calls", &dst.read().unwrap(), &[0.0; 16]);
    common::assert_no_validation_errors();
    let bad: Vec<String> = cases
        .into_iter()
        .filter_map(|(call, r)| match r {
            Ok(Err(_)) => None,
            Ok(Ok(())) => Some(format!("{call}: accepted")),
            Err(msg) => Some(format!("{call}: panicked: {msg}")),
        })
        .collect();
    assert!(
        bad.is_empty(),
        "BUG (src/ops/model.rs): range checks overflow instead of returning an error (use checked \
         arithmetic); in release builds the wrapped check passes and u32-truncated offsets reach the \
         kernels:\n  {}",
        bad.join("\n  ")
    );
}

/// The same for the decoder's shapes and the split: sizes whose products overflow must be
/// errors, not panics.
#[test]
fn decoder_shapes_and_splits_reject_huge_sizes_without_panicking() {
    let _s = serial();
    let g = common::logical(1);
    let huge = [
        ("max_seq: usize::MAX", DecoderConfig { max_seq: usize::MAX, ..tiny() }),
        ("head_dim: 2^62", DecoderConfig { head_dim: 1 << 62, ..tiny() }),
        ("hidden: 2^40, ffn: 2^40", DecoderConfig { hidden: 1 << 40, ffn: 1 << 40, ..tiny() }),
    ];
    let mut bad = Vec::new();
    for (what, cfg) in huge {
        match no_panic(|| Decoder::new(&g, cfg.clone(), &SplitSpec::Even).map(|_| ())) {
            Ok(Err(_)) => {}
            Ok(Ok(())) => bad.push(format!("Decoder::new with {what}: accepted")),
            Err(msg) => bad.push(format!("Decoder::new with {what}: panicked: {msg}")),
        }
        if let Err(msg) = no_panic(|| cfg.parameters()) {
            bad.push(format!("DecoderConfig {{ {what} }}.parameters(): panicked: {msg}"));
        }
    }
    for (total, granularity) in [(usize::MAX, 1usize), (usize::MAX, 1 << 62)] {
        match no_panic(|| split_ranges(total, granularity, &[1.0, 1.0])) {
            Ok(Ok(r)) if r.last().map(|r| r.end) == Some(total) => {}
            Ok(Ok(r)) => bad.push(format!("split_ranges({total}, {granularity}, [1, 1]) = {r:?}")),
            Ok(Err(_)) => {}
            Err(msg) => bad.push(format!("split_ranges({total}, {granularity}, [1, 1]): panicked: {msg}")),
        }
    }
    g.synchronize().unwrap();
    common::assert_no_validation_errors();
    assert!(
        bad.is_empty(),
        "BUG (src/tp/model.rs, src/tp/split.rs): DecoderConfig::validate does not bound the sizes, so \
         Decoder::new and DecoderConfig::parameters multiply them unchecked, and split_ranges \
         overflows computing its cuts; each panics on bad input instead of returning an error:\n  {}",
        bad.join("\n  ")
    );
}
