//! Every kernel of crossgpu against a CPU reference computed in f64, on random inputs (never
//! zeros), at sizes 0 (where the op accepts it), 1, an odd size, and one above 1 MiB of payload;
//! upload/read round trips; and a long chain of dependent operations with no read in between,
//! which exercises the stream's hazard-tracking barriers under synchronization validation.
//!
//! Tolerances come from the arithmetic, not from trial and error:
//! - an f32 add or multiply is correctly rounded (round to nearest even), so one element-wise op
//!   is off by at most `U * |exact|` with `U = 2^-24`, the unit roundoff of f32;
//! - a dot product of `n` f32 products (each product rounded once, `n - 1` additions in any order,
//!   fused or not) is off by at most `gamma(n) * sum_k |w_k x_k|` with
//!   `gamma(n) = n U / (1 - n U)` (Higham, Accuracy and Stability of Numerical Algorithms, 3.1),
//!   i.e. roughly `cols * 2^-24` relative to the sum of absolute products;
//! - copies, fills, round trips and f16 conversions must be exact.
//!
//! The f64 references of add and matvec are their CPU twins in `tests/common/reference.rs`.

use crate::common;

use crate::common::reference::{self, ErrorModel, Ev, U};
use crate::common::{serial, to_f16};
use crossgpu::{DType, Member, Tensor};

/// Odd, not a multiple of the 256-thread workgroup, and more than one workgroup's grid stride.
const ODD: usize = 1001;
/// f32 elements of a payload just above 1 MiB (and odd).
const BIG_F32: usize = 262_147;
/// f16 elements of a payload just above 1 MiB (and odd, so the last word is half padding).
const BIG_F16: usize = 524_309;
/// Sizes of the element-wise f32 tests.
const SIZES: [usize; 4] = [0, 1, ODD, BIG_F32];
/// Sizes of the f16 tests.
const SIZES_F16: [usize; 5] = [0, 1, 2, ODD, BIG_F16];

fn f16_bits_equal(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

/// Asserts `got[i] == want[i]` exactly (same bits; any NaN equals any NaN).
fn assert_exact(what: &str, got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    if let Some(i) = (0..got.len()).find(|&i| !f16_bits_equal(got[i], want[i])) {
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

fn upload(m: &Member, data: &[f32], dtype: DType) -> Tensor {
    m.upload(data, &[data.len()], dtype).unwrap()
}

#[test]
fn upload_read_round_trip_f32_is_bitwise() {
    let _s = serial();
    let g = common::logical(1);
    let m = g.member(0).unwrap();
    let mut rng = common::rng(1);
    for n in [0, 1, 2, 3, 5, 255, 256, 257, ODD, BIG_F32] {
        let data = common::random(&mut rng, n);
        let t = upload(m, &data, DType::F32);
        assert_eq!(t.len(), n);
        assert_eq!(t.shape(), &[n]);
        assert_eq!(t.dtype(), DType::F32);
        assert_exact(&format!("f32 round trip of {n}"), &t.read().unwrap(), &data);
    }
    // Values a kernel would never produce from random inputs travel unchanged too.
    let special = [
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        -0.0,
        f32::MIN_POSITIVE / 4.0, // subnormal
        f32::MAX,
        f32::MIN,
    ];
    let t = m.upload(&special, &[special.len()], DType::F32).unwrap();
    let got = t.read().unwrap();
    for (g, w) in got.iter().zip(&special) {
        assert_eq!(g.to_bits(), w.to_bits(), "special value {w:e} came back as {g:e}");
    }
    // A multi-dimensional shape only changes the shape.
    let data = common::random(&mut rng, 6 * 7);
    let t = m.upload(&data, &[6, 7], DType::F32).unwrap();
    assert_eq!(t.shape(), &[6, 7]);
    assert_eq!(t.len(), 42);
    assert_exact("f32 [6, 7] round trip", &t.read().unwrap(), &data);
    common::assert_no_validation_errors();
}

#[test]
fn upload_read_round_trip_f16_rounds_like_half() {
    let _s = serial();
    let g = common::logical(1);
    let m = g.member(0).unwrap();
    let mut rng = common::rng(2);
    for n in [0, 1, 2, 3, 4, 5, 511, 512, 513, ODD, BIG_F16] {
        // Spread over several binades so rounding happens at different exponents.
        let data: Vec<f32> = common::random(&mut rng, n)
            .into_iter()
            .enumerate()
            .map(|(i, v)| v * [1.0, 1000.0, 1e-3, 3.0e4][i % 4])
            .collect();
        let t = upload(m, &data, DType::F16);
        assert_eq!(t.len(), n);
        assert_eq!(t.dtype(), DType::F16);
        let want: Vec<f32> = data.iter().map(|&v| to_f16(v)).collect();
        assert_exact(&format!("f16 round trip of {n}"), &t.read().unwrap(), &want);
    }
    common::assert_no_validation_errors();
}

#[test]
fn fill_f32_and_f16() {
    let _s = serial();
    let g = common::logical(1);
    let m = g.member(0).unwrap();
    let mut rng = common::rng(3);
    for n in SIZES {
        let t = upload(m, &common::random(&mut rng, n), DType::F32);
        let v = common::random(&mut rng, 1)[0] * 123.0;
        m.fill(&t, v).unwrap();
        assert_exact(&format!("fill f32 {n}"), &t.read().unwrap(), &vec![v; n]);
        // `full` is empty + fill.
        let f = m.full(&[n], DType::F32, -v).unwrap();
        assert_exact(&format!("full f32 {n}"), &f.read().unwrap(), &vec![-v; n]);
    }
    for n in SIZES_F16 {
        let t = upload(m, &common::random(&mut rng, n), DType::F16);
        // A value that f16 must round (not exactly representable).
        let v = common::random(&mut rng, 1)[0] * 123.0 + 1e-4;
        m.fill(&t, v).unwrap();
        assert_exact(&format!("fill f16 {n}"), &t.read().unwrap(), &vec![to_f16(v); n]);
        let f = m.full(&[n], DType::F16, -v).unwrap();
        assert_exact(&format!("full f16 {n}"), &f.read().unwrap(), &vec![to_f16(-v); n]);
    }
    common::assert_no_validation_errors();
}

#[test]
fn copy_f32_and_f16() {
    let _s = serial();
    let g = common::logical(1);
    let m = g.member(0).unwrap();
    let mut rng = common::rng(4);
    for n in SIZES {
        let data = common::random(&mut rng, n);
        let src = upload(m, &data, DType::F32);
        let dst = upload(m, &common::random(&mut rng, n), DType::F32);
        m.copy(&src, &dst).unwrap();
        assert_exact(&format!("copy f32 {n}"), &dst.read().unwrap(), &data);
        assert_exact(&format!("copy f32 {n}: src"), &src.read().unwrap(), &data);
    }
    for n in SIZES_F16 {
        let data = common::random(&mut rng, n);
        let src = upload(m, &data, DType::F16);
        let dst = upload(m, &common::random(&mut rng, n), DType::F16);
        m.copy(&src, &dst).unwrap();
        let want: Vec<f32> = data.iter().map(|&v| to_f16(v)).collect();
        assert_exact(&format!("copy f16 {n}"), &dst.read().unwrap(), &want);
    }
    // Copy onto itself is a no-op.
    let data = common::random(&mut rng, ODD);
    let t = upload(m, &data, DType::F32);
    m.copy(&t, &t).unwrap();
    assert_exact("copy onto itself", &t.read().unwrap(), &data);
    common::assert_no_validation_errors();
}

#[test]
fn add_f32() {
    let _s = serial();
    let g = common::logical(1);
    let m = g.member(0).unwrap();
    let mut rng = common::rng(5);
    for n in SIZES {
        let a = common::random(&mut rng, n);
        let b = common::random(&mut rng, n);
        let dst = upload(m, &a, DType::F32);
        let src = upload(m, &b, DType::F32);
        m.add(&dst, &src).unwrap();
        let want = reference::add(&Ev::from_f32(&a), &Ev::from_f32(&b), ErrorModel::BOUND).v;
        // One correctly rounded f32 addition per element.
        common::assert_close(&format!("add {n}"), &dst.read().unwrap(), &want, U, 0.0);
        assert_exact(&format!("add {n}: src untouched"), &src.read().unwrap(), &b);
    }
    // dst and src the same tensor: t += t doubles it exactly.
    let a = common::random(&mut rng, ODD);
    let t = upload(m, &a, DType::F32);
    m.add(&t, &t).unwrap();
    let want: Vec<f32> = a.iter().map(|v| v * 2.0).collect();
    assert_exact("add onto itself", &t.read().unwrap(), &want);
    common::assert_no_validation_errors();
}

#[test]
fn scale_f32() {
    let _s = serial();
    let g = common::logical(1);
    let m = g.member(0).unwrap();
    let mut rng = common::rng(6);
    for n in SIZES {
        let a = common::random(&mut rng, n);
        let factor = common::random(&mut rng, 1)[0] * 7.0;
        let t = upload(m, &a, DType::F32);
        m.scale(&t, factor).unwrap();
        let want: Vec<f64> = a.iter().map(|&x| x as f64 * factor as f64).collect();
        // One correctly rounded f32 multiplication per element.
        common::assert_close(&format!("scale {n}"), &t.read().unwrap(), &want, U, 0.0);
    }
    common::assert_no_validation_errors();
}

#[test]
fn convert_f32_to_f16_rounds_like_half() {
    let _s = serial();
    let g = common::logical(1);
    let m = g.member(0).unwrap();
    let mut rng = common::rng(7);
    for n in SIZES {
        // Several binades, all inside the f16 range.
        let a: Vec<f32> = common::random(&mut rng, n)
            .into_iter()
            .enumerate()
            .map(|(i, v)| v * [1.0, 60_000.0, 1e-3, 0.1][i % 4])
            .collect();
        let src = upload(m, &a, DType::F32);
        let dst = upload(m, &common::random(&mut rng, n), DType::F16);
        m.convert_f32_to_f16(&src, &dst).unwrap();
        let want: Vec<f32> = a.iter().map(|&v| to_f16(v)).collect();
        assert_exact(&format!("convert {n}"), &dst.read().unwrap(), &want);
    }
    // Round-to-nearest-even ties, f16 subnormals, the underflow threshold, signed zero.
    let p = |e: i32| 2f32.powi(e);
    let edge = [
        1.0 + p(-11),       // tie between 1 and 1 + 2^-10: to even (1)
        1.0 + 3.0 * p(-11), // tie: to even (1 + 2^-9)
        -(1.0 + p(-11)),
        p(-14),       // smallest normal
        p(-15),       // subnormal
        3.0 * p(-20), // subnormal
        p(-24),       // smallest subnormal
        1.5 * p(-25), // rounds up to 2^-24
        p(-25),       // tie with 0: to even (0)
        p(-26),       // underflows to 0
        -0.0,
        65504.0,
        65519.0, // rounds down to 65504 (below the half-way point 65520)
        -65519.0,
    ];
    let src = m.upload_f32(&edge).unwrap();
    let dst = m.empty(&[edge.len()], DType::F16).unwrap();
    m.convert_f32_to_f16(&src, &dst).unwrap();
    let want: Vec<f32> = edge.iter().map(|&v| to_f16(v)).collect();
    assert_exact("convert edge cases", &dst.read().unwrap(), &want);
    common::assert_no_validation_errors();
}

#[test]
fn convert_f32_to_f16_saturates_beyond_65504() {
    let _s = serial();
    let g = common::logical(1);
    let m = g.member(0).unwrap();
    // half::f16::from_f32 gives ±inf for these; the GPU kernel saturates to ±65504 instead.
    let big = [
        65520.0,
        -65520.0,
        70_000.0,
        -70_000.0,
        1e6,
        -1e6,
        3.0e38,
        -3.0e38,
        f32::INFINITY,
        f32::NEG_INFINITY,
    ];
    // Interleave with in-range values so both halves of a word are exercised.
    let mut data = Vec::new();
    let mut want = Vec::new();
    for (i, &b) in big.iter().enumerate() {
        let small = 0.25 + i as f32;
        if i % 2 == 0 {
            data.extend([b, small]);
            want.extend([65504f32.copysign(b), small]);
        } else {
            data.extend([small, b]);
            want.extend([small, 65504f32.copysign(b)]);
        }
    }
    data.push(-1e9); // odd length: the last value sits alone in the low half
    want.push(-65504.0);
    let src = m.upload_f32(&data).unwrap();
    let dst = m.empty(&[data.len()], DType::F16).unwrap();
    m.convert_f32_to_f16(&src, &dst).unwrap();
    assert_exact("convert saturates", &dst.read().unwrap(), &want);
    common::assert_no_validation_errors();
}

#[test]
fn convert_f32_to_f16_keeps_nan() {
    let _s = serial();
    let g = common::logical(1);
    let m = g.member(0).unwrap();
    let data = [f32::NAN, 1.0, -f32::NAN, 2.0, 3.0, f32::NAN];
    let src = m.upload_f32(&data).unwrap();
    let dst = m.empty(&[data.len()], DType::F16).unwrap();
    m.convert_f32_to_f16(&src, &dst).unwrap();
    let got = dst.read().unwrap();
    common::assert_no_validation_errors();
    for (i, (&g, &d)) in got.iter().zip(&data).enumerate() {
        if d.is_nan() {
            assert!(
                g.is_nan(),
                "BUG (wgsl/convert_f16.wgsl): convert_f32_to_f16 turned the NaN at element {i} \
                 into the finite value {g}: clamp() of a NaN is undefined in SPIR-V/WGSL, and \
                 lavapipe returns -65504, so a NaN in a tensor silently becomes a large finite \
                 number in its f16 copy (and in an f16-wire all-reduce)"
            );
        } else {
            assert_eq!(g, d, "element {i}");
        }
    }
}

#[test]
fn add_f16_into_f32() {
    let _s = serial();
    let g = common::logical(1);
    let m = g.member(0).unwrap();
    let mut rng = common::rng(8);
    for n in SIZES {
        let a = common::random(&mut rng, n);
        let b: Vec<f32> = common::random(&mut rng, n).into_iter().map(|v| v * 100.0).collect();
        let dst = upload(m, &a, DType::F32);
        let src = upload(m, &b, DType::F16);
        m.add_f16_into_f32(&dst, &src).unwrap();
        // The f16 value widens exactly; then one correctly rounded f32 addition.
        let src_held = Ev::exact(b.iter().map(|&y| common::f16(y)).collect());
        let want = reference::add(&Ev::from_f32(&a), &src_held, ErrorModel::BOUND).v;
        common::assert_close(&format!("add_f16 {n}"), &dst.read().unwrap(), &want, U, 0.0);
    }
    common::assert_no_validation_errors();
}

/// More elements than 65535 workgroups of 256 threads cover: element-wise kernels are
/// dispatched with at most 65535 workgroups and loop with a grid stride, so threads handle
/// several elements each (and the last round is partial).
#[test]
fn elementwise_grid_stride_beyond_65535_workgroups() {
    let _s = serial();
    let g = common::logical(1);
    let m = g.member(0).unwrap();
    let n = 65_535 * 256 + 1001; // 64 MiB + 4 KiB of f32, below maxStorageBufferRange
    let mut rng = common::rng(12);
    let a = common::random(&mut rng, n);
    let b = common::random(&mut rng, n);
    let ta = upload(m, &a, DType::F32);
    let tb = upload(m, &b, DType::F32);
    let th = upload(m, &b, DType::F16);
    let tc = m.empty(&[n], DType::F32).unwrap();
    m.add(&ta, &tb).unwrap(); // a + b
    m.scale(&ta, -3.0).unwrap(); // -3 (a + b)
    m.add_f16_into_f32(&ta, &th).unwrap(); // -3 (a + b) + f16(b)
    m.copy(&ta, &tc).unwrap();
    m.fill(&ta, 0.75).unwrap();
    // Each step is one correctly rounded f32 op, so the f32 replay is exact.
    let want: Vec<f32> = a.iter().zip(&b).map(|(&x, &y)| (x + y) * -3.0 + to_f16(y)).collect();
    assert_exact("add, scale, add_f16, copy", &tc.read().unwrap(), &want);
    assert_exact("fill", &ta.read().unwrap(), &vec![0.75; n]);
    common::assert_no_validation_errors();
}

/// The weights as the GPU multiplies them: f16 ones widened exactly to f32 after rounding.
fn held_weights(w: &[f32], dtype: DType) -> Vec<f64> {
    w.iter()
        .map(|&v| match dtype {
            DType::F32 => v as f64,
            DType::F16 => common::f16(v),
            other => panic!("matvec weights are f32 or f16, not {other}"),
        })
        .collect()
}

/// Runs `y = W x` on the GPU for a random `rows x cols` W of `dtype` and checks every row
/// against the f64 reference within `gamma(cols) * sum_k |w_rk x_k|`. Returns y.
fn check_matvec(m: &Member, rows: usize, cols: usize, dtype: DType, seed: u64) -> Vec<f32> {
    check_matvec_with(m, None, rows, cols, dtype, seed)
}

/// `check_matvec` through a named f16 kernel (`Member::matvec_f16_with`), or `matvec`'s choice.
fn check_matvec_with(
    m: &Member,
    kernel: Option<&str>,
    rows: usize,
    cols: usize,
    dtype: DType,
    seed: u64,
) -> Vec<f32> {
    let mut rng = common::rng(seed);
    let w = common::random(&mut rng, rows * cols);
    let x = common::random(&mut rng, cols);
    let y0 = common::random(&mut rng, rows); // y is overwritten, not accumulated into
    let wt = m.upload(&w, &[rows, cols], dtype).unwrap();
    let xt = m.upload_f32(&x).unwrap();
    let yt = m.upload_f32(&y0).unwrap();
    match kernel {
        Some(k) => m.matvec_f16_with(k, &wt, &xt, &yt).unwrap(),
        None => m.matvec(&wt, &xt, &yt).unwrap(),
    }
    let got = yt.read().unwrap();
    assert_eq!(got.len(), rows);
    let held = held_weights(&w, dtype);
    // Within gamma(cols + 1)·Σ|w x|: the f64 reference's own error (cols·2^-53 relative to
    // Σ|w x|) is covered by the one extra rounding.
    let want = reference::matvec(&held, rows, &Ev::from_f32(&x), ErrorModel::Bound { extra: 1 });
    for (r, (&g, (sum, bound))) in got.iter().zip(want.pairs()).enumerate() {
        let err = (g as f64 - sum).abs();
        assert!(
            err <= bound,
            "matvec {dtype} {rows}x{cols}: row {r}: got {g} want {sum} (error {err:e} > bound {bound:e})"
        );
    }
    got
}

#[test]
fn matvec_f32_weights() {
    let _s = serial();
    let g = common::logical(1);
    let m = g.member(0).unwrap();
    for (i, &(rows, cols)) in [
        (1, 1),
        (1, ODD),
        (3, ODD),
        (ODD, 3),
        (3, 256),
        (2, 4096 + 7), // 16+ strided iterations per thread
        (257, 1021),   // 1 MiB+ of weights
    ]
    .iter()
    .enumerate()
    {
        check_matvec(m, rows, cols, DType::F32, 100 + i as u64);
    }
    common::assert_no_validation_errors();
}

#[test]
fn matvec_f16_weights_generic_kernel() {
    let _s = serial();
    let g = common::logical(1);
    let m = g.member(0).unwrap();
    // cols % 8 != 0: matvec_f16; odd cols make odd rows start in the high half of a word.
    for (i, &(rows, cols)) in [
        (1, 1),
        (1, ODD),
        (3, ODD),
        (ODD, 3),
        (4, 12),
        (2, 4096 + 7),
        (513, 1023), // 1 MiB+ of f16 weights
    ]
    .iter()
    .enumerate()
    {
        check_matvec(m, rows, cols, DType::F16, 200 + i as u64);
    }
    common::assert_no_validation_errors();
}

#[test]
fn matvec_f16_weights_vec8_kernel() {
    let _s = serial();
    let g = common::logical(1);
    let m = g.member(0).unwrap();
    // cols % 8 == 0: matvec's default for that (matvec_f16_vec8_rows4).
    for (i, &(rows, cols)) in [
        (1, 8),
        (3, 8),
        (3, 1000),
        (ODD, 16),
        (2, 2048),     // exactly 256 groups of 8: one per thread
        (2, 2048 + 8), // one group more: the strided loop's second round
        (3, 8 * 1001), // 4 rounds, not a multiple of 256 groups
        (513, 1024),   // 1 MiB+ of f16 weights
    ]
    .iter()
    .enumerate()
    {
        check_matvec(m, rows, cols, DType::F16, 300 + i as u64);
    }
    common::assert_no_validation_errors();
}

#[test]
fn matvec_f16_every_vec8_kernel() {
    // Every kernel `matvec_f16_with` offers for cols % 8 == 0 (1, 4 or 8 rows per workgroup,
    // eight also with four loads in flight):
    // row counts around their blocks (1, 3, 4, 5, odd, 9, 17), columns around their threads per
    // row (8 groups of 8: fewer than one per thread; 512 = one each for 64; 520, 8·1001, 8·129).
    let _s = serial();
    let g = common::logical(1);
    let m = g.member(0).unwrap();
    for (k, kernel) in crossgpu::MATVEC_F16_KERNELS.iter().enumerate() {
        for (i, &(rows, cols)) in [
            (1, 8),
            (3, 64),
            (4, 512),
            (5, 520),
            (ODD, 16),
            (7, 8 * 1001),
            (257, 1024),
            (9, 136),
            (17, 8 * 129),
        ]
        .iter()
        .enumerate()
        {
            check_matvec_with(m, Some(kernel), rows, cols, DType::F16, 600 + (10 * k + i) as u64);
        }
    }
    // Four loads in flight and several rows per thread change when a thread loads, not what it
    // adds: the bits of eight rows, with columns that end inside a batch of four (8·1001: 1001
    // groups of 8 over 32 threads) and just past one (8·129), and last blocks of every size
    // (7, 13, 17, 22 rows: 7, 5, 1 and 6 of eight).
    let shapes = [(7, 8 * 1001), (17, 8 * 129), (40, 8 * 2050), (13, 8 * 515), (22, 8 * 33)];
    for (i, &(rows, cols)) in shapes.iter().enumerate() {
        let seed = 700 + i as u64;
        let plain = check_matvec_with(m, Some("matvec_f16_vec8_rows8"), rows, cols, DType::F16, seed);
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        for other in [
            "matvec_f16_vec8_rows8_x4",
            "matvec_f16_vec8_rows8_t2",
            "matvec_f16_vec8_rows8_x4_t2",
            "matvec_f16_vec8_rows8_t4",
        ] {
            let got = check_matvec_with(m, Some(other), rows, cols, DType::F16, seed);
            assert_eq!(bits(&plain), bits(&got), "matvec_f16_vec8_rows8 and {other} at {rows}x{cols}");
        }
    }
    // Bad kernel names and shapes are errors.
    let w = m.upload(&[1.0; 24], &[2, 12], DType::F16).unwrap();
    let x = m.upload_f32(&[1.0; 12]).unwrap();
    let y = m.upload_f32(&[0.0; 2]).unwrap();
    assert!(m.matvec_f16_with("matvec_nope", &w, &x, &y).is_err());
    assert!(
        m.matvec_f16_with("matvec_f16_vec8_rows4", &w, &x, &y).is_err(),
        "12 columns are not a multiple of 8"
    );
    common::assert_no_validation_errors();
}

/// More than 65535 row blocks: one workgroup per row (or per 4 rows) no longer fits in x, so the
/// dispatch spills into y (`row_groups`) and each kernel computes its block as
/// `wid.y * nwg.x + wid.x`, with the workgroups past the last block doing nothing. Each kernel
/// is checked once: lavapipe needs seconds for dispatches of this size.
#[test]
fn matvec_more_than_65535_rows_uses_2d_dispatch() {
    let _s = serial();
    let g = common::logical(1);
    let m = g.member(0).unwrap();
    check_matvec(m, 70_000, 8, DType::F32, 400);
    check_matvec(m, 70_000, 3, DType::F16, 402); // matvec_f16, rows starting mid-word
    check_matvec_with(m, Some("matvec_f16_vec8"), 70_000, 8, DType::F16, 401);
    // matvec's kernels for cols % 8 == 0: four rows per workgroup below 4096 columns (65,538
    // blocks here), eight rows from there (65,538 blocks, through matvec_f16_with: a matrix of
    // that many rows and 4096 columns would be 4 GiB), with four loads in flight from 8192.
    assert_eq!(crossgpu::matvec_f16_kernel(8), "matvec_f16_vec8_rows4");
    assert_eq!(crossgpu::matvec_f16_kernel(4088), "matvec_f16_vec8_rows4");
    assert_eq!(crossgpu::matvec_f16_kernel(4096), "matvec_f16_vec8_rows8");
    assert_eq!(crossgpu::matvec_f16_kernel(8184), "matvec_f16_vec8_rows8");
    assert_eq!(crossgpu::matvec_f16_kernel(8192), "matvec_f16_vec8_rows8_x4_t2");
    assert_eq!(crossgpu::matvec_f16_kernel(12), "matvec_f16");
    check_matvec(m, 4 * 65_537 + 3, 8, DType::F16, 403);
    check_matvec_with(m, Some("matvec_f16_vec8_rows8"), 8 * 65_537 + 3, 8, DType::F16, 404);
    common::assert_no_validation_errors();
}

#[test]
fn matvec_is_deterministic() {
    let _s = serial();
    let g = common::logical(1);
    let m = g.member(0).unwrap();
    let mut rng = common::rng(9);
    let (rows, cols) = (37, 3001);
    let w = common::random(&mut rng, rows * cols);
    let x = m.upload_f32(&common::random(&mut rng, cols)).unwrap();
    for dtype in [DType::F32, DType::F16] {
        let wt = m.upload(&w, &[rows, cols], dtype).unwrap();
        let y1 = m.empty(&[rows], DType::F32).unwrap();
        let y2 = m.empty(&[rows], DType::F32).unwrap();
        m.matvec(&wt, &x, &y1).unwrap();
        m.matvec(&wt, &x, &y2).unwrap();
        assert_exact(&format!("matvec {dtype} twice"), &y1.read().unwrap(), &y2.read().unwrap());
    }
    common::assert_no_validation_errors();
}

#[test]
fn matvec_empty_shapes() {
    let _s = serial();
    let g = common::logical(1);
    let m = g.member(0).unwrap();
    let mut rng = common::rng(10);
    for dtype in [DType::F32, DType::F16] {
        // cols == 0: every row is an empty sum, y becomes 0.
        let w = m.empty(&[3, 0], dtype).unwrap();
        let x = m.empty(&[0], DType::F32).unwrap();
        let y = m.upload_f32(&common::random(&mut rng, 3)).unwrap();
        m.matvec(&w, &x, &y).unwrap();
        assert_exact(&format!("matvec {dtype} 3x0"), &y.read().unwrap(), &[0.0; 3]);
        // rows == 0: nothing to do.
        let w = m.upload(&[], &[0, 5], dtype).expect("a [0, 5] tensor from no data");
        let x = m.upload_f32(&common::random(&mut rng, 5)).unwrap();
        let y = m.empty(&[0], DType::F32).unwrap();
        m.matvec(&w, &x, &y).unwrap();
        assert!(y.read().unwrap().is_empty());
    }
    common::assert_no_validation_errors();
}

/// 50 rounds of dependent operations (read-after-write, write-after-read and write-after-write
/// on the same buffers, compute and transfer), with flushes but no read until the end. Every op
/// is one correctly rounded f32 operation per element (or an exact copy or f16 rounding), so
/// the CPU replays it in f32 and the GPU must agree bit for bit; a missing barrier would show
/// as a hazard from synchronization validation, and possibly as a wrong value.
#[test]
fn long_chain_without_reads_matches_cpu() {
    let _s = serial();
    let g = common::logical(1);
    let m = g.member(0).unwrap();
    let n = 100_003;
    let mut rng = common::rng(11);
    let mut a = common::random(&mut rng, n);
    let mut b = common::random(&mut rng, n);
    let mut c = vec![0f32; n];
    let mut h = vec![0f32; n]; // the f16 tensor's values, widened
    let ta = upload(m, &a, DType::F32);
    let tb = upload(m, &b, DType::F32);
    let tc = m.empty(&[n], DType::F32).unwrap();
    let th = m.empty(&[n], DType::F16).unwrap();
    let submits_before = m.stats().submits;
    for round in 0..50 {
        m.add(&ta, &tb).unwrap(); // a += b        (RAW on b, written last round)
        m.scale(&ta, 0.5).unwrap(); // a *= 0.5     (RAW + WAW on a)
        m.add(&tb, &ta).unwrap(); // b += a        (RAW on a, WAR on b)
        m.scale(&tb, -0.75).unwrap(); // b *= -0.75
        m.copy(&ta, &tc).unwrap(); // c = a
        m.add(&tc, &tb).unwrap(); // c += b
        for i in 0..n {
            a[i] += b[i];
            a[i] *= 0.5;
            b[i] += a[i];
            b[i] *= -0.75;
            c[i] = a[i] + b[i];
        }
        if round % 10 == 9 {
            m.convert_f32_to_f16(&tc, &th).unwrap(); // h = f16(c)
            m.add_f16_into_f32(&ta, &th).unwrap(); // a += h
            m.fill(&tc, round as f32).unwrap(); // c = round (WAR on c)
            for i in 0..n {
                h[i] = to_f16(c[i]);
                a[i] += h[i];
                c[i] = round as f32;
            }
        }
        if round == 24 {
            // A host upload (transfer write) into a buffer that kernels just read and wrote.
            b = common::random(&mut rng, n);
            m.write(&tb, &b).unwrap();
        }
        if round % 7 == 6 {
            // Barriers must also order work across submits on the queue.
            m.flush().unwrap();
        }
    }
    assert_eq!(m.stats().submits - submits_before, 7, "one submit per flush, none per op");
    assert_exact("chain a", &ta.read().unwrap(), &a);
    assert_exact("chain b", &tb.read().unwrap(), &b);
    assert_exact("chain c", &tc.read().unwrap(), &c);
    assert_exact("chain h", &th.read().unwrap(), &h);
    // Values stayed in a sane range, so the comparison above was meaningful.
    assert!(a.iter().chain(&b).all(|v| v.is_finite() && v.abs() < 1e3));
    assert!(a.iter().any(|&v| v != 0.0));
    common::assert_no_validation_errors();
}

/// `y += W x` (`matvec_accumulate`, a residual add in the product): bit for bit `matvec` then
/// `add` on a y of random values, for f32 weights and f16 at column counts that pick each kernel
/// `matvec` uses (generic, four rows, eight rows, eight rows with four loads in flight), and
/// within the f64 bound of the product plus one rounding of the addition; no columns add nothing;
/// y as x is refused before anything runs.
#[test]
fn matvec_accumulate_is_the_product_then_the_add() {
    let _s = serial();
    let g = common::logical(1);
    let m = g.member(0).unwrap();
    let mut rng = common::rng(801);
    for (dtype, rows, cols) in [
        (DType::F32, 5, ODD),
        (DType::F16, 9, 12),
        (DType::F16, ODD, 1000),
        (DType::F16, 17, 4096),
        (DType::F16, 13, 8200),
    ] {
        let what = format!("matvec_accumulate {dtype} {rows}x{cols} ({})", crossgpu::matvec_f16_kernel(cols));
        let w = common::random(&mut rng, rows * cols);
        let x = common::random(&mut rng, cols);
        let y0 = common::scaled(&mut rng, rows, 8.0);
        let (wt, xt) = (m.upload(&w, &[rows, cols], dtype).unwrap(), m.upload_f32(&x).unwrap());
        let yt = m.upload_f32(&y0).unwrap();
        m.matvec_accumulate(&wt, &xt, &yt).unwrap();
        let (product, sum) = (m.empty(&[rows], DType::F32).unwrap(), m.upload_f32(&y0).unwrap());
        m.matvec(&wt, &xt, &product).unwrap();
        m.add(&sum, &product).unwrap();
        let got = yt.read().unwrap();
        common::assert_bits(&what, &got, &sum.read().unwrap());
        let p = reference::matvec(
            &held_weights(&w, dtype),
            rows,
            &Ev::from_f32(&x),
            ErrorModel::Bound { extra: 1 },
        );
        common::assert_within_ev(&what, &got, &reference::add_to_bounded(&p, &y0));
    }
    // Square, so y as x has the right length and is refused for being x.
    for dtype in [DType::F32, DType::F16] {
        let (wt, xt) = (m.upload(&[0.5; 64], &[8, 8], dtype).unwrap(), m.upload_f32(&[1.5; 8]).unwrap());
        assert!(
            matches!(m.matvec_accumulate(&wt, &xt, &xt), Err(crossgpu::Error::InvalidArgument(_))),
            "{dtype}: y as x"
        );
        assert_eq!(xt.read().unwrap(), vec![1.5; 8], "{dtype}: a refused call leaves x");
    }
    let (w0, x0) = (m.upload(&[], &[3, 0], DType::F16).unwrap(), m.upload_f32(&[]).unwrap());
    let y = m.upload_f32(&[2.5; 3]).unwrap();
    m.matvec_accumulate(&w0, &x0, &y).unwrap();
    assert_eq!(y.read().unwrap(), vec![2.5; 3], "no columns add nothing");
    common::assert_no_validation_errors();
}
