use half::{bf16, f16};

use super::dequant::scale_min_k4;
use super::ggml_type::ALL_TYPES;
use super::*;
use crate::error::FormatError;

/// xorshift64: a reproducible source of test data without an extra crate.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    /// Uniform in [-1, 1).
    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
}

fn f16_bytes(v: f32) -> [u8; 2] {
    f16::from_f32(v).to_le_bytes()
}

fn dequant(ty: GgmlType, bytes: &[u8]) -> Vec<f32> {
    let elems = bytes.len() / ty.block_bytes() as usize * ty.block_elems() as usize;
    let mut out = vec![f32::NAN; elems];
    dequantize(ty, bytes, &mut out).expect("dequantize");
    out
}

#[test]
fn ids_names_and_sizes_match_ggml() {
    let expected: [(GgmlType, u32, &str, u64, u64); 10] = [
        (GgmlType::F32, 0, "F32", 1, 4),
        (GgmlType::F16, 1, "F16", 1, 2),
        (GgmlType::Q4_0, 2, "Q4_0", 32, 18),
        (GgmlType::Q4_1, 3, "Q4_1", 32, 20),
        (GgmlType::Q8_0, 8, "Q8_0", 32, 34),
        (GgmlType::Q4_K, 12, "Q4_K", 256, 144),
        (GgmlType::Q5_K, 13, "Q5_K", 256, 176),
        (GgmlType::Q6_K, 14, "Q6_K", 256, 210),
        (GgmlType::Q8_K, 15, "Q8_K", 256, 292),
        (GgmlType::BF16, 30, "BF16", 1, 2),
    ];
    for (ty, id, name, elems, bytes) in expected {
        assert_eq!((ty.id(), ty.name(), ty.block_elems(), ty.block_bytes()), (id, name, elems, bytes));
        assert_eq!(GgmlType::from_id(id), Some(ty));
    }
    for t in ALL_TYPES {
        assert_eq!(GgmlType::from_id(t.id()), Some(t), "{t}");
    }
    for removed in [4, 5, 31, 32, 33, 36, 37, 38, 40, 1000, u32::MAX] {
        assert_eq!(GgmlType::from_id(removed), None, "id {removed}");
    }
    let supported: Vec<_> = ALL_TYPES.into_iter().filter(|t| t.supported()).collect();
    assert_eq!(supported.len(), 8);
    assert_eq!(GgmlType::Q4_1.row_bytes(576), Some(18 * 20));
    assert_eq!(GgmlType::Q4_1.row_bytes(33), None);
    assert_eq!(GgmlType::Q6_K.row_bytes(512), Some(420));
    assert_eq!(GgmlType::F32.row_bytes(u64::MAX), None, "overflow");
}

#[test]
fn dequantize_plain_types() {
    let f32s: Vec<u8> = [1.5f32, -2.0, 0.0, f32::MIN_POSITIVE].iter().flat_map(|v| v.to_le_bytes()).collect();
    assert_eq!(dequant(GgmlType::F32, &f32s), vec![1.5, -2.0, 0.0, f32::MIN_POSITIVE]);
    // 1.0, -2.0, 65504 (largest f16), 2^-24 (smallest subnormal)
    let f16s = [0x00, 0x3C, 0x00, 0xC0, 0xFF, 0x7B, 0x01, 0x00];
    assert_eq!(dequant(GgmlType::F16, &f16s), vec![1.0, -2.0, 65504.0, 2f32.powi(-24)]);
    // 1.0, -5.0, 3.140625 (0x4049: pi truncated to 8 bits of mantissa)
    let bf16s = [0x80, 0x3F, 0xA0, 0xC0, 0x49, 0x40];
    assert_eq!(dequant(GgmlType::BF16, &bf16s), vec![1.0, -5.0, 3.140625]);
}

#[test]
fn dequantize_q8_0_block() {
    let mut b = f16_bytes(0.5).to_vec();
    b.extend((0..32).map(|j| (j as i8 * 4 - 64).to_le_bytes()[0]));
    let y = dequant(GgmlType::Q8_0, &b);
    assert_eq!(y[0], -32.0);
    assert_eq!(y[16], 0.0);
    assert_eq!(y[31], 30.0);
    for (j, v) in y.iter().enumerate() {
        assert_eq!(*v, (j as f32 * 4.0 - 64.0) * 0.5);
    }
}

#[test]
fn dequantize_q4_0_block() {
    // qs[j] = j (low) | (15 - j) << 4 (high): elements 0..16 are (j - 8) * 2, 16..32 are
    // (7 - j) * 2.
    let mut b = f16_bytes(2.0).to_vec();
    b.extend((0..16u8).map(|j| j | ((15 - j) << 4)));
    let y = dequant(GgmlType::Q4_0, &b);
    assert_eq!((y[0], y[8], y[15]), (-16.0, 0.0, 14.0));
    assert_eq!((y[16], y[31]), (14.0, -16.0));
    for j in 0..16 {
        assert_eq!(y[j], (j as f32 - 8.0) * 2.0);
        assert_eq!(y[j + 16], (7.0 - j as f32) * 2.0);
    }
}

#[test]
fn dequantize_q4_1_block() {
    let mut b = f16_bytes(0.25).to_vec();
    b.extend(f16_bytes(-1.0));
    b.extend((0..16u8).map(|j| j | (3 << 4)));
    let y = dequant(GgmlType::Q4_1, &b);
    assert_eq!((y[0], y[15], y[16], y[31]), (-1.0, 2.75, -0.25, -0.25));
    for (j, v) in y[..16].iter().enumerate() {
        assert_eq!(*v, j as f32 * 0.25 - 1.0);
        assert_eq!(y[j + 16], 3.0 * 0.25 - 1.0);
    }
}

/// Packs eight 6-bit scales and mins as Q4_K stores them (the inverse of `scale_min_k4`).
fn pack_scales_k4(sc: [u8; 8], m: [u8; 8]) -> [u8; 12] {
    let mut s = [0u8; 12];
    for j in 0..4 {
        s[j] = (sc[j] & 63) | ((sc[j + 4] >> 4) << 6);
        s[j + 4] = (m[j] & 63) | ((m[j + 4] >> 4) << 6);
        s[j + 8] = (sc[j + 4] & 15) | ((m[j + 4] & 15) << 4);
    }
    s
}

#[test]
fn dequantize_q4_k_block() {
    // Scales and mins above 15 for sub-blocks 4..8 exercise the split 6-bit packing.
    let sc = [1, 2, 3, 63, 17, 33, 48, 62];
    let m = [0, 5, 9, 40, 21, 63, 16, 31];
    let scales = pack_scales_k4(sc, m);
    for j in 0..8 {
        assert_eq!(scale_min_k4(j, &scales), (sc[j], m[j]), "sub-block {j}");
    }
    let q: Vec<u8> = (0..256).map(|e| ((e * 7 + e / 32) % 16) as u8).collect();
    let mut b = f16_bytes(0.5).to_vec();
    b.extend(f16_bytes(0.25));
    b.extend(scales);
    // qs[32c + l]: low nibble is element 64c + l, high nibble element 64c + 32 + l.
    for c in 0..4 {
        for l in 0..32 {
            b.push(q[64 * c + l] | (q[64 * c + 32 + l] << 4));
        }
    }
    let y = dequant(GgmlType::Q4_K, &b);
    for (e, v) in y.iter().enumerate() {
        let s = e / 32;
        let want = 0.5 * f32::from(sc[s]) * f32::from(q[e]) - 0.25 * f32::from(m[s]);
        assert_eq!(*v, want, "element {e}");
    }
    // By hand: element 0 is q 0 in sub-block 0: 0.5*1*0 - 0.25*0 = 0; element 100 is
    // q (700 + 3) % 16 = 15 in sub-block 3: 0.5*63*15 - 0.25*40 = 462.5; element 250 is
    // q (1750 + 7) % 16 = 13 in sub-block 7: 0.5*62*13 - 0.25*31 = 395.25; element 255 is
    // q (1785 + 7) % 16 = 0, so only its min remains: -0.25*31 = -7.75.
    assert_eq!((y[0], y[100], y[250], y[255]), (0.0, 462.5, 395.25, -7.75));
}

#[test]
fn dequantize_q6_k_block() {
    // 6-bit quants L (0..64, value L - 32) packed as ggml's quantize_row_q6_K_ref does.
    let l_of = |e: usize| ((e * 37 + 11) % 64) as u8;
    let sc: [i8; 16] = [1, -1, 2, -2, 3, -3, 4, -4, 127, -128, 5, 6, 7, 8, 9, -10];
    let mut ql = [0u8; 128];
    let mut qh = [0u8; 64];
    for half in 0..2 {
        for l in 0..32 {
            let e = |k: usize| l_of(128 * half + l + k);
            ql[64 * half + l] = (e(0) & 15) | ((e(64) & 15) << 4);
            ql[64 * half + l + 32] = (e(32) & 15) | ((e(96) & 15) << 4);
            qh[32 * half + l] = (e(0) >> 4) | ((e(32) >> 4) << 2) | ((e(64) >> 4) << 4) | ((e(96) >> 4) << 6);
        }
    }
    let mut b = ql.to_vec();
    b.extend(qh);
    b.extend(sc.iter().map(|s| s.to_le_bytes()[0]));
    b.extend(f16_bytes(0.125));
    let y = dequant(GgmlType::Q6_K, &b);
    for (e, v) in y.iter().enumerate() {
        let want = 0.125 * f32::from(sc[e / 16]) * (f32::from(l_of(e)) - 32.0);
        assert_eq!(*v, want, "element {e}");
    }
    // By hand: element 0 has L 11 and scale 1: 0.125*1*(11-32) = -2.625; element 128 has
    // L (128*37 + 11) % 64 = 11 and scale 127: 0.125*127*-21 = -333.375; element 255 has
    // L (255*37 + 11) % 64 = 38 and scale -10: 0.125*-10*6 = -7.5.
    assert_eq!((y[0], y[128], y[255]), (-2.625, -333.375, -7.5));
}

#[test]
fn dequantize_refuses_bad_lengths_and_types() {
    let mut out = [0.0f32; 32];
    let e = dequantize(GgmlType::Q8_0, &[0u8; 33], &mut out).unwrap_err();
    assert!(e.what.contains("Q8_0") && e.what.contains("33"), "{e}");
    let e = dequantize(GgmlType::Q4_0, &[0u8; 18], &mut out[..31]).unwrap_err();
    assert!(e.what.contains("31"), "{e}");
    let e = dequantize(GgmlType::Q5_K, &[0u8; 176], &mut [0.0; 256]).unwrap_err();
    assert!(e.what.contains("Q5_K"), "{e}");
    assert_eq!(e.file, FormatError::IN_MEMORY);
    let e = quantize_reference(GgmlType::Q4_K, &[0.0; 256]).unwrap_err();
    assert!(e.what.contains("Q4_K"), "{e}");
    let e = quantize_reference(GgmlType::Q4_1, &[0.0; 31]).unwrap_err();
    assert!(e.what.contains("31"), "{e}");
    // Empty input is a whole number (zero) of blocks.
    dequantize(GgmlType::Q6_K, &[], &mut []).expect("empty");
}

#[test]
fn quantize_reference_matches_ggml_on_known_blocks() {
    // Q8_0 of 0..32: amax 31, d = 31/127, q = round(j * 127/31).
    let x: Vec<f32> = (0..32).map(|j| j as f32).collect();
    let b = quantize_reference(GgmlType::Q8_0, &x).unwrap();
    assert_eq!(&b[..2], &f16_bytes(31.0 / 127.0));
    assert_eq!((b[2], b[3], b[33]), (0, 4, 127));
    // Q4_0: the largest magnitude -4 maps to q 0 (d = 0.5), +3.5 to q 15.
    let mut x = vec![0.0f32; 32];
    x[0] = -4.0;
    x[17] = 3.5;
    let b = quantize_reference(GgmlType::Q4_0, &x).unwrap();
    assert_eq!(&b[..2], &f16_bytes(0.5));
    assert_eq!(b[2], 8 << 4, "element 0 -> q 0, element 16 -> q 8");
    assert_eq!(b[3], 8 | (15 << 4), "element 1 -> q 8, element 17 -> q 15");
    // Q4_1 of a constant block: d 0, m the constant, every q 0.
    let b = quantize_reference(GgmlType::Q4_1, &[2.5; 32]).unwrap();
    assert_eq!(&b[..4], &[f16_bytes(0.0), f16_bytes(2.5)].concat()[..]);
    assert!(b[4..].iter().all(|&q| q == 0));
    assert_eq!(dequant(GgmlType::Q4_1, &b), vec![2.5; 32]);
    // All zeros: d 0, values come back 0.
    for ty in [GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1] {
        let b = quantize_reference(ty, &[0.0; 64]).unwrap();
        assert_eq!(b.len() as u64, ty.row_bytes(64).unwrap());
        assert_eq!(dequant(ty, &b), vec![0.0; 64]);
    }
}

#[test]
fn quantize_then_dequantize_within_the_format_bound() {
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
    // fp16's relative rounding error: the stored d and m are off by at most this much.
    let h = 2f32.powi(-11);
    for trial in 0..200 {
        // Scales whose fp16 step stays a normal number (below 6e-5 the step would be a
        // subnormal with a coarser relative error).
        let scale = [0.05f32, 1.0, 37.0, 1e4][trial % 4];
        let offset = if trial % 3 == 0 { 2.0 * scale } else { 0.0 };
        let x: Vec<f32> = (0..256).map(|_| rng.unit() * scale + offset).collect();
        for ty in [GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1] {
            let b = quantize_reference(ty, &x).unwrap();
            let y = dequant(ty, &b);
            for (blk, (xb, yb)) in x.chunks(32).zip(y.chunks(32)).enumerate() {
                let amax = xb.iter().fold(0.0f32, |a, v| a.max(v.abs()));
                let (lo, hi) = xb.iter().fold((f32::MAX, f32::MIN), |(l, u), &v| (l.min(v), u.max(v)));
                // Half a step of rounding, plus the step's fp16 error times the largest q.
                let bound = match ty {
                    GgmlType::Q8_0 => (amax / 127.0) * (0.5 + 128.0 * h),
                    // The extreme opposite to the one that maps to -8 lands on +7: a whole
                    // step of error there.
                    GgmlType::Q4_0 => (amax / 8.0) * (1.0 + 16.0 * h),
                    _ => (hi - lo) / 15.0 * (0.5 + 16.0 * h) + lo.abs() * h,
                } * 1.0001
                    + f32::MIN_POSITIVE;
                for (a, b) in xb.iter().zip(yb) {
                    assert!(
                        (a - b).abs() <= bound,
                        "{ty} trial {trial} block {blk}: {a} -> {b}, bound {bound}"
                    );
                }
            }
        }
    }
}

#[test]
fn plain_types_round_trip_through_quantize_reference() {
    let x = [1.0f32, -0.1, 3.0e38, 1.0e-8];
    let y = dequant(GgmlType::F32, &quantize_reference(GgmlType::F32, &x).unwrap());
    assert_eq!(y, x);
    let y = dequant(GgmlType::F16, &quantize_reference(GgmlType::F16, &x).unwrap());
    assert_eq!(y, x.map(|v| f16::from_f32(v).to_f32()));
    let y = dequant(GgmlType::BF16, &quantize_reference(GgmlType::BF16, &x).unwrap());
    assert_eq!(y, x.map(|v| bf16::from_f32(v).to_f32()));
}
