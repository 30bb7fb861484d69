//! The quantized matrix–vector kernels (`Member::matvec_quant`) against their CPU twin: the
//! weights dequantized by `model::quant::dequantize` (ggml's `dequantize_row_*`, the exact f32
//! values), then `reference::matvec` in f64.
//!
//! Inputs, never zeros: raw blocks of random bytes (every quant value, nibble and sign; f16
//! scales and mins of random sign over 2^-8 .. 2^5) and weights that `quantize_reference`
//! made from random floats (Q8_0, Q4_0, Q4_1: the formats with a reference quantizer); shapes
//! with 1, odd and prime row counts (not a multiple of a workgroup's two rows, and one past
//! 65535 workgroups) and columns of one block, three blocks, and model widths (576, 1536, 4128
//! = 129 blocks; 2304 and 4352 = 9 and 17 super-blocks: odd, so Q8_0, Q4_0 and Q6_K rows
//! alternate between word-aligned and half-word-aligned starts).
//!
//! The bound, per row: `gamma(cols + 1) · Σ_k |w_k x_k|` (`reference::matvec` with one extra
//! rounding for the f64 reference's own). Why it holds: each kernel multiplies ggml's own f32
//! weight by x — where it factors a block's scale out (`d · Σ q_k x_k` for Q8_0 and Q4_0), the
//! factoring is exact, since `q · d` is exact in f32 (at most 8 + 11 significant bits) — and
//! adds the products in some tree. A sum computed by any tree is within
//! `gamma(h) · Σ|terms|` of the exact sum, `h` the longest chain of roundings a term goes
//! through (Higham, *Accuracy and Stability*, §4.2). Here a term is rounded once as a product,
//! at most 31 times inside its block, once by the scale, and at most `blocks - 1` times while
//! the block sums meet (in an invocation's running sum, then the workgroup's tree):
//! `h <= 33 + cols/32 - 1 <= cols` for `cols >= 32`. Q4_1 forms `q · d + m` per element first
//! (exactly ggml's f32 weight, fused or not, since `q · d` is exact) and then is a plain
//! `cols`-term dot product. Q4_K likewise forms `(d·sc)·q - dmin·m` per element (`d·sc`,
//! `dmin·m` and `(d·sc)·q` exact). Q6_K factors `d·scale` out of each group of 16 (exact: at
//! most 11 + 8 + 6 significant bits): `h <= 1 + 15 + 1 + cols/16 - 1 <= cols`.
//!
//! That the bound can fail: `wrong_element_order_exceeds_the_bound` shows that interleaving the
//! nibbles (elements 2j, 2j + 1 from qs[j]) or taking Q8_0's bytes one place off moves nearly
//! every row past it.

use crate::common;

use crate::common::reference::{self, ErrorModel, Ev};
use crate::common::serial;
use crossgpu::model::quant::{dequantize, quantize_reference, GgmlType};
use crossgpu::{DType, Error, Member, QuantFormat, Tensor};
use rand::Rng;

const ROWS: [usize; 6] = [1, 3, 7, 97, 577, 1000];

/// Columns: one block, three, model widths, and an odd number of blocks past 4096 (k-quants:
/// past 8192 too, five 64-element units for some of a wide kernel's 32 lanes).
pub(crate) fn cols(format: QuantFormat) -> [usize; 5] {
    match format.block_elems() {
        8 => [8, 24, 576, 1544, 4128],
        32 => [32, 96, 576, 1536, 4128],
        _ => [256, 768, 1536, 4352, 8448],
    }
}

/// The ggml type whose blocks `format` reads.
fn ggml(format: QuantFormat) -> GgmlType {
    (0..64).filter_map(GgmlType::from_id).find(|t| t.quant_format() == Some(format)).unwrap()
}

/// A random finite, normal f16 of random sign, magnitude in 2^-8 .. 2^5 (mixed binades).
pub(crate) fn random_f16(rng: &mut impl Rng) -> [u8; 2] {
    let sign: u16 = rng.random_range(0..2);
    let exp: u16 = rng.random_range(15 - 8..15 + 5);
    let mant: u16 = rng.random_range(0..1024);
    ((sign << 15) | (exp << 10) | mant).to_le_bytes()
}

/// A random finite, normal bf16 of random sign, magnitude in 2^-8 .. 2^5, every mantissa bit.
fn random_bf16(rng: &mut impl Rng) -> [u8; 2] {
    let sign: u16 = rng.random_range(0..2);
    let exp: u16 = rng.random_range(127 - 8..127 + 5);
    let mant: u16 = rng.random_range(0..128);
    ((sign << 15) | (exp << 7) | mant).to_le_bytes()
}

/// `rows` rows of `cols` elements of random blocks: random bytes (every quant, sub-block scale
/// and min value), the f16 fields (scales, mins) random finite normals; bf16 elements random
/// finite normals.
pub(crate) fn random_blocks(rng: &mut impl Rng, format: QuantFormat, rows: usize, cols: usize) -> Vec<u8> {
    let halves: &[usize] = match format {
        QuantFormat::Q8_0 | QuantFormat::Q4_0 => &[0],
        QuantFormat::Q4_1 | QuantFormat::Q4_K => &[0, 2],
        QuantFormat::Q6_K => &[208],
        QuantFormat::BF16 => return (0..rows * cols).flat_map(|_| random_bf16(rng)).collect(),
    };
    let blocks = rows * cols / format.block_elems();
    let mut out = Vec::with_capacity(blocks * format.block_bytes());
    for _ in 0..blocks {
        let start = out.len();
        out.extend((0..format.block_bytes()).map(|_| rng.random::<u8>()));
        for &at in halves {
            out[start + at..start + at + 2].copy_from_slice(&random_f16(rng));
        }
    }
    out
}

/// The exact f32 weights as ggml dequantizes them, widened to f64.
pub(crate) fn dequantized(format: QuantFormat, bytes: &[u8], elems: usize) -> Vec<f64> {
    let mut w = vec![0.0f32; elems];
    dequantize(ggml(format), bytes, &mut w).unwrap();
    assert!(w.iter().all(|v| v.is_finite()), "{format}: non-finite weight");
    reference::f64s(&w)
}

/// The CPU twin: y and its bound (see the module comment).
fn twin(format: QuantFormat, bytes: &[u8], rows: usize, x: &[f32]) -> Ev {
    let w = dequantized(format, bytes, rows * x.len());
    reference::matvec(&w, rows, &Ev::from_f32(x), ErrorModel::Bound { extra: 1 })
}

/// Uploads `bytes` as a `[rows, cols]` matrix, runs `matvec_quant` with a random x into a y of
/// random values, and checks every row against the twin. Returns the largest error / bound.
fn check(m: &Member, format: QuantFormat, bytes: &[u8], rows: usize, cols: usize, seed: u64) -> f64 {
    let mut rng = common::rng(seed);
    let x = common::random(&mut rng, cols);
    let w = m.upload_quant(format, rows, cols, bytes).unwrap();
    let (xt, yt) = (m.upload_f32(&x).unwrap(), m.upload_f32(&common::random(&mut rng, rows)).unwrap());
    let want = twin(format, bytes, rows, &x);
    // Every kernel of the format (the one in use first), each on a y of stale values.
    let mut worst = 0.0f64;
    for kernel in format.kernel_names() {
        m.write(&yt, &common::random(&mut rng, rows)).unwrap();
        m.matvec_quant_with(kernel, &w, &xt, &yt).unwrap();
        let what = format!("{kernel} [{rows}, {cols}]");
        worst = worst.max(common::assert_within_ev(&what, &yt.read().unwrap(), &want));
    }
    worst
}

fn random_blocks_every_shape(format: QuantFormat, seed: u64) {
    let _s = serial();
    let g = common::logical(1);
    let m = g.member(0).unwrap();
    let mut rng = common::rng(seed);
    let mut worst = 0.0f64;
    for rows in ROWS {
        for cols in cols(format) {
            let bytes = random_blocks(&mut rng, format, rows, cols);
            worst = worst.max(check(m, format, &bytes, rows, cols, rng.random()));
        }
    }
    eprintln!("{format}, random blocks: largest error / bound {worst:.3e}");
    common::assert_no_validation_errors();
}

#[test]
fn q8_0_random_blocks() {
    random_blocks_every_shape(QuantFormat::Q8_0, 1);
}

#[test]
fn q4_0_random_blocks() {
    random_blocks_every_shape(QuantFormat::Q4_0, 2);
}

#[test]
fn q4_1_random_blocks() {
    random_blocks_every_shape(QuantFormat::Q4_1, 3);
}

#[test]
fn q4_k_random_blocks() {
    random_blocks_every_shape(QuantFormat::Q4_K, 14);
}

#[test]
fn q6_k_random_blocks() {
    random_blocks_every_shape(QuantFormat::Q6_K, 15);
}

#[test]
fn bf16_random_values() {
    random_blocks_every_shape(QuantFormat::BF16, 16);
}

/// The formats `quantize_reference` writes (ggml's reference quantizers; the k-quants have
/// none here, so they are tested on random blocks only).
const QUANTIZABLE: [QuantFormat; 3] = [QuantFormat::Q8_0, QuantFormat::Q4_0, QuantFormat::Q4_1];

#[test]
fn weights_from_quantize_reference() {
    let _s = serial();
    let g = common::logical(1);
    let m = g.member(0).unwrap();
    let mut rng = common::rng(4);
    for format in QUANTIZABLE {
        for (rows, cols, scale) in
            [(1, 32, 1.0), (7, 96, 30.0), (97, 576, 1e-3), (577, 1536, 1.0), (3, 4128, 4.0)]
        {
            let values = common::scaled(&mut rng, rows * cols, scale);
            let bytes = quantize_reference(ggml(format), &values).unwrap();
            check(m, format, &bytes, rows, cols, rng.random());
        }
    }
    common::assert_no_validation_errors();
}

/// The kernel `matvec_quant` takes follows the device: for Q8_0, Q4_0 and Q4_1 the
/// 256-invocation kernels on a GPU, the whole-block 64-invocation ones on a CPU device (about
/// three times faster on lavapipe); the k-quants' two-row kernels and BF16's only kernel on
/// both. On whatever device the suite runs, the product is bitwise the kernel named for its
/// type, and not the other type's kernel where that adds in another order.
#[test]
fn the_kernel_in_use_follows_the_device_type() {
    use crossgpu::DeviceType;
    for format in QuantFormat::ALL {
        let gpu = format.kernel_name(DeviceType::Discrete);
        let cpu = format.kernel_name(DeviceType::Cpu);
        assert_eq!(gpu, format.kernel_names()[0], "{format}: a GPU takes the first kernel");
        assert!(format.kernel_names().contains(&cpu), "{format}: {cpu} is one of its kernels");
        let wide = matches!(format, QuantFormat::Q8_0 | QuantFormat::Q4_0 | QuantFormat::Q4_1);
        assert_eq!(gpu.ends_with("_wide"), wide, "{format}: {gpu} on a GPU");
        assert_eq!(gpu == cpu, !wide, "{format}: {gpu} on a GPU, {cpu} on a CPU device");
    }
    let _s = serial();
    let g = common::logical(1);
    let m = g.member(0).unwrap();
    let here = m.adapter().device_type;
    let other = if here == DeviceType::Cpu { DeviceType::Discrete } else { DeviceType::Cpu };
    let mut rng = common::rng(21);
    // 8192 columns: 1024 quarter blocks a row, sixteen for each of the wide kernels' 64 lanes.
    let (rows, cols) = (37, 8192);
    for format in QuantFormat::ALL.into_iter().filter(|f| *f != QuantFormat::BF16) {
        let bytes = random_blocks(&mut rng, format, rows, cols);
        let w = m.upload_quant(format, rows, cols, &bytes).unwrap();
        let x = m.upload_f32(&common::random(&mut rng, cols)).unwrap();
        let y = m.upload_f32(&common::random(&mut rng, rows)).unwrap();
        let bits = |y: &Tensor| y.read().unwrap().iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        m.matvec_quant(&w, &x, &y).unwrap();
        let used = bits(&y);
        m.matvec_quant_with(format.kernel_name(here), &w, &x, &y).unwrap();
        assert_eq!(used, bits(&y), "{format}: matvec_quant on a {here:?} device is its kernel");
        if format.kernel_name(other) != format.kernel_name(here) {
            m.matvec_quant_with(format.kernel_name(other), &w, &x, &y).unwrap();
            assert_ne!(used, bits(&y), "{format}: the {other:?} kernel adds in another order");
        }
    }
    common::assert_no_validation_errors();
}

#[test]
fn several_rounds_on_the_same_tensors() {
    let _s = serial();
    let g = common::logical(1);
    let m = g.member(0).unwrap();
    let mut rng = common::rng(5);
    let (rows, cols) = (97, 1536);
    for format in QuantFormat::ALL {
        let bytes = random_blocks(&mut rng, format, rows, cols);
        let w = m.upload_quant(format, rows, cols, &bytes).unwrap();
        let xt = m.empty(&[cols], DType::F32).unwrap();
        let yt = m.empty(&[rows], DType::F32).unwrap();
        for round in 0..4 {
            let x = common::random(&mut rng, cols);
            m.write(&xt, &x).unwrap();
            m.matvec_quant(&w, &xt, &yt).unwrap();
            let got = yt.read().unwrap();
            common::assert_within_ev(
                &format!("{format} round {round}"),
                &got,
                &twin(format, &bytes, rows, &x),
            );
            // The same inputs again give the same bits (a fixed order of additions).
            m.matvec_quant(&w, &xt, &yt).unwrap();
            common::assert_bits(&format!("{format} round {round}, again"), &yt.read().unwrap(), &got);
        }
    }
    common::assert_no_validation_errors();
}

#[test]
fn rows_past_65535_workgroups_spill_into_the_grid() {
    let _s = serial();
    let g = common::logical(1);
    let m = g.member(0).unwrap();
    let mut rng = common::rng(6);
    for format in QuantFormat::ALL {
        // Past 65535 workgroups for every kernel of the format: 524_291 rows are 131_073
        // workgroups of 4 rows (and more of 2); the k-quants' kernels take 2 rows, so
        // 131_075 rows (65_538 workgroups) spill theirs.
        let rows = if format.block_elems() <= 32 { 524_291 } else { 131_075 };
        let cols = format.block_elems();
        let bytes = random_blocks(&mut rng, format, rows, cols);
        check(m, format, &bytes, rows, cols, rng.random());
    }
    common::assert_no_validation_errors();
}

#[test]
fn at_an_offset_only_its_rows_change() {
    let _s = serial();
    let g = common::logical(1);
    let m = g.member(0).unwrap();
    let mut rng = common::rng(7);
    let rows = 7;
    for format in QuantFormat::ALL {
        let cols = 3 * format.block_elems();
        let bytes = random_blocks(&mut rng, format, rows, cols);
        let w = m.upload_quant(format, rows, cols, &bytes).unwrap();
        let x = common::random(&mut rng, cols);
        let xt = m.upload_f32(&x).unwrap();
        let y0 = common::random(&mut rng, rows + 10);
        let yt = m.upload_f32(&y0).unwrap();
        m.matvec_quant_at(&w, &xt, &yt, 5).unwrap();
        let got = yt.read().unwrap();
        common::assert_bits("y before the offset", &got[..5], &y0[..5]);
        common::assert_bits("y after the rows", &got[5 + rows..], &y0[5 + rows..]);
        common::assert_within_ev(
            &format!("{format} at 5"),
            &got[5..5 + rows],
            &twin(format, &bytes, rows, &x),
        );
        // Ending exactly at y's end is allowed.
        m.matvec_quant_at(&w, &xt, &yt, 10).unwrap();
        let got = yt.read().unwrap();
        common::assert_within_ev(&format!("{format} at 10"), &got[10..], &twin(format, &bytes, rows, &x));
    }
    common::assert_no_validation_errors();
}

#[test]
fn each_member_its_own_matrix() {
    let _s = serial();
    let g = common::logical(3);
    let mut rng = common::rng(8);
    let (rows, cols) = (577, 768);
    let mut runs = Vec::new();
    for (i, m) in g.members().iter().enumerate() {
        let format = [QuantFormat::Q4_0, QuantFormat::Q4_K, QuantFormat::Q6_K][i];
        let bytes = random_blocks(&mut rng, format, rows, cols);
        let x = common::random(&mut rng, cols);
        let w = m.upload_quant(format, rows, cols, &bytes).unwrap();
        assert_eq!(w.member_index(), i);
        let (xt, yt) = (m.upload_f32(&x).unwrap(), m.empty(&[rows], DType::F32).unwrap());
        m.matvec_quant(&w, &xt, &yt).unwrap();
        runs.push((format, bytes, x, w, xt, yt));
    }
    // Every member's work is recorded before any is read.
    for (i, (format, bytes, x, _, _, yt)) in runs.iter().enumerate() {
        let what = format!("member {i}: {format}");
        common::assert_within_ev(&what, &yt.read().unwrap(), &twin(*format, bytes, rows, x));
    }
    common::assert_no_validation_errors();
}

#[test]
fn no_rows_or_no_columns() {
    let _s = serial();
    let g = common::logical(1);
    let m = g.member(0).unwrap();
    let mut rng = common::rng(9);
    for format in QuantFormat::ALL {
        // No columns: y = 0.
        let w = m.upload_quant(format, 5, 0, &[]).unwrap();
        let (xt, yt) =
            (m.empty(&[0], DType::F32).unwrap(), m.upload_f32(&common::random(&mut rng, 5)).unwrap());
        m.matvec_quant(&w, &xt, &yt).unwrap();
        common::assert_bits("no columns", &yt.read().unwrap(), &[0.0; 5]);
        // No rows: nothing to do.
        let cols = 2 * format.block_elems();
        let w = m.upload_quant(format, 0, cols, &[]).unwrap();
        let (xt, yt) =
            (m.upload_f32(&common::random(&mut rng, cols)).unwrap(), m.empty(&[0], DType::F32).unwrap());
        m.matvec_quant(&w, &xt, &yt).unwrap();
        assert!(yt.read().unwrap().is_empty());
    }
    common::assert_no_validation_errors();
}

#[test]
fn the_matrix_holds_the_bytes_as_given() {
    let _s = serial();
    let g = common::logical(1);
    let m = g.member(0).unwrap();
    let mut rng = common::rng(10);
    for format in QuantFormat::ALL {
        for (rows, blocks) in [(1, 1), (3, 3), (2, 2), (1, 3)] {
            let cols = blocks * format.block_elems();
            let bytes = random_blocks(&mut rng, format, rows, cols);
            let w = m.upload_quant(format, rows, cols, &bytes).unwrap();
            assert_eq!((w.format(), w.rows(), w.cols(), w.bytes()), (format, rows, cols, bytes.len()));
            assert_eq!(w.tensor().dtype(), DType::U32);
            let mut padded = bytes.clone();
            padded.resize(bytes.len().div_ceil(4) * 4, 0);
            let words: Vec<u32> =
                padded.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
            assert_eq!(w.tensor().read_u32().unwrap(), words, "{format} [{rows}, {cols}]: the words held");
        }
    }
    common::assert_no_validation_errors();
}

#[test]
fn formats_match_ggml() {
    for format in QuantFormat::ALL {
        let t = ggml(format);
        assert_eq!(t.name(), format.name());
        // BF16's kernel takes rows in blocks of 8 of ggml's one-element blocks.
        let group = format.block_elems() / t.block_elems() as usize;
        assert_eq!(group, if format == QuantFormat::BF16 { 8 } else { 1 }, "{format}");
        assert_eq!(group * t.block_bytes() as usize, format.block_bytes(), "{format}");
        for cols in [0usize, 1, 7, 8, 31, 32, 96, 4128, 4130] {
            let kernel_rows = cols.is_multiple_of(format.block_elems());
            assert_eq!(
                t.row_bytes(cols as u64).map(|b| b as usize).filter(|_| kernel_rows),
                format.row_bytes(cols),
                "{format} {cols}"
            );
        }
    }
    // A type with no quantized kernel has no format.
    for t in [GgmlType::F32, GgmlType::F16, GgmlType::Q5_0, GgmlType::Q8_1] {
        assert_eq!(t.quant_format(), None, "{t}");
    }
}

/// Nothing the calls since `before` submits was recorded: a flush submits nothing.
fn nothing_recorded(m: &Member, before: u64) {
    m.flush().unwrap();
    assert_eq!(m.stats().submits, before, "a refused call recorded work into {m:?}'s stream");
}

#[test]
fn upload_refuses_bad_shapes_and_lengths() {
    let _s = serial();
    let g = common::logical(1);
    let m = g.member(0).unwrap();
    let mut rng = common::rng(11);
    m.synchronize().unwrap();
    let before = m.stats().submits;
    for format in QuantFormat::ALL {
        let be = format.block_elems();
        let bytes = random_blocks(&mut rng, format, 3, 2 * be);
        let n = bytes.len();
        // Columns that are not a whole number of blocks.
        for cols in [1, 31, 33, 48, 4130, be + be / 2].into_iter().filter(|c| !c.is_multiple_of(be)) {
            match m.upload_quant(format, 3, cols, &bytes) {
                Err(Error::InvalidArgument(msg)) => {
                    assert!(msg.contains("whole number") && msg.contains(format.name()), "{msg}")
                }
                r => panic!("{format} with {cols} columns: {r:?}"),
            }
        }
        // Too few or too many bytes for the shape.
        for (rows, cols, got) in
            [(3, 2 * be, n - 1), (3, 2 * be, n - format.block_bytes()), (2, 2 * be, n), (3, be, n)]
        {
            let r = m.upload_quant(format, rows, cols, &bytes[..got]);
            let want = rows * format.row_bytes(cols).unwrap();
            assert!(
                matches!(&r, Err(Error::LengthMismatch { expected, got: g, .. }) if *expected == want && *g == got),
                "{format} [{rows}, {cols}] from {got} bytes: {r:?}"
            );
        }
        // Shapes the kernels cannot index.
        let huge = crossgpu::MAX_ELEMENTS + 1;
        assert!(matches!(m.upload_quant(format, huge, 0, &[]), Err(Error::Unsupported(_))), "{huge} rows");
        let wide = huge.next_multiple_of(format.block_elems());
        assert!(matches!(m.upload_quant(format, 0, wide, &[]), Err(Error::Unsupported(_))), "{wide} cols");
    }
    nothing_recorded(m, before);
    common::assert_no_validation_errors();
}

/// Asserts that `t` still holds `want`, bit for bit.
fn unchanged(what: &str, t: &Tensor, want: &[f32]) {
    common::assert_bits(what, &t.read().unwrap(), want);
}

#[test]
fn matvec_refuses_misuse() {
    let _s = serial();
    let g = common::logical(2);
    let (m, other) = (g.member(0).unwrap(), g.member(1).unwrap());
    let mut rng = common::rng(12);
    let (rows, cols) = (3, 64);
    let format = QuantFormat::Q8_0;
    let bytes = random_blocks(&mut rng, format, rows, cols);
    let w = m.upload_quant(format, rows, cols, &bytes).unwrap();
    let theirs_w = other.upload_quant(format, rows, cols, &bytes).unwrap();
    let (dx, dy) = (common::random(&mut rng, cols), common::random(&mut rng, rows));
    let x = m.upload_f32(&dx).unwrap();
    let y = m.upload_f32(&dy).unwrap();
    let xh = m.upload(&dx, &[cols], DType::F16).unwrap();
    let yh = m.upload(&dy, &[rows], DType::F16).unwrap();
    let x_short = m.upload_f32(&dx[..cols - 1]).unwrap();
    let d_long = common::random(&mut rng, rows + 1);
    let y_long = m.upload_f32(&d_long).unwrap();
    let (theirs_x, theirs_y) = (other.upload_f32(&dx).unwrap(), other.upload_f32(&dy).unwrap());
    let square_bytes = random_blocks(&mut rng, format, cols, cols);
    let square = m.upload_quant(format, cols, cols, &square_bytes).unwrap();
    let xy = m.upload_f32(&dx).unwrap();
    m.synchronize().unwrap();
    other.synchronize().unwrap();
    let (before, before_other) = (m.stats().submits, other.stats().submits);

    let dtype = |r: crossgpu::Result<()>, what: &str| {
        assert!(
            matches!(r, Err(Error::DtypeMismatch { expected: DType::F32, got: DType::F16, .. })),
            "{what}: {r:?}"
        )
    };
    dtype(m.matvec_quant(&w, &xh, &y), "f16 x");
    dtype(m.matvec_quant(&w, &x, &yh), "f16 y");
    let length = |r: crossgpu::Result<()>, expected: usize, got: usize, what: &str| {
        assert!(
            matches!(&r, Err(Error::LengthMismatch { expected: e, got: g, .. }) if *e == expected && *g == got),
            "{what}: {r:?}"
        )
    };
    length(m.matvec_quant(&w, &x_short, &y), cols, cols - 1, "x of cols - 1");
    length(m.matvec_quant(&w, &x, &y_long), rows, rows + 1, "y of rows + 1");
    // Both lengths are wrong; y is checked first.
    length(m.matvec_quant(&w, &y, &x), rows, cols, "x and y swapped");
    length(m.matvec_quant_at(&w, &x, &y_long, 2), rows + 2, rows + 1, "y offset past the end");
    length(m.matvec_quant_at(&w, &x, &y, usize::MAX), usize::MAX, rows, "y offset overflowing");
    let owner = |r: crossgpu::Result<()>, what: &str| {
        assert!(matches!(r, Err(Error::WrongOwner { .. })), "{what}: {r:?}")
    };
    owner(m.matvec_quant(&theirs_w, &x, &y), "w of another member");
    owner(m.matvec_quant(&w, &theirs_x, &y), "x of another member");
    owner(m.matvec_quant(&w, &x, &theirs_y), "y of another member");
    owner(other.matvec_quant(&w, &theirs_x, &theirs_y), "w of member 0 on member 1");
    // y = x (a square matrix, so the lengths agree): refused, not a race.
    match m.matvec_quant(&square, &xy, &xy) {
        Err(Error::InvalidArgument(msg)) => assert!(msg.contains("same tensor"), "{msg}"),
        r => panic!("y = x: {r:?}"),
    }
    nothing_recorded(m, before);
    nothing_recorded(other, before_other);
    unchanged("y", &y, &dy);
    unchanged("y_long", &y_long, &d_long);
    unchanged("x", &xy, &dx);
    unchanged("their y", &theirs_y, &dy);
    common::assert_no_validation_errors();
}

/// Dequantizes Q4_0 with the nibbles interleaved (element 2j the low nibble of qs[j], 2j + 1
/// the high one), a plausible mistake.
fn q4_0_interleaved(bytes: &[u8]) -> Vec<f64> {
    let mut out = Vec::new();
    for b in bytes.chunks_exact(18) {
        let d = half::f16::from_le_bytes([b[0], b[1]]).to_f32();
        for &q in &b[2..] {
            out.push(((i16::from(q & 15) - 8) as f32 * d) as f64);
            out.push(((i16::from(q >> 4) - 8) as f32 * d) as f64);
        }
    }
    out
}

#[test]
fn wrong_element_order_exceeds_the_bound() {
    let mut rng = common::rng(13);
    let (rows, cols) = (64, 576);
    let x = common::random(&mut rng, cols);
    let exceeds = |wrong: &[f64], want: &Ev| {
        let got = reference::matvec(wrong, rows, &Ev::from_f32(&x), ErrorModel::BOUND);
        got.v.iter().zip(want.pairs()).filter(|(g, (v, e))| (*g - v).abs() > *e).count()
    };
    // Q4_0 with interleaved nibbles.
    let bytes = random_blocks(&mut rng, QuantFormat::Q4_0, rows, cols);
    let want = twin(QuantFormat::Q4_0, &bytes, rows, &x);
    let n = exceeds(&q4_0_interleaved(&bytes), &want);
    assert!(n >= rows * 9 / 10, "interleaved nibbles: only {n} of {rows} rows exceed the bound");
    // Q8_0 with qs read one byte late (element j from qs[j + 1], the last from the next d).
    let bytes = random_blocks(&mut rng, QuantFormat::Q8_0, rows, cols);
    let want = twin(QuantFormat::Q8_0, &bytes, rows, &x);
    let shifted: Vec<f64> = bytes
        .chunks_exact(34)
        .flat_map(|b| {
            let d = half::f16::from_le_bytes([b[0], b[1]]).to_f32();
            (0..32).map(move |j| (f32::from(b.get(3 + j).copied().unwrap_or(0) as i8) * d) as f64)
        })
        .collect();
    let n = exceeds(&shifted, &want);
    assert!(n >= rows * 9 / 10, "qs one byte late: only {n} of {rows} rows exceed the bound");
}

/// Uploads larger than the staging ring (three buffers of 32 MiB per member): a 116 MiB Q8_0
/// matrix goes in four runs of rows, the fourth through the first buffer again once its copy
/// has completed, and a second matrix right after reuses the ring; every byte reads back as
/// uploaded (random blocks, never zeros), the padding to a whole word zero, and the second
/// matrix's product checks against the twin.
#[test]
fn uploads_larger_than_the_staging_ring_read_back_exactly() {
    let _s = serial();
    let g = common::logical(1);
    let m = g.member(0).unwrap();
    let mut rng = common::rng(41);
    // 3501 rows of 1023 blocks: 34782 bytes a row, 121,771,782 in all (2 bytes of padding).
    let (rows, cols) = (3501, 32 * 1023);
    let bytes: Vec<u8> = (0..rows * 34 * 1023).map(|_| rng.random()).collect();
    let w = m.upload_quant(QuantFormat::Q8_0, rows, cols, &bytes).unwrap();
    let words = w.tensor().read_u32().unwrap();
    let got: Vec<u8> = words.iter().flat_map(|v| v.to_le_bytes()).collect();
    assert_eq!(got.len(), bytes.len() + 2);
    assert!(got[..bytes.len()] == bytes[..], "the uploaded bytes read back unchanged");
    assert_eq!(&got[bytes.len()..], &[0, 0]);
    drop(got);
    let small = random_blocks(&mut rng, QuantFormat::Q4_1, 37, 96);
    check(m, QuantFormat::Q4_1, &small, 37, 96, 5);
    common::assert_no_validation_errors();
}

/// `y += W x` (`matvec_quant_accumulate`, a residual add in the product) through every kernel of
/// every format: bit for bit the kernel's own `matvec_quant` followed by `Member::add` on a y of
/// random values (the same sum, then the same addition), and within the twin's bound plus one
/// rounding of the addition; with no columns y keeps its bits, and y as x is refused.
#[test]
fn accumulate_is_the_product_then_the_add() {
    let _s = serial();
    let g = common::logical(1);
    let m = g.member(0).unwrap();
    let mut rng = common::rng(17);
    for format in QuantFormat::ALL {
        for (rows, cols) in [(7usize, 3 * format.block_elems()), (97, cols(format)[2])] {
            let bytes = random_blocks(&mut rng, format, rows, cols);
            let w = m.upload_quant(format, rows, cols, &bytes).unwrap();
            let x = common::random(&mut rng, cols);
            let xt = m.upload_f32(&x).unwrap();
            let y0 = common::scaled(&mut rng, rows, 8.0);
            let twin = twin(format, &bytes, rows, &x);
            for kernel in format.kernel_names() {
                let what = format!("{kernel} [{rows}, {cols}] accumulated");
                let yt = m.upload_f32(&y0).unwrap();
                m.matvec_quant_accumulate_with(kernel, &w, &xt, &yt).unwrap();
                let (product, sum) = (m.empty(&[rows], DType::F32).unwrap(), m.upload_f32(&y0).unwrap());
                m.matvec_quant_with(kernel, &w, &xt, &product).unwrap();
                m.add(&sum, &product).unwrap();
                let got = yt.read().unwrap();
                common::assert_bits(&what, &got, &sum.read().unwrap());
                common::assert_within_ev(&what, &got, &reference::add_to_bounded(&twin, &y0));
            }
        }
        // A square matrix, so y as x has the right length and is refused for being x.
        let n = format.block_elems();
        let square = m.upload_quant(format, n, n, &random_blocks(&mut rng, format, n, n)).unwrap();
        let x = common::random(&mut rng, n);
        let xt = m.upload_f32(&x).unwrap();
        assert!(
            matches!(m.matvec_quant_accumulate(&square, &xt, &xt), Err(Error::InvalidArgument(_))),
            "{format}: y as x"
        );
        common::assert_bits(&format!("{format}: a refused call leaves x"), &xt.read().unwrap(), &x);
        let empty = m.upload_quant(format, 5, 0, &[]).unwrap();
        let (x0, y) = (m.upload_f32(&[]).unwrap(), m.upload_f32(&[3.0; 5]).unwrap());
        m.matvec_quant_accumulate(&empty, &x0, &y).unwrap();
        assert_eq!(y.read().unwrap(), vec![3.0; 5], "{format}: no columns add nothing");
    }
    common::assert_no_validation_errors();
}
