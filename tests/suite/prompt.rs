//! The prompt as a batch (`Decoder::prefill`) and its kernels:
//!
//! - the tiled products (`Member::matmul`, `matmul_quant`) over every storage against the f64
//!   product of the dequantized weights, at row and position counts that leave tiles partly
//!   empty (1, 5, 67, 130 positions; 1, 65, 130 rows), within `gamma(cols + 1) · Σ|w x|`: each
//!   output is one f32 sum over the columns in order of ggml's own f32 weights times x;
//! - the row kernels bit for bit against the decode kernels they batch (norms, RoPE, the KV
//!   store: the same operations in the same order), and causal attention against the f64
//!   reference at each row's position;
//! - the decoder: a prompt through `prefill` then its last token's step gives the logits of
//!   the prompt's steps one by one (one member, two in each all-reduce mode, three with an
//!   empty share), across a chunk boundary and from a position past zero, and then the same
//!   greedy tokens.
//!
//! SmolLM2 through `prefill` against the f64 reference: `gguf_model.rs` and `hf_model.rs`.

use crate::common::reference::{self, ErrorModel, Ev};
use crate::common::{self, assert_bits, assert_within_ev, serial};
use crate::quant_matvec::{cols, dequantized, random_blocks};
use crossgpu::tp::{AttentionShape, Decoder, DecoderConfig, PromptShape, SplitSpec, PROMPT_CHUNK_ON_UNITS};
use crossgpu::{Comm, CommOptions, DType, Error, Member, Mode, ModeRequest, QuantFormat, Tensor};
use rand::Rng;

const POSITIONS: [usize; 4] = [1, 5, 67, 130];
const ROWS: [usize; 3] = [1, 65, 130];

/// Runs the product over `positions` random rows of x into a y of stale values and checks
/// every position against `reference::matvec` of the exact weights `w`.
fn check_matmul(
    m: &Member,
    what: &str,
    w: &[f64],
    (rows, cols): (usize, usize),
    positions: usize,
    rng: &mut impl Rng,
    run: &dyn Fn(&Tensor, &Tensor, usize) -> crossgpu::Result<()>,
) -> f64 {
    let x = common::random(rng, positions * cols);
    let (xt, yt) = (m.upload_f32(&x).unwrap(), m.upload_f32(&common::random(rng, positions * rows)).unwrap());
    run(&xt, &yt, positions).unwrap();
    let got = yt.read().unwrap();
    let mut worst = 0.0f64;
    for t in 0..positions {
        let want = reference::matvec(
            w,
            rows,
            &Ev::from_f32(&x[t * cols..(t + 1) * cols]),
            ErrorModel::Bound { extra: 1 },
        );
        let at = format!("{what} [{rows}, {cols}] × {positions} positions, position {t}");
        worst = worst.max(assert_within_ev(&at, &got[t * rows..(t + 1) * rows], &want));
    }
    worst
}

#[test]
fn matmul_every_storage_against_f64() {
    let _s = serial();
    let g = common::logical(1);
    let m = g.member(0).unwrap();
    let mut rng = common::rng(301);
    for format in QuantFormat::ALL {
        let mut worst = 0.0f64;
        for rows in ROWS {
            for cols in cols(format).into_iter().take(3) {
                let bytes = random_blocks(&mut rng, format, rows, cols);
                let w = dequantized(format, &bytes, rows * cols);
                let q = m.upload_quant(format, rows, cols, &bytes).unwrap();
                for positions in POSITIONS {
                    let run = |x: &Tensor, y: &Tensor, n: usize| m.matmul_quant(&q, x, y, n);
                    worst = worst.max(check_matmul(
                        m,
                        format.name(),
                        &w,
                        (rows, cols),
                        positions,
                        &mut rng,
                        &run,
                    ));
                }
            }
        }
        eprintln!("matmul {format}: largest error / bound {worst:.3e}");
    }
    // f16 at any width (odd ones read element by element).
    let mut worst = 0.0f64;
    for rows in ROWS {
        for cols in [1, 37, 38, 576] {
            let w32 = common::random(&mut rng, rows * cols);
            let w: Vec<f64> = w32.iter().map(|&v| common::f16(v)).collect();
            let wt = m.upload(&w32, &[rows, cols], DType::F16).unwrap();
            for positions in POSITIONS {
                let run = |x: &Tensor, y: &Tensor, n: usize| m.matmul(&wt, x, y, n);
                worst = worst.max(check_matmul(m, "f16", &w, (rows, cols), positions, &mut rng, &run));
            }
        }
    }
    eprintln!("matmul f16: largest error / bound {worst:.3e}");
    common::assert_no_validation_errors();
}

/// `Member::matmul_cooperative` on a device with cooperative matrices (Mesa 26's lavapipe in
/// CI, tiles of 8; NVIDIA's tiles of 16): the whole tiles against the f64 product with x as the device
/// rounded it to f16 (itself within 2⁻¹¹ |x| of x), within twice the usual bound (the device
/// orders, and may truncate, the matrix unit's additions); the strips past them, and widths
/// that are no multiple of 16, against the product with x itself, as `Member::matmul`. Shapes
/// with tiles partly covering a workgroup's 64 × 64, a quarter's second tile missing, and strips
/// of rows, of positions and of both.
#[test]
fn matmul_cooperative_against_f64() {
    let _s = serial();
    let g = common::logical(1);
    let m = g.member(0).unwrap();
    if !m.cooperative_matrix() {
        common::skip(
            Some("cooperative_matrix"),
            &format!("{} has no cooperative matrices of f16 into f32", m.adapter().name),
        );
        return;
    }
    let mut rng = common::rng(307);
    let mut worst = 0.0f64;
    for (rows, cols, positions) in [
        (16, 16, 16),
        (64, 48, 64),
        (80, 576, 48),
        (130, 64, 67),
        (192, 32, 130),
        (65, 37, 20),
        (17, 16, 15),
        (8, 8, 8),
        (24, 40, 9),
    ] {
        let w32 = common::random(&mut rng, rows * cols);
        let w: Vec<f64> = w32.iter().map(|&v| common::f16(v)).collect();
        let wt = m.upload(&w32, &[rows, cols], DType::F16).unwrap();
        let x = common::random(&mut rng, positions * cols);
        let xt = m.upload_f32(&x).unwrap();
        let xh = m.empty(&[positions * cols], DType::F16).unwrap();
        m.convert_f32_to_f16(&xt, &xh).unwrap();
        let yt = m.upload_f32(&common::random(&mut rng, positions * rows)).unwrap();
        m.matmul_cooperative(&wt, &xt, &xh, &yt, positions).unwrap();
        let (got, x_hat) = (yt.read().unwrap(), xh.read().unwrap());
        for (i, (&a, &b)) in x.iter().zip(&x_hat).enumerate() {
            let err = (f64::from(a) - f64::from(b)).abs();
            assert!(
                err <= f64::from(a).abs() / 2048.0 + 2f64.powi(-25),
                "x[{i}] = {a} rounded to f16 as {b}"
            );
        }
        let unit = m.adapter().caps.cooperative_matrix_sides[0] as usize;
        let whole = cols % unit == 0;
        let (tile_rows, tile_positions) = (rows / unit * unit, positions / unit * unit);
        for t in 0..positions {
            let row = |v: &[f32]| Ev::from_f32(&v[t * cols..(t + 1) * cols]);
            let exact = reference::matvec(&w, rows, &row(&x), ErrorModel::Bound { extra: 1 });
            let rounded = reference::matvec(&w, rows, &row(&x_hat), ErrorModel::Bound { extra: 1 });
            let mut want = exact.clone();
            for r in 0..rows {
                if whole && t < tile_positions && r < tile_rows {
                    want.v[r] = rounded.v[r];
                    want.e[r] = 2.0 * rounded.e[r];
                }
            }
            let at = format!("matmul_cooperative [{rows}, {cols}] × {positions} positions, position {t}");
            worst = worst.max(assert_within_ev(&at, &got[t * rows..(t + 1) * rows], &want));
        }
    }
    eprintln!("matmul_cooperative: largest error / bound {worst:.3e}");
    // Misuse: x_half of another length, or in f32.
    let w = m.upload(&[0.5; 64], &[4, 16], DType::F16).unwrap();
    let x = m.upload_f32(&[1.0; 32]).unwrap();
    let y = m.upload_f32(&[2.0; 8]).unwrap();
    let before = m.stats().dispatches;
    let short = m.empty(&[16], DType::F16).unwrap();
    assert!(matches!(m.matmul_cooperative(&w, &x, &short, &y, 2), Err(Error::LengthMismatch { .. })));
    assert!(matches!(m.matmul_cooperative(&w, &x, &x, &y, 2), Err(Error::DtypeMismatch { .. })));
    assert_eq!(m.stats().dispatches, before, "a refused product records nothing");
    common::assert_no_validation_errors();
}

/// Without cooperative matrices, `matmul_cooperative` is refused by name before any work.
#[test]
fn matmul_cooperative_refused_without_matrix_units() {
    let _s = serial();
    let g = common::logical(1);
    let m = g.member(0).unwrap();
    if m.cooperative_matrix() {
        eprintln!(
            "SKIPPED: {} has cooperative matrices (the refusal is tested on Mesa 22.3's lavapipe)",
            m.adapter().name
        );
        return;
    }
    let w = m.upload(&[0.5; 64], &[4, 16], DType::F16).unwrap();
    let x = m.upload_f32(&[1.0; 32]).unwrap();
    let xh = m.empty(&[32], DType::F16).unwrap();
    let y = m.upload_f32(&[2.0; 8]).unwrap();
    let before = m.stats().dispatches;
    match m.matmul_cooperative(&w, &x, &xh, &y, 2) {
        Err(Error::Unsupported(why)) => assert!(why.contains("cooperative matrices"), "{why}"),
        other => panic!("matmul_cooperative without matrix units: {other:?}"),
    }
    assert_eq!(m.stats().dispatches, before, "a refused product records nothing");
    common::assert_no_validation_errors();
}

#[test]
fn matmul_no_columns_and_bad_shapes() {
    let _s = serial();
    let g = common::logical(1);
    let m = g.member(0).unwrap();
    // No columns: zeros over stale values (a member with an empty share of a row-parallel layer).
    let w = m.empty(&[3, 0], DType::F16).unwrap();
    let (x, y) = (m.empty(&[0], DType::F32).unwrap(), m.upload_f32(&[1.5; 6]).unwrap());
    m.matmul(&w, &x, &y, 2).unwrap();
    assert_bits("no columns", &y.read().unwrap(), &[0.0; 6]);
    let w = m.upload(&[0.5; 12], &[3, 4], DType::F16).unwrap();
    let x = m.upload_f32(&[1.0; 8]).unwrap();
    let y = m.upload_f32(&[2.0; 6]).unwrap();
    let before = m.stats().dispatches;
    let short = m.upload_f32(&[2.0; 5]).unwrap();
    assert!(matches!(m.matmul(&w, &x, &short, 2), Err(Error::LengthMismatch { .. })));
    assert!(matches!(m.matmul(&w, &x, &y, 3), Err(Error::LengthMismatch { .. })));
    assert!(matches!(m.matmul(&w, &x, &x, 2), Err(Error::LengthMismatch { .. } | Error::InvalidArgument(_))));
    let w32 = m.upload(&[0.5; 12], &[3, 4], DType::F32).unwrap();
    assert!(matches!(m.matmul(&w32, &x, &y, 2), Err(Error::DtypeMismatch { .. })));
    assert_eq!(m.stats().dispatches, before, "a refused product records nothing");
    m.matmul(&w, &x, &y, 2).unwrap();
    assert_bits("[3, 4] of 0.5 times ones", &y.read().unwrap(), &[2.0; 6]);
    common::assert_no_validation_errors();
}

#[test]
fn row_kernels_are_the_decode_kernels_bit_for_bit() {
    let _s = serial();
    let g = common::logical(1);
    let m = g.member(0).unwrap();
    let ops = m.transformer();
    let mut rng = common::rng(302);
    let (positions, first, max_seq) = (7, 3, 12);
    let shape = PromptShape { positions, first, max_seq };
    for n in [5, 576, 2100] {
        // rmsnorm_rows, without and with the residual add, row by row against rmsnorm and
        // add_rmsnorm.
        let (x, r, w) = (
            common::random(&mut rng, positions * n),
            common::random(&mut rng, positions * n),
            common::random(&mut rng, n),
        );
        let (xt, rt, wt) = (m.upload_f32(&x).unwrap(), m.upload_f32(&r).unwrap(), m.upload_f32(&w).unwrap());
        let yt = m.upload_f32(&common::random(&mut rng, positions * n)).unwrap();
        ops.rmsnorm_rows(&xt, None, &wt, &yt, positions, 1e-5).unwrap();
        let y_plain = yt.read().unwrap();
        ops.rmsnorm_rows(&xt, Some(&rt), &wt, &yt, positions, 1e-5).unwrap();
        let (y_added, x_added) = (yt.read().unwrap(), xt.read().unwrap());
        for t in 0..positions {
            let row = t * n..(t + 1) * n;
            let (xr, rr, yr) = (
                m.upload_f32(&x[row.clone()]).unwrap(),
                m.upload_f32(&r[row.clone()]).unwrap(),
                m.upload_f32(&vec![0.0; n]).unwrap(),
            );
            ops.rmsnorm(&xr, &wt, &yr, 1e-5).unwrap();
            assert_bits(&format!("rmsnorm_rows n={n} row {t}"), &y_plain[row.clone()], &yr.read().unwrap());
            ops.add_rmsnorm(&xr, &rr, &wt, &yr, 1e-5).unwrap();
            assert_bits(
                &format!("add: rmsnorm_rows n={n} row {t}"),
                &y_added[row.clone()],
                &yr.read().unwrap(),
            );
            assert_bits(&format!("add: x n={n} row {t}"), &x_added[row], &xr.read().unwrap());
        }
    }
    // rope_rows and kv_store_rows against rope and kv_store at each row's position.
    let (heads, d) = (3, 10);
    let row = heads * d;
    let (k, v) = (common::random(&mut rng, positions * row), common::random(&mut rng, positions * row));
    let (kt, vt) = (m.upload_f32(&k).unwrap(), m.upload_f32(&v).unwrap());
    let stale = common::random(&mut rng, row * max_seq);
    let (kc, vc) = (m.upload_f32(&stale).unwrap(), m.upload_f32(&stale).unwrap());
    ops.rope_rows(&kt, heads, d, shape, 10_000.0).unwrap();
    ops.kv_store_rows((&kt, &vt), (&kc, &vc), heads, d, shape).unwrap();
    let roped = kt.read().unwrap();
    let (kc2, vc2) = (m.upload_f32(&stale).unwrap(), m.upload_f32(&stale).unwrap());
    for t in 0..positions {
        let part = t * row..(t + 1) * row;
        let (one, vone) = (m.upload_f32(&k[part.clone()]).unwrap(), m.upload_f32(&v[part.clone()]).unwrap());
        ops.rope(&one, heads, d, first + t, 10_000.0).unwrap();
        assert_bits(&format!("rope_rows row {t}"), &roped[part], &one.read().unwrap());
        ops.kv_store(&one, &vone, &kc2, &vc2, heads, d, first + t, max_seq).unwrap();
    }
    assert_bits("kv_store_rows k cache", &kc.read().unwrap(), &kc2.read().unwrap());
    assert_bits("kv_store_rows v cache", &vc.read().unwrap(), &vc2.read().unwrap());
    // Past the cache: refused before anything is recorded.
    let before = m.stats().dispatches;
    let past = PromptShape { first: max_seq - positions + 1, ..shape };
    assert!(matches!(
        ops.kv_store_rows((&kt, &vt), (&kc, &vc), heads, d, past),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(ops.rope_rows(&kt, heads, d, past, 10_000.0), Err(Error::InvalidArgument(_))));
    assert_eq!(m.stats().dispatches, before);
    common::assert_no_validation_errors();
}

/// Causal attention of rows at positions first.. against the f64 reference at each position.
/// The online softmax rescales its running sums by `exp(m_old - m_new)` when a tile raises the
/// maximum: a second exponential's error on every weight, so the reference's exponential terms
/// are taken twice (the bound doubled).
#[test]
fn attention_prompt_against_f64() {
    let _s = serial();
    let g = common::logical(1);
    let m = g.member(0).unwrap();
    let mut rng = common::rng(303);
    // (q_heads, group, head_dim, max_seq, first, positions): one tile, keys across two and
    // three tiles of 256, heads of 1 and 256 elements, a prompt filling the cache.
    let cases = [
        (4, 2, 16, 40, 0, 40),
        (6, 3, 64, 600, 250, 20),
        (2, 1, 80, 530, 3, 520),
        (3, 3, 1, 9, 2, 5),
        (2, 2, 256, 8, 0, 8),
    ];
    for (q_heads, group, d, max_seq, first, positions) in cases {
        let kv = q_heads / group;
        let (kd, vd) =
            (common::random(&mut rng, kv * max_seq * d), common::scaled(&mut rng, kv * max_seq * d, 2.0));
        let (kc, vc) = (m.upload_f32(&kd).unwrap(), m.upload_f32(&vd).unwrap());
        let q = common::random(&mut rng, positions * q_heads * d);
        let qt = m.upload_f32(&q).unwrap();
        let out = m.upload_f32(&common::random(&mut rng, positions * q_heads * d)).unwrap();
        let shape = PromptShape { positions, first, max_seq };
        m.transformer().attention_prompt(&qt, (&kc, &vc), &out, q_heads, group, d, shape).unwrap();
        let got = out.read().unwrap();
        let (kr, vr) = (Ev::from_f32(&kd), Ev::from_f32(&vd));
        let row = q_heads * d;
        let mut worst = 0.0f64;
        for t in 0..positions {
            let s = AttentionShape { q_heads, group, head_dim: d, pos: first + t, max_seq };
            let mut want = reference::attention(
                &Ev::from_f32(&q[t * row..(t + 1) * row]),
                &kr,
                &vr,
                s,
                ErrorModel::BOUND,
            );
            want.e.iter_mut().for_each(|e| *e *= 2.0);
            let what = format!("attention_prompt heads {q_heads}/{group} d={d} row {t} at {}", first + t);
            worst = worst.max(assert_within_ev(&what, &got[t * row..(t + 1) * row], &want));
        }
        eprintln!("attention_prompt d={d}, {positions} rows from {first}: largest error / bound {worst:.3e}");
    }
    let t = |n: usize| m.upload_f32(&vec![0.5; n]).unwrap();
    let (q, c, o) = (t(2 * 2 * 300), t(2 * 4 * 300), t(2 * 2 * 300));
    let shape = PromptShape { positions: 2, first: 0, max_seq: 4 };
    assert!(matches!(
        m.transformer().attention_prompt(&q, (&c, &c), &o, 2, 1, 300, shape),
        Err(Error::Unsupported(_))
    ));
    common::assert_no_validation_errors();
}

fn config() -> DecoderConfig {
    DecoderConfig {
        hidden: 64,
        ffn: 192,
        layers: 2,
        q_heads: 4,
        kv_heads: 2,
        head_dim: 16,
        vocab: 300,
        max_seq: PROMPT_CHUNK_ON_UNITS + 40,
        ..DecoderConfig::small()
    }
}

/// The logits after `prompt` through `prefill` and the last token's step, beside those after
/// one step per token, from position `from` (reached by steps first); then `more` greedy
/// tokens from each. Returns both decoders' tokens.
fn prompt_both_ways(
    n: usize,
    mode: Option<Mode>,
    split: &SplitSpec,
    prompt: &[u32],
    from: usize,
) -> Option<(Vec<u32>, Vec<u32>)> {
    let cfg = config();
    let g = common::logical(n);
    let comm = || match mode {
        None => Ok(None),
        Some(mode) => {
            let opts = CommOptions { mode: ModeRequest::Forced(mode), ..CommOptions::from_env().unwrap() };
            match Comm::with_options(&g, opts) {
                Ok(c) => Ok(Some(c)),
                Err(Error::Unsupported(why)) if common::mode_refused_by_layout(mode, &why) => {
                    common::skip(common::requirement(mode), &format!("{mode} over {n} members: {why}"));
                    Err(())
                }
                Err(e) => panic!("{mode} over {n} members: {e}"),
            }
        }
    };
    let make = || comm().ok().map(|c| Decoder::with_comm(&g, cfg.clone(), split, c).unwrap());
    let (mut batch, mut steps) = (make()?, make()?);
    for d in [&mut batch, &mut steps] {
        for &t in &prompt[..from] {
            d.set_token(t).unwrap();
            d.step().unwrap();
        }
    }
    let (rest, last) = (&prompt[from..prompt.len() - 1], prompt[prompt.len() - 1]);
    batch.prefill(rest).unwrap();
    assert_eq!(batch.position(), prompt.len() - 1);
    for &t in rest {
        steps.set_token(t).unwrap();
        steps.step().unwrap();
    }
    for d in [&mut batch, &mut steps] {
        d.set_token(last).unwrap();
        d.step().unwrap();
    }
    let (a, b) = (batch.logits().unwrap(), steps.logits().unwrap());
    // Two f32 runs of the same model that add in different orders: the logits agree to a few
    // ULP of their scale per layer. Where the prompt's products run on matrix units, their
    // inputs are rounded to f16 first (2⁻¹¹ relative each): twice that, of the scale.
    let scale = b.iter().fold(0.0f32, |s, v| s.max(v.abs())) as f64;
    let units = std::env::var("CROSSGPU_MATRIX_UNITS").as_deref() != Ok("0")
        && (0..n).any(|i| g.member(i).unwrap().cooperative_matrix());
    let tolerance = if units { 2.0 / 2048.0 } else { 1e-4 };
    let what = format!("{n} member(s), {mode:?}, {split:?}, {} prompt tokens from {from}", prompt.len());
    for (i, (&x, &y)) in a.iter().zip(&b).enumerate() {
        assert!(
            ((x - y) as f64).abs() <= tolerance * scale,
            "{what}: logit {i}: {x} as a batch, {y} step by step (scale {scale})"
        );
    }
    let r = batch.residuals().unwrap();
    for (i, x) in r.iter().enumerate().skip(1) {
        assert_bits(&format!("{what}: member {i}'s residual"), x, &r[0]);
    }
    let next = reference::argmax(&a).unwrap() as u32;
    let tokens = |d: &mut Decoder| d.generate(next, 6, |_| {}).unwrap();
    let got = (tokens(&mut batch), tokens(&mut steps));
    common::assert_no_validation_errors();
    Some(got)
}

#[test]
fn prefill_gives_the_steps_logits_and_tokens() {
    let _s = serial();
    let mut rng = common::rng(304);
    let cfg = config();
    // Across a chunk boundary (a chunk and 9 tokens: 128 on the tiled kernels, 512 on matrix
    // units), and a short prompt after 5 steps.
    let chunk = {
        let g = common::logical(1);
        Decoder::new(&g, cfg.clone(), &SplitSpec::Even).unwrap().prompt_plan().unwrap().1
    };
    let long: Vec<u32> = (0..chunk + 10).map(|_| rng.random_range(0..cfg.vocab as u32)).collect();
    let short: Vec<u32> = (0..12).map(|_| rng.random_range(0..cfg.vocab as u32)).collect();
    let mut all = Vec::new();
    for (prompt, from) in [(&long, 0), (&short, 5)] {
        let (a, b) = prompt_both_ways(1, None, &SplitSpec::Even, prompt, from).unwrap();
        assert_eq!(a, b, "one member: greedy tokens after the prompt as a batch and step by step");
        all.push(a);
    }
    // Two members in every mode lavapipe runs, three with an empty share.
    for mode in [Mode::HostBridge, Mode::Generic, Mode::DevicePoll] {
        let Some((a, b)) = prompt_both_ways(2, Some(mode), &SplitSpec::Even, &short, 5) else { continue };
        assert_eq!(a, b, "two members, {mode:?}");
        assert_eq!(a, all[1], "two members, {mode:?}: the one member's tokens");
    }
    let split = SplitSpec::parse("1:0:2").unwrap();
    let (a, b) =
        prompt_both_ways(3, Some(Mode::HostBridge), &split, &long, 0).expect("HostBridge runs anywhere");
    assert_eq!(a, b, "three members 1:0:2");
    assert_eq!(a, all[0], "three members 1:0:2: the one member's tokens");
}

#[test]
fn prefill_refuses_before_any_work() {
    let _s = serial();
    let cfg = config();
    let g = common::logical(1);
    let mut d = Decoder::new(&g, cfg.clone(), &SplitSpec::Even).unwrap();
    let before = d.stats().dispatches;
    let bad = [1, 2, cfg.vocab as u32];
    assert!(matches!(d.prefill(&bad), Err(Error::IndexOutOfRange { .. })));
    let long = vec![1u32; cfg.max_seq + 1];
    assert!(matches!(d.prefill(&long), Err(Error::InvalidArgument(_))));
    assert_eq!(d.stats().dispatches, before, "nothing recorded");
    assert_eq!(d.position(), 0);
    d.prefill(&[]).unwrap();
    d.prefill(&vec![3u32; cfg.max_seq]).unwrap();
    assert_eq!(d.position(), cfg.max_seq);
    assert!(matches!(d.step(), Err(Error::InvalidArgument(_))), "the cache is full");
    let wide = DecoderConfig { head_dim: 300, q_heads: 2, kv_heads: 1, hidden: 64, ..cfg };
    let mut d = Decoder::new(&g, wide, &SplitSpec::Even).unwrap();
    assert!(d.prefill_unsupported().is_some());
    assert!(matches!(d.prefill(&[1, 2]), Err(Error::Unsupported(_))));
    common::assert_no_validation_errors();
}
