//! Tensor parallelism, the kernels: the decoder's operations as `Member` operations (rmsnorm,
//! add_rmsnorm, silu_mul, the fused MLP and attention-input kernels, embed, rope, attention,
//! argmax_pair, select_token, copy_region, kv_store, init_weights) and their bad requests.
//! Everything is checked against its CPU twin in `tests/common/reference.rs`, computed in f64 on
//! random inputs (never all zeros), within the worst-case bound derived there
//! (`ErrorModel::Bound`); moves must be exact, bit for bit. The validation layer (with
//! synchronization validation) is on and any error it reports fails the test. The linear layers
//! are tested in `tests/tp_linear.rs`, the decoder in `tests/tp_decoder.rs` and
//! `tests/tp_model.rs`.
//!
//! Tests whose failure message starts with `BUG (file): ...` document library bugs found while
//! writing them (bad requests that are accepted or panic); they fail until the library is fixed.

use crate::common;

use crate::common::reference::{self, gamma, ErrorModel, Ev, U};
use crate::common::{assert_bits, assert_within, assert_within_ev, no_panic, scaled, serial, to_f16};
use crossgpu::tp::split_ranges;
use crossgpu::tp::AttentionShape;
use crossgpu::{AllReduceOptions, Comm, DType, Error, Precision, Tensor};
use rand::Rng;

/// The worst-case bound of one kernel on exact inputs.
const BOUND: ErrorModel = ErrorModel::BOUND;

/// rmsnorm `y = x / sqrt(mean(x²) + eps) · w` against `reference::rmsnorm`: within
/// `(gamma_{n+1} / 2 + 7U)|y*|` (derived there).
#[test]
fn rmsnorm_matches_f64_reference() {
    let _s = serial();
    let g = common::logical(1);
    let m = g.member(0).unwrap();
    let mut rng = common::rng(101);
    let eps = 1e-5f32;
    // 1, odd, exactly one workgroup, and > 256 so each thread's strided loop iterates; scales
    // from where eps matters to large.
    for (n, scale) in
        [(1, 1.0f32), (7, 3.0), (256, 0.01), (1001, 1.0), (4099, 20.0), (8192, 1.0), (8193, 4.0)]
    {
        let x = scaled(&mut rng, n, scale);
        let w = scaled(&mut rng, n, 2.0);
        let (xt, wt) = (m.upload_f32(&x).unwrap(), m.upload_f32(&w).unwrap());
        let yt = m.upload_f32(&common::random(&mut rng, n)).unwrap();
        m.transformer().rmsnorm(&xt, &wt, &yt, eps).unwrap();
        let got = yt.read().unwrap();
        let want = reference::rmsnorm(&Ev::from_f32(&x), Some(&reference::f64s(&w)), eps as f64, BOUND);
        assert_within_ev(&format!("rmsnorm n={n} scale={scale}"), &got, &want);
        // x and w are inputs only.
        assert_bits("rmsnorm leaves x", &xt.read().unwrap(), &x);
    }
    // Empty vectors are accepted and do nothing; mismatched lengths are errors.
    let e = m.upload_f32(&[]).unwrap();
    m.transformer().rmsnorm(&e, &e, &e, eps).unwrap();
    let (a, b) = (m.upload_f32(&[1.0; 5]).unwrap(), m.upload_f32(&[1.0; 4]).unwrap());
    assert!(matches!(m.transformer().rmsnorm(&a, &b, &a, eps), Err(Error::LengthMismatch { .. })));
    assert!(matches!(m.transformer().rmsnorm(&a, &a, &b, eps), Err(Error::LengthMismatch { .. })));
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
    for (n, scale) in
        [(1, 1.0f32), (7, 3.0), (255, 0.01), (256, 1.0), (257, 5.0), (5120, 1.0), (8192, 2.0), (10007, 20.0)]
    {
        let (x, r, w) = (scaled(&mut rng, n, scale), scaled(&mut rng, n, scale), scaled(&mut rng, n, 2.0));
        let (xt, rt, wt) = (m.upload_f32(&x).unwrap(), m.upload_f32(&r).unwrap(), m.upload_f32(&w).unwrap());
        let yt = m.upload_f32(&common::random(&mut rng, n)).unwrap();
        m.transformer().add_rmsnorm(&xt, &rt, &wt, &yt, eps).unwrap();
        let (fx, fy) = (xt.read().unwrap(), yt.read().unwrap());
        let sum: Vec<f32> = x.iter().zip(&r).map(|(a, b)| a + b).collect();
        assert_bits(&format!("add_rmsnorm n={n}: x"), &fx, &sum);
        // The two separate kernels on the same inputs.
        let (x2, y2) = (m.upload_f32(&x).unwrap(), m.upload_f32(&vec![0.0; n]).unwrap());
        m.add(&x2, &rt).unwrap();
        m.transformer().rmsnorm(&x2, &wt, &y2, eps).unwrap();
        assert_bits(&format!("add_rmsnorm n={n}: y vs add + rmsnorm"), &fy, &y2.read().unwrap());
        let want = reference::rmsnorm(&Ev::from_f32(&sum), Some(&reference::f64s(&w)), eps as f64, BOUND);
        assert_within_ev(&format!("add_rmsnorm n={n} scale={scale}"), &fy, &want);
    }
    let (a, b, c) = (
        m.upload_f32(&[1.0; 5]).unwrap(),
        m.upload_f32(&[1.0; 5]).unwrap(),
        m.upload_f32(&[1.0; 4]).unwrap(),
    );
    assert!(matches!(m.transformer().add_rmsnorm(&a, &b, &b, &c, eps), Err(Error::LengthMismatch { .. })));
    assert!(matches!(m.transformer().add_rmsnorm(&a, &b, &b, &a, eps), Err(Error::InvalidArgument(_))));
    assert!(matches!(m.transformer().add_rmsnorm(&a, &a, &b, &c, eps), Err(Error::LengthMismatch { .. })));
    let y = m.upload_f32(&[0.0; 5]).unwrap();
    assert!(matches!(m.transformer().add_rmsnorm(&a, &a, &b, &y, eps), Err(Error::InvalidArgument(_))));
    assert_bits("add_rmsnorm errors leave x", &a.read().unwrap(), &[1.0; 5]);
    common::assert_no_validation_errors();
}

/// silu_mul `a = g / (1 + exp(-g)) · u` against `reference::silu_mul`: within
/// `(2(3 + 2|g|)U + 7U)|a*|` (`reference::silu_mul_rtol`, derived there).
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
        m.transformer().silu_mul(&gt, &ut, &at).unwrap();
        let got = at.read().unwrap();
        let want = reference::silu_mul(&Ev::from_f32(&gate), &Ev::from_f32(&up), BOUND);
        assert_within_ev(&format!("silu_mul n={n}"), &got, &want);
    }
    let e = m.upload_f32(&[]).unwrap();
    m.transformer().silu_mul(&e, &e, &e).unwrap();
    let (a, b) = (m.upload_f32(&[1.0; 3]).unwrap(), m.upload_f32(&[1.0; 2]).unwrap());
    assert!(matches!(m.transformer().silu_mul(&a, &b, &a), Err(Error::LengthMismatch { .. })));
    common::assert_no_validation_errors();
}

/// The fused MLP product `a = silu(Wg x) * (Wu x)` (issue 15): bitwise what the two products
/// through `matvec_f16_vec8_rows4` and `silu_mul` give, at awkward shapes (odd rows, so a
/// workgroup's second row is out of range; more than 65535 row pairs, so the dispatch is 2-D;
/// the 27B model's half FFN), and within the f64 bound: each dot product is off by at most
/// gamma_cols Σ|w x|, and `reference::silu_mul_of_bounded` carries that through SiLU·up.
#[test]
fn gate_up_silu_is_bitwise_the_two_products_and_silu_mul() {
    let _s = serial();
    let g = common::logical(1);
    let m = g.member(0).unwrap();
    let mut rng = common::rng(115);
    for (rows, cols) in [
        (1usize, 8usize),
        (3, 24),
        (129, 256),
        (2 * 65_535 + 3, 8),
        (4 * 65_535 + 2, 8),
        (1031, 5120),
        (7, 8 * 131),
    ] {
        let wg: Vec<f32> = common::random(&mut rng, rows * cols).into_iter().map(to_f16).collect();
        let wu: Vec<f32> = common::random(&mut rng, rows * cols).into_iter().map(to_f16).collect();
        let x = scaled(&mut rng, cols, 2.0);
        let (wgt, wut) = (
            m.upload(&wg, &[rows, cols], DType::F16).unwrap(),
            m.upload(&wu, &[rows, cols], DType::F16).unwrap(),
        );
        let xt = m.upload_f32(&x).unwrap();
        let fused = m.upload_f32(&common::random(&mut rng, rows)).unwrap();
        m.transformer().matvec_gate_up_silu(&wgt, &wut, &xt, &fused).unwrap();
        let (gt, ut, at) = (
            m.empty(&[rows], DType::F32).unwrap(),
            m.empty(&[rows], DType::F32).unwrap(),
            m.empty(&[rows], DType::F32).unwrap(),
        );
        m.matvec_f16_with("matvec_f16_vec8_rows4", &wgt, &xt, &gt).unwrap();
        m.matvec_f16_with("matvec_f16_vec8_rows4", &wut, &xt, &ut).unwrap();
        m.transformer().silu_mul(&gt, &ut, &at).unwrap();
        let got = fused.read().unwrap();
        assert_bits(&format!("gate/up {rows}x{cols} vs the unfused kernels"), &got, &at.read().unwrap());
        // The kernels that load x once for a row's two products: the same bits.
        for kernel in ["matvec_gate_up_silu", "matvec_gate_up_silu_x2", "matvec_gate_up_silu_x4"] {
            let other = m.upload_f32(&common::random(&mut rng, rows)).unwrap();
            m.transformer().matvec_gate_up_silu_with(kernel, &wgt, &wut, &xt, &other).unwrap();
            assert_bits(&format!("gate/up {rows}x{cols} through {kernel}"), &other.read().unwrap(), &got);
        }
        let x = Ev::from_f32(&x);
        let product = |w: &[f32]| reference::matvec(&reference::f64s(w), rows, &x, BOUND);
        let want = reference::silu_mul_of_bounded(&product(&wg), &product(&wu));
        assert_within_ev(&format!("gate/up {rows}x{cols} vs f64"), &got, &want);
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
    assert!(matches!(
        m.transformer().matvec_gate_up_silu(&w8, &w4, &x8, &y2),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        m.transformer().matvec_gate_up_silu(&w9, &w9, &x9, &y2),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        m.transformer().matvec_gate_up_silu(&w8, &w8, &x9, &y2),
        Err(Error::LengthMismatch { .. })
    ));
    assert!(matches!(
        m.transformer().matvec_gate_up_silu(&w4, &w4, &x8, &y2),
        Err(Error::LengthMismatch { .. })
    ));
    assert!(matches!(
        m.transformer().matvec_gate_up_silu_with("matvec_gate_up_silu_x8", &w8, &w8, &x8, &y2),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        m.transformer().matvec_gate_up_silu_with("matvec_gate_up_silu_x4", &w8, &w8, &x9, &y2),
        Err(Error::LengthMismatch { .. })
    ));
    assert_eq!(y2.read().unwrap(), vec![3.0; 2], "a refused call writes nothing");
    common::assert_no_validation_errors();
}

/// The fused attention input (issue 15): `matvec_qkv_rope_store` is bitwise the three products
/// through `matvec_f16_vec8_rows8`, the two ropes and kv_store, caches included (every other
/// position keeps its bits), at shapes with head_dim 2 and 6, pair counts that leave some of a
/// workgroup's four pairs out of range, the first and the last position, and the 27B model's half.
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
            common::random(rng, rows * cols).into_iter().map(to_f16).collect()
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
        m.transformer()
            .matvec_qkv_rope_store((&tq, &tk, &tv), &x, &q, (&kc, &vc), d, pos, max_seq, base)
            .unwrap();
        // The six dispatches it replaces.
        let (q2, k2, v2) = (
            m.empty(&[qh * d], DType::F32).unwrap(),
            m.empty(&[kvh * d], DType::F32).unwrap(),
            m.empty(&[kvh * d], DType::F32).unwrap(),
        );
        let (kc2, vc2) = (m.upload_f32(&cache0).unwrap(), m.upload_f32(&cache1).unwrap());
        for (wt, out) in [(&tq, &q2), (&tk, &k2), (&tv, &v2)] {
            m.matvec_f16_with("matvec_f16_vec8_rows8", wt, &x, out).unwrap();
        }
        m.transformer().rope(&q2, qh, d, pos, base).unwrap();
        m.transformer().rope(&k2, kvh, d, pos, base).unwrap();
        m.transformer().kv_store(&k2, &v2, &kc2, &vc2, kvh, d, pos, max_seq).unwrap();
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
        m.transformer().matvec_qkv_rope_store((&wq, wk, wk), &x, q, (&kc, &vc), d, pos, 2, base)
    };
    assert!(matches!(call(&wk, 1, 0, &q), Err(Error::InvalidArgument(_))));
    assert!(matches!(
        m.transformer().matvec_qkv_rope_store((&wq, &wk, &w6), &x, &q, (&kc, &vc), 2, 0, 2, base),
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
        // The table as the device holds it, and its rows.
        let held: Vec<f32> = data.iter().map(|&v| to_f16(v)).collect();
        let row = |t: usize| reference::embed(&held, n, t as u32);
        let x = m.upload_f32(&common::random(&mut rng, n)).unwrap();
        let mut tokens = vec![0u32, (vocab - 1) as u32, (vocab / 2) as u32];
        if vocab > 2 {
            tokens.push(rng.random_range(1..vocab as u32 - 1));
        }
        for &t in &tokens {
            let tok = m.upload_u32(&[t]).unwrap();
            m.transformer().embed(&table, &tok, &x).unwrap();
            assert_bits(&format!("embed vocab={vocab} n={n} token={t}"), &x.read().unwrap(), row(t as usize));
        }
        // Past the end: the last row.
        let tok = m.upload_u32(&[vocab as u32 + 3]).unwrap();
        m.transformer().embed(&table, &tok, &x).unwrap();
        assert_bits(&format!("embed vocab={vocab} n={n} clamped"), &x.read().unwrap(), row(vocab - 1));
        // The token tensor is rewritten between steps without re-recording anything else.
        let tok = m.upload_u32(&[0]).unwrap();
        m.transformer().embed(&table, &tok, &x).unwrap();
        m.write(&tok, &[(vocab - 1) as f32]).unwrap();
        let y = m.upload_f32(&common::random(&mut rng, n)).unwrap();
        m.transformer().embed(&table, &tok, &y).unwrap();
        assert_bits("embed before the token write", &x.read().unwrap(), row(0));
        assert_bits("embed after the token write", &y.read().unwrap(), row(vocab - 1));
    }
    // Bad requests.
    let table = m.upload(&[1.0; 6], &[2, 3], DType::F16).unwrap();
    let tok = m.upload_u32(&[0]).unwrap();
    let x = m.upload_f32(&[0.5; 3]).unwrap();
    let f32_token = m.upload_f32(&[0.0]).unwrap();
    assert!(matches!(m.transformer().embed(&table, &f32_token, &x), Err(Error::DtypeMismatch { .. })));
    let f32_table = m.upload(&[1.0; 6], &[2, 3], DType::F32).unwrap();
    assert!(matches!(m.transformer().embed(&f32_table, &tok, &x), Err(Error::DtypeMismatch { .. })));
    let short = m.upload_f32(&[0.5; 2]).unwrap();
    assert!(matches!(m.transformer().embed(&table, &tok, &short), Err(Error::LengthMismatch { .. })));
    let two_tokens = m.upload_u32(&[0, 1]).unwrap();
    assert!(matches!(m.transformer().embed(&table, &two_tokens, &x), Err(Error::LengthMismatch { .. })));
    common::assert_no_validation_errors();
}

/// rope: pairs (i, i + dim/2) of every head rotated by θ_i = pos·base^(-2i/dim), against
/// `reference::rope`: within `(|a| + |b|)(θ·ε_θ + 2^-11 + 3U)` (ε_θ:
/// `reference::rope_theta_rel_error`, derived there). At pos 0 θ is exactly 0 and the rotation
/// must be the identity, bit for bit.
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
            m.transformer().rope(&t, heads, dim, pos, base).unwrap();
            let got = t.read().unwrap();
            let what = format!("rope heads={heads} dim={dim} pos={pos}");
            if pos == 0 {
                assert_bits(&what, &got, &v);
                continue;
            }
            let mut want = Ev::from_f32(&v);
            reference::rope(&mut want, heads, dim, pos, base as f64, BOUND);
            let half = dim / 2;
            for h in 0..heads {
                for i in 0..half {
                    let (ia, ib) = (h * dim + i, h * dim + i + half);
                    let mag = (v[ia] as f64).abs() + (v[ib] as f64).abs();
                    for k in [ia, ib] {
                        worst_rel = worst_rel.max((got[k] as f64 - want.v[k]).abs() / mag);
                    }
                }
            }
            assert_within_ev(&what, &got, &want);
        }
    }
    eprintln!("rope: largest |error| / (|a| + |b|) = {worst_rel:.3e} ({:.1} U)", worst_rel / U);
    // Zero heads is a no-op; an odd head dimension and a wrong length are errors.
    let e = m.upload_f32(&[]).unwrap();
    m.transformer().rope(&e, 0, 8, 3, base).unwrap();
    let t = m.upload_f32(&[1.0; 6]).unwrap();
    assert!(matches!(m.transformer().rope(&t, 2, 3, 1, base), Err(Error::InvalidArgument(_))));
    assert!(matches!(m.transformer().rope(&t, 2, 4, 1, base), Err(Error::LengthMismatch { .. })));
    common::assert_no_validation_errors();
}

/// (q_heads, group, head_dim, max_seq, positions, q scale)
type AttentionCase = (usize, usize, usize, usize, &'static [usize], f32);

/// The decode-attention cases (q_heads, group, head_dim, max_seq, positions, q scale).
fn attention_cases() -> [AttentionCase; 12] {
    [
        (8, 4, 32, 24, &[0, 1, 20, 23], 1.0),
        (6, 3, 16, 300, &[0, 5, 299], 1.0),
        (4, 1, 8, 40, &[0, 1, 37], 6.0),
        (2, 2, 260, 5, &[0, 4], 0.25),
        (1, 1, 2, 1, &[0], 1.0),
        (3, 3, 1, 9, &[8], 3.0),
        // Many passes of scores at head width 2 (up to 601 positions); around a pass's 32
        // positions and V's batches at head width 128.
        (2, 1, 2, 700, &[255, 256, 600], 1.0),
        (2, 2, 128, 40, &[15, 16, 17, 39], 0.5),
        // The weighted sum of V over 256/dim threads a dimension, some threads idle (3 and 100
        // do not divide 256), and one thread a dimension at 129 and 256.
        (2, 1, 100, 40, &[39], 1.0),
        (2, 2, 3, 300, &[31, 32, 299], 1.0),
        (1, 1, 129, 40, &[33], 1.0),
        (1, 1, 256, 40, &[0, 33], 1.0),
    ]
}

/// Grouped-query decode attention against `reference::attention` (the bound is derived there)
/// at positions 0, 1, 20 and past 256 (the scores take several passes of 32 positions), head
/// widths from 1 to 260 (a score's eight threads with fewer dimensions than threads; the
/// weighted sum of V over 256/dim threads a dimension up to 128, one thread a dimension above,
/// iterating past 256), over a KV cache of random values (the unused positions must be
/// ignored). The same inputs through `attention_split` (flash-decoding, up to 5 parts of
/// ATTENTION_CHUNK positions here) within that bound plus what the split adds (`split_extra`;
/// it fails with the parts' rescaling left out).
#[test]
fn attention_whole_and_split_match_f64_reference() {
    let _s = serial();
    let g = common::logical(1);
    let m = g.member(0).unwrap();
    let mut rng = common::rng(105);
    let cases = attention_cases();
    for (q_heads, group, d, max_seq, positions, qs) in cases {
        let kv = q_heads / group;
        let kc_data = common::random(&mut rng, kv * max_seq * d);
        let vc_data = scaled(&mut rng, kv * max_seq * d, 2.0);
        let kc = m.upload_f32(&kc_data).unwrap();
        let vc = m.upload_f32(&vc_data).unwrap();
        let (kc_ref, vc_ref) = (Ev::from_f32(&kc_data), Ev::from_f32(&vc_data));
        for &pos in positions {
            let q = scaled(&mut rng, q_heads * d, qs);
            let qt = m.upload_f32(&q).unwrap();
            let scores = m.upload_f32(&common::random(&mut rng, q_heads * max_seq)).unwrap();
            let out = m.upload_f32(&common::random(&mut rng, q_heads * d)).unwrap();
            let shape = AttentionShape { q_heads, group, head_dim: d, pos, max_seq };
            m.transformer().attention(&qt, &kc, &vc, &scores, &out, shape).unwrap();
            let mut want = reference::attention(&Ev::from_f32(&q), &kc_ref, &vc_ref, shape, BOUND);
            let what = format!("attention q_heads={q_heads} group={group} d={d} max_seq={max_seq} pos={pos}");
            assert_within_ev(&what, &out.read().unwrap(), &want);
            assert_bits(&format!("{what}: k cache untouched"), &kc.read().unwrap(), &kc_data);
            // The same inputs cut over the positions, the partials starting as random values
            // (only the step's live parts may be read).
            let n = crossgpu::tp::attention_partials_len(shape).unwrap();
            let partials = m.upload_f32(&common::random(&mut rng, n)).unwrap();
            m.transformer().attention_split(&qt, &kc, &vc, &scores, &partials, &out, shape).unwrap();
            for (e, extra) in want.e.iter_mut().zip(split_extra(&q, &kc_data, &vc_data, shape)) {
                *e += extra;
            }
            assert_within_ev(&format!("split {what}"), &out.read().unwrap(), &want);
        }
    }
    // Bad shapes.
    let t = |n: usize| m.upload_f32(&vec![0.5; n]).unwrap();
    let (q, c, sc, o) = (t(4 * 8), t(2 * 10 * 8), t(4 * 10), t(4 * 8));
    let ok = AttentionShape { q_heads: 4, group: 2, head_dim: 8, pos: 9, max_seq: 10 };
    m.transformer().attention(&q, &c, &c, &sc, &o, ok).unwrap();
    let past = AttentionShape { pos: 10, ..ok };
    assert!(matches!(m.transformer().attention(&q, &c, &c, &sc, &o, past), Err(Error::InvalidArgument(_))));
    let groups = AttentionShape { group: 3, ..ok };
    assert!(matches!(m.transformer().attention(&q, &c, &c, &sc, &o, groups), Err(Error::InvalidArgument(_))));
    let no_group = AttentionShape { group: 0, ..ok };
    assert!(matches!(
        m.transformer().attention(&q, &c, &c, &sc, &o, no_group),
        Err(Error::InvalidArgument(_))
    ));
    let wide = AttentionShape { head_dim: 16, ..ok };
    assert!(matches!(
        m.transformer().attention(&q, &c, &c, &sc, &o, wide),
        Err(Error::LengthMismatch { .. })
    ));
    common::assert_no_validation_errors();
}

/// What `attention_split` may add to `reference::attention`'s bound, per output: `Σ_t p_t|v_td|`
/// times twice (numerator and denominator) a part's rescaling `exp(m_c - M)` (2(3 + 2|m_c -
/// M|)U, the spread of the exact scores plus 1 bounding |m_c - M|) and its product (U), and the
/// sums over the parts (gamma_parts each).
fn split_extra(q: &[f32], kc: &[f32], vc: &[f32], s: AttentionShape) -> Vec<f64> {
    let (d, pos) = (s.head_dim, s.pos);
    let parts = (pos + 1).div_ceil(crossgpu::tp::ATTENTION_CHUNK);
    let sigma = 1.0 / (d as f64).sqrt();
    let mut extra = vec![0.0; s.q_heads * d];
    for h in 0..s.q_heads {
        let cb = (h / s.group) * s.max_seq * d;
        let scores: Vec<f64> = (0..=pos)
            .map(|t| sigma * (0..d).map(|j| q[h * d + j] as f64 * kc[cb + t * d + j] as f64).sum::<f64>())
            .collect();
        let (hi, lo) = scores.iter().fold((f64::MIN, f64::MAX), |(a, b), &v| (a.max(v), b.min(v)));
        let e: Vec<f64> = scores.iter().map(|v| (v - hi).exp()).collect();
        let total: f64 = e.iter().sum();
        let rescale = 2.0 * (3.0 + 2.0 * (hi - lo + 1.0)) * U + U;
        let rel = 2.0 * (rescale + gamma(parts));
        for j in 0..d {
            let weighted: f64 = (0..=pos).map(|t| e[t] / total * (vc[cb + t * d + j] as f64).abs()).sum();
            extra[h * d + j] = rel * weighted;
        }
    }
    extra
}

/// `attention_split`'s bad requests, each refused before any work: partials of another length,
/// the scores' tensor as partials; then the same call with good partials runs.
#[test]
fn attention_split_refuses_bad_partials() {
    let _s = serial();
    let g = common::logical(1);
    let m = g.member(0).unwrap();
    let t = |n: usize| m.upload_f32(&vec![0.5; n]).unwrap();
    let (q, c, sc, o) = (t(4 * 8), t(2 * 10 * 8), t(4 * 10), t(4 * 8));
    let ok = AttentionShape { q_heads: 4, group: 2, head_dim: 8, pos: 9, max_seq: 10 };
    let n = crossgpu::tp::attention_partials_len(ok).unwrap();
    assert_eq!(n, 4 * 10, "4 heads, one part of 8 + 2");
    let (short, good) = (t(n - 1), t(n));
    let split =
        |partials: &Tensor, out: &Tensor| m.transformer().attention_split(&q, &c, &c, &sc, partials, out, ok);
    assert!(matches!(split(&short, &o), Err(Error::LengthMismatch { .. })));
    // The scores have the partials' length here: as partials they are refused.
    assert!(matches!(split(&sc, &o), Err(Error::InvalidArgument(_))));
    assert_bits("refused calls write nothing", &o.read().unwrap(), &[0.5; 32]);
    split(&good, &o).unwrap();
    assert!(o.read().unwrap().iter().all(|v| v.is_finite()));
    common::assert_no_validation_errors();
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
        m.transformer().argmax_pair(&logits, offset, &pairs, slot).unwrap();
        let mut want = before.clone();
        let (bv, bi) = reference::argmax_pair(v, offset);
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
        m.transformer().argmax_pair(&l, 0, &pairs, 2),
        Err(Error::IndexOutOfRange { what: "argmax pair slot", .. })
    ));
    assert!(matches!(
        m.transformer().argmax_pair(&l, (1 << 24) - 3, &pairs, 0),
        Err(Error::InvalidArgument(_))
    ));
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
        m.transformer().select_token(&pt, &token, &ht, step).unwrap();
        assert_eq!(token.read_u32().unwrap(), vec![*want], "select_token {what}: token");
        let mut h = history.clone();
        h[step] = *want;
        assert_eq!(ht.read_u32().unwrap(), h, "select_token {what}: history");
    }
    let pt = m.upload_f32(&[1.0, 2.0]).unwrap();
    let token = m.upload_u32(&[0]).unwrap();
    let ht = m.upload_u32(&[0; 4]).unwrap();
    assert!(matches!(
        m.transformer().select_token(&pt, &token, &ht, 4),
        Err(Error::IndexOutOfRange { what: "history step", .. })
    ));
    let f32_token = m.upload_f32(&[0.0]).unwrap();
    assert!(matches!(
        m.transformer().select_token(&pt, &f32_token, &ht, 0),
        Err(Error::DtypeMismatch { .. })
    ));
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
        let want_pair = reference::argmax_pair(&logits, 0);
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
            m.transformer().argmax_pair(&l, ranges[i].start, &p, i).unwrap();
            pairs.push(p);
            tokens.push(m.upload_u32(&[12345]).unwrap());
            histories.push(m.upload_u32(&[7; 3]).unwrap());
        }
        comm.all_reduce(&mut pairs, &AllReduceOptions { precision: Precision::F32, ..Default::default() })
            .unwrap();
        let gathered: Vec<f32> = ranges
            .iter()
            .flat_map(|r| {
                let (v, i) = reference::argmax_pair(&logits[r.clone()], r.start);
                [v, i]
            })
            .collect();
        for (i, m) in group.members().iter().enumerate() {
            assert_bits(
                &format!("{what}: gathered pairs on member {i}"),
                &pairs[i].read().unwrap(),
                &gathered,
            );
            m.transformer().select_token(&pairs[i], &tokens[i], &histories[i], 1).unwrap();
            assert_eq!(tokens[i].read_u32().unwrap(), vec![want], "{what}: token on member {i}");
            assert_eq!(histories[i].read_u32().unwrap(), vec![7, want, 7], "{what}: history on member {i}");
        }
        // On one member, every slot written locally.
        let m = group.member(0).unwrap();
        let p = m.full(&[2 * n], DType::F32, 0.0).unwrap();
        let slices: Vec<Tensor> = ranges.iter().map(|r| m.upload_f32(&logits[r.clone()]).unwrap()).collect();
        for (i, (l, r)) in slices.iter().zip(&ranges).enumerate() {
            m.transformer().argmax_pair(l, r.start, &p, i).unwrap();
        }
        let (token, history) = (m.upload_u32(&[0]).unwrap(), m.upload_u32(&[0]).unwrap());
        m.transformer().select_token(&p, &token, &history, 0).unwrap();
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
            m.transformer().kv_store(&k, &v, &kc, &vc, heads, dim, pos, max_seq).unwrap();
            reference::kv_store(&kd, &mut want_k, heads, dim, pos, max_seq);
            reference::kv_store(&vd, &mut want_v, heads, dim, pos, max_seq);
        }
        let what = format!("kv_store {heads} heads x {dim}, {max_seq} positions");
        assert_bits(&format!("{what}: k cache"), &kc.read().unwrap(), &want_k);
        assert_bits(&format!("{what}: v cache"), &vc.read().unwrap(), &want_v);
    }
    // Errors: position past the cache, wrong lengths, aliasing, wrong dtype.
    let (k, v) = (m.upload_f32(&[0.5; 6]).unwrap(), m.upload_f32(&[0.25; 6]).unwrap());
    let (kc, vc) = (m.upload_f32(&[1.0; 24]).unwrap(), m.upload_f32(&[2.0; 24]).unwrap());
    assert!(matches!(m.transformer().kv_store(&k, &v, &kc, &vc, 2, 3, 4, 4), Err(Error::InvalidArgument(_))));
    assert!(matches!(
        m.transformer().kv_store(&k, &v, &kc, &vc, 2, 3, 0, 5),
        Err(Error::LengthMismatch { .. })
    ));
    assert!(matches!(
        m.transformer().kv_store(&k, &v, &kc, &vc, 3, 3, 0, 4),
        Err(Error::LengthMismatch { .. })
    ));
    assert!(matches!(m.transformer().kv_store(&k, &v, &kc, &kc, 2, 3, 0, 4), Err(Error::InvalidArgument(_))));
    let h = m.upload(&[1.0; 6], &[6], DType::F16).unwrap();
    assert!(matches!(
        m.transformer().kv_store(&h, &v, &kc, &vc, 2, 3, 0, 4),
        Err(Error::DtypeMismatch { .. })
    ));
    assert_bits("kv_store errors leave the k cache", &kc.read().unwrap(), &[1.0; 24]);
    assert_bits("kv_store errors leave the v cache", &vc.read().unwrap(), &[2.0; 24]);
    common::assert_no_validation_errors();
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
        m.transformer().init_weights(&t, seed, full_cols, ro, co, shift).unwrap();
        let got = t.read().unwrap();
        let want = reference::init_weights(seed, full_cols, ro..ro + rows, co..co + cols, shift);
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
    m.transformer().init_weights(&full, seed, c, 0, 0, shift).unwrap();
    let full_v = full.read().unwrap();
    assert_bits("init_weights full", &full_v, &reference::init_weights(seed, c, 0..r, 0..c, shift));
    for (rr, cc) in [(0..11, 0..45), (11..37, 0..45), (0..11, 45..101), (11..37, 45..101)] {
        let t = m.empty(&[rr.len(), cc.len()], DType::F16).unwrap();
        m.transformer().init_weights(&t, seed, c, rr.start, cc.start, shift).unwrap();
        let want: Vec<f32> = rr
            .clone()
            .flat_map(|i| cc.clone().map(move |j| (i, j)))
            .map(|(i, j)| full_v[i * c + j])
            .collect();
        assert_bits(&format!("init_weights block {rr:?} x {cc:?}"), &t.read().unwrap(), &want);
    }
    // Errors: columns past the logical matrix, wrong dtype, not 2-D; empty is a no-op.
    let t = m.empty(&[2, 5], DType::F16).unwrap();
    assert!(matches!(m.transformer().init_weights(&t, 1, 9, 0, 5, 10), Err(Error::LengthMismatch { .. })));
    let f = m.empty(&[2, 5], DType::F32).unwrap();
    assert!(matches!(m.transformer().init_weights(&f, 1, 9, 0, 0, 10), Err(Error::DtypeMismatch { .. })));
    let one_d = m.empty(&[10], DType::F16).unwrap();
    assert!(matches!(
        m.transformer().init_weights(&one_d, 1, 10, 0, 0, 10),
        Err(Error::LengthMismatch { .. })
    ));
    let e = m.empty(&[0, 5], DType::F16).unwrap();
    m.transformer().init_weights(&e, 1, 5, 0, 0, 10).unwrap();
    common::assert_no_validation_errors();
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
    let attn = |s: AttentionShape| m.transformer().attention(&src, &src, &src, &scores, &dst, s);
    let cases: Vec<(&str, Result<crossgpu::Result<()>, String>)> = vec![
        ("copy_region(src, usize::MAX, dst, 0, 2)", no_panic(|| m.copy_region(&src, max, &dst, 0, 2))),
        ("copy_region(src, 0, dst, usize::MAX, 2)", no_panic(|| m.copy_region(&src, 0, &dst, max, 2))),
        (
            "argmax_pair(logits, usize::MAX, pairs, 0)",
            no_panic(|| m.transformer().argmax_pair(&src, max, &pairs, 0)),
        ),
        (
            "argmax_pair(logits, 0, pairs, usize::MAX)",
            no_panic(|| m.transformer().argmax_pair(&src, 0, &pairs, max)),
        ),
        (
            "init_weights(t, 1, 10, 0, usize::MAX, 10)",
            no_panic(|| m.transformer().init_weights(&w, 1, 10, 0, max, 10)),
        ),
        (
            "init_weights(t, 1, 10, usize::MAX, 0, 10)",
            no_panic(|| m.transformer().init_weights(&w, 1, 10, max, 0, 10)),
        ),
        ("rope(v, usize::MAX, 2, 0, 1e4)", no_panic(|| m.transformer().rope(&src, max, 2, 0, 1e4))),
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
        "BUG (src/tp/ops.rs): range checks overflow instead of returning an error (use checked \
         arithmetic); in release builds the wrapped check passes and u32-truncated offsets reach the \
         kernels:\n  {}",
        bad.join("\n  ")
    );
}

/// A norm left pending by the product before it (`matvec_add_norm_pending`, the decoder's
/// output projections with the norms folded) and finished by the fused products that read it
/// (`ProductInput::PendingNorm`: `s·W(y∘w)`, the scale summed from the partial sums of squares
/// and applied to each finished sum). The producer: the stream `y0 + W a` within the f64
/// product's bound and, from 4096 columns (where `matvec` also runs eight rows per workgroup),
/// bitwise `matvec_accumulate`; the weighted vector bitwise `y·w` in f32; each partial sum of
/// squares within gamma_9 of its eight rows' f64 sum. The readers: against the f64 reference
/// of `rmsnorm` of that stream then the product, within the bound derived in
/// `reference::normed_matvec` carried through SiLU·up (`silu_mul_of_bounded`) and RoPE
/// (`rope_of_bounded`): gate/up and q/k/v at widths of one group of eight, a few, past 2048,
/// the 27B model's and past 8192, streams small enough for eps to matter and large, a norm
/// weight of mixed signs; producers of 8 columns to past 8192 (the four-load kernel); RoPE at
/// position 2 (the caches' other positions keep their bits). The same kernels without the
/// norm stay bitwise the unfused dispatches (the tests above). Bad requests of both are
/// refused before anything runs.
#[test]
fn pending_norms_match_the_f64_norm_then_the_product() {
    let _s = serial();
    let g = common::logical(1);
    let m = g.member(0).unwrap();
    let t = m.transformer();
    let mut rng = common::rng(171);
    let (eps, base) = (1e-5f32, 10_000.0f32);
    let f16s = |rng: &mut rand::rngs::StdRng, rows: usize, cols: usize| {
        let v: Vec<f32> = common::random(rng, rows * cols).into_iter().map(to_f16).collect();
        (m.upload(&v, &[rows, cols], DType::F16).unwrap(), reference::f64s(&v))
    };
    // The producer alone at a stream of 37 rows (its last workgroup's sum over 5).
    let cases = [
        (37usize, 16usize, 1.0f32),
        (8, 4104, 1.0),
        (24, 8200, 0.003),
        (2056, 24, 20.0),
        (5120, 4096, 1.0),
        (8200, 8, 0.5),
    ];
    for (cols, k, scale) in cases {
        let what = format!("add_norm_pending, a stream of {cols} from {k} cols at scale {scale}");
        let y0 = scaled(&mut rng, cols, scale);
        let a = scaled(&mut rng, k, scale / (k as f32).sqrt());
        let nw = scaled(&mut rng, cols, 2.0);
        let (wo, wo64) = f16s(&mut rng, cols, k);
        let (at, nwt) = (m.upload_f32(&a).unwrap(), m.upload_f32(&nw).unwrap());
        let yt = m.upload_f32(&y0).unwrap();
        let squares_len = crossgpu::tp::pending_norm_squares(cols);
        let weighted = m.upload_f32(&common::random(&mut rng, cols)).unwrap();
        let squares = m.upload_f32(&common::random(&mut rng, squares_len)).unwrap();
        t.matvec_add_norm_pending(&wo, &at, &yt, &nwt, &weighted, &squares).unwrap();
        let y = yt.read().unwrap();
        let product =
            reference::matvec(&wo64, cols, &reference::Ev::from_f32(&a), ErrorModel::Bound { extra: 1 });
        assert_within_ev(&format!("{what}: the stream"), &y, &reference::add_to_bounded(&product, &y0));
        if k >= 4096 {
            let again = m.upload_f32(&y0).unwrap();
            m.matvec_accumulate(&wo, &at, &again).unwrap();
            assert_bits(&format!("{what}: the stream against matvec_accumulate"), &y, &again.read().unwrap());
        }
        let want: Vec<f32> = y.iter().zip(&nw).map(|(v, w)| v * w).collect();
        assert_bits(&format!("{what}: weighted"), &weighted.read().unwrap(), &want);
        let exact: Vec<f64> = y.chunks(8).map(|c| c.iter().map(|&v| (v as f64).powi(2)).sum()).collect();
        let bound: Vec<f64> = exact.iter().map(|s| reference::gamma(9) * s + f64::MIN_POSITIVE).collect();
        assert_within(&format!("{what}: squares"), &squares.read().unwrap(), &exact, &bound);
        assert_bits(&format!("{what}: a kept"), &at.read().unwrap(), &a);
        assert_bits(&format!("{what}: norm weight kept"), &nwt.read().unwrap(), &nw);
        if !cols.is_multiple_of(8) {
            continue;
        }
        let pending = crossgpu::tp::ProductInput::PendingNorm { weighted: &weighted, squares: &squares, eps };
        let product = |w: &[f64], rows| reference::normed_matvec(w, rows, &y, &nw, eps as f64);
        // gate/up, an odd row count (a workgroup's second row out of range).
        let rows = 37;
        let ((wg, wg64), (wu, wu64)) = (f16s(&mut rng, rows, cols), f16s(&mut rng, rows, cols));
        let out = m.upload_f32(&common::random(&mut rng, rows)).unwrap();
        t.matvec_gate_up_silu(&wg, &wu, pending, &out).unwrap();
        let what = format!("gate/up pending, {cols} cols at scale {scale}");
        let want = reference::silu_mul_of_bounded(&product(&wg64, rows), &product(&wu64, rows));
        assert_within_ev(&what, &out.read().unwrap(), &want);
        // q/k/v: 3 query heads and 1 KV head of 6, at position 2 of 4.
        let (d, qh, kvh, pos, max_seq) = (6, 3, 1, 2, 4);
        let ((wq, wq64), (wk, wk64), (wv, wv64)) =
            (f16s(&mut rng, qh * d, cols), f16s(&mut rng, kvh * d, cols), f16s(&mut rng, kvh * d, cols));
        let cache0 = common::random(&mut rng, kvh * max_seq * d);
        let q = m.empty(&[qh * d], DType::F32).unwrap();
        let (kc, vc) = (m.upload_f32(&cache0).unwrap(), m.upload_f32(&cache0).unwrap());
        t.matvec_qkv_rope_store((&wq, &wk, &wv), pending, &q, (&kc, &vc), d, pos, max_seq, base).unwrap();
        let mut want_q = product(&wq64, qh * d);
        let mut want_k = product(&wk64, kvh * d);
        let want_v = product(&wv64, kvh * d);
        reference::rope_of_bounded(&mut want_q, qh, d, pos, base as f64);
        reference::rope_of_bounded(&mut want_k, kvh, d, pos, base as f64);
        let what = format!("qkv pending, {cols} cols at scale {scale}");
        assert_within_ev(&format!("{what}: q"), &q.read().unwrap(), &want_q);
        for (part, cache, want) in [("k cache", &kc, &want_k), ("v cache", &vc, &want_v)] {
            let got = cache.read().unwrap();
            let stored: Vec<f32> = (0..kvh * d).map(|i| got[((i / d) * max_seq + pos) * d + i % d]).collect();
            assert_within_ev(&format!("{what}: {part} at the position"), &stored, want);
            let mut others = got.clone();
            let mut kept = cache0.clone();
            for i in 0..kvh * d {
                let at = ((i / d) * max_seq + pos) * d + i % d;
                (others[at], kept[at]) = (0.0, 0.0);
            }
            assert_bits(&format!("{what}: {part} elsewhere"), &others, &kept);
        }
    }
    // Bad requests, each refused before anything runs: the readers' sums of squares of another
    // length or dtype, an output that is one of the pending norm's tensors, a bad eps.
    let w = m.upload(&[0.5; 16], &[2, 8], DType::F16).unwrap();
    let x = m.upload_f32(&[1.0; 8]).unwrap();
    let (short, half) = (m.upload_f32(&[1.0; 4]).unwrap(), m.upload(&[1.0; 1], &[1], DType::F16).unwrap());
    let one = m.upload_f32(&[8.0]).unwrap();
    let a = m.upload_f32(&[3.0; 2]).unwrap();
    let pending = |squares, eps| crossgpu::tp::ProductInput::PendingNorm { weighted: &x, squares, eps };
    for (input, what) in [
        (pending(&short, eps), "4 sums of squares"),
        (pending(&half, eps), "f16 sums of squares"),
        (pending(&x, eps), "the weighted vector as its sums"),
        (pending(&one, f32::NAN), "eps NaN"),
        (pending(&one, -1.0), "eps -1"),
        (pending(&a, eps), "the output as the sums"),
    ] {
        assert!(t.matvec_gate_up_silu(&w, &w, input, &a).is_err(), "gate/up accepted {what}");
    }
    let a8 = m.upload_f32(&[3.0; 8]).unwrap();
    let w88 = m.upload(&[0.5; 64], &[8, 8], DType::F16).unwrap();
    let into_weighted = crossgpu::tp::ProductInput::PendingNorm { weighted: &a8, squares: &one, eps };
    assert!(matches!(t.matvec_gate_up_silu(&w88, &w88, into_weighted, &a8), Err(Error::InvalidArgument(_))));
    assert_eq!(a.read().unwrap(), vec![3.0; 2], "a refused call writes nothing");
    assert_eq!(a8.read().unwrap(), vec![3.0; 8]);
    // q/k/v with 8 query rows and 4 KV rows of heads of 2, caches of 2 positions; the same call
    // with the sums as q's output is refused as well.
    let w4 = m.upload(&[0.5; 32], &[4, 8], DType::F16).unwrap();
    let (q, kc, vc) = (
        m.upload_f32(&[7.0; 8]).unwrap(),
        m.upload_f32(&[7.0; 8]).unwrap(),
        m.upload_f32(&[7.0; 8]).unwrap(),
    );
    let q1 = m.upload_f32(&[7.0]).unwrap();
    let qkv =
        |input, q: &Tensor| t.matvec_qkv_rope_store((&w88, &w4, &w4), input, q, (&kc, &vc), 2, 0, 2, base);
    assert!(matches!(qkv(pending(&short, eps), &q), Err(Error::LengthMismatch { .. })));
    assert!(matches!(
        qkv(pending(&q1, eps), &q1),
        Err(Error::LengthMismatch { .. } | Error::InvalidArgument(_))
    ));
    assert!(matches!(
        qkv(pending(&kc, eps), &q),
        Err(Error::LengthMismatch { .. } | Error::InvalidArgument(_))
    ));
    qkv(pending(&one, eps), &q).unwrap();
    assert!(q.read().unwrap().iter().all(|&v| v != 7.0), "the accepted call writes q");
    for (what, t) in [("k cache", &kc), ("v cache", &vc)] {
        // [2 heads, 2 positions, 2]: position 0 stored, position 1 untouched.
        let got = t.read().unwrap();
        let at0 = [got[0], got[1], got[4], got[5]];
        assert!(at0.iter().all(|&v| v != 7.0), "{what}: position 0 stored: {got:?}");
        assert_eq!([got[2], got[3], got[6], got[7]], [7.0; 4], "{what}: position 1 untouched");
    }
    // The producer: f16 weights of a multiple of 8 columns only, every length as its weights
    // say, and its three outputs apart from each other and from its inputs.
    let y = m.upload_f32(&[2.0; 8]).unwrap();
    let (weighted, sums) = (m.upload_f32(&[5.0; 8]).unwrap(), m.upload_f32(&[6.0]).unwrap());
    let w32 = m.upload(&[0.5; 64], &[8, 8], DType::F32).unwrap();
    let w12 = m.upload(&[0.5; 96], &[8, 12], DType::F16).unwrap();
    let nw = m.upload_f32(&[1.5; 8]).unwrap();
    let produce = |w: &Tensor, x: &Tensor, y: &Tensor, nw: &Tensor, weighted: &Tensor, sums: &Tensor| {
        t.matvec_add_norm_pending(w, x, y, nw, weighted, sums)
    };
    for (r, what) in [
        (produce(&w32, &x, &y, &nw, &weighted, &sums), "f32 weights"),
        (produce(&w12, &x, &y, &nw, &weighted, &sums), "12 columns"),
        (produce(&w88, &short, &y, &nw, &weighted, &sums), "a short x"),
        (produce(&w88, &x, &short, &nw, &weighted, &sums), "a short stream"),
        (produce(&w88, &x, &y, &short, &weighted, &sums), "a short norm weight"),
        (produce(&w88, &x, &y, &nw, &short, &sums), "a short weighted vector"),
        (produce(&w88, &x, &y, &nw, &weighted, &half), "f16 sums"),
        (produce(&w88, &x, &y, &nw, &weighted, &x), "8 sums"),
        (produce(&w88, &x, &y, &nw, &y, &sums), "the stream as the weighted vector"),
        (produce(&w88, &x, &y, &y, &weighted, &sums), "the stream as the norm weight"),
        (produce(&w88, &y, &y, &nw, &weighted, &sums), "the stream as x"),
        (produce(&w88, &x, &y, &nw, &x, &sums), "x as the weighted vector"),
        (produce(&w88, &x, &y, &nw, &weighted, &one), "accepted"),
    ] {
        assert_eq!(r.is_ok(), what == "accepted", "add_norm_pending with {what}: {r:?}");
    }
    let want: Vec<f32> = vec![2.0 + 4.0; 8];
    assert_eq!(y.read().unwrap(), want, "the accepted call adds W x (8 · 0.5 · 1) once");
    assert_eq!(weighted.read().unwrap(), vec![6.0 * 1.5; 8]);
    assert_eq!(one.read().unwrap(), vec![8.0 * 36.0]);
    assert_eq!(sums.read().unwrap(), vec![6.0], "refused calls write nothing");
    common::assert_no_validation_errors();
}
