use half::{bf16, f16};

use super::ggml_type::{GgmlType, QK32};
use crate::error::FormatError;

/// Encodes `values` as `ty`, exactly as ggml's reference quantizers `quantize_row_*_ref` do, for
/// Q8_0, Q4_0 and Q4_1, and as plain conversions (round to nearest even) for F32, F16 and BF16.
///
/// For tests and tools that write model files; `values.len()` must be a whole number of blocks.
/// The error names the type and the length.
pub fn quantize_reference(ty: GgmlType, values: &[f32]) -> Result<Vec<u8>, FormatError> {
    let (block_elems, block_bytes) = ty.block();
    let (block_elems, block_bytes) = (block_elems as usize, block_bytes as usize);
    if !values.len().is_multiple_of(block_elems) {
        return Err(FormatError::in_memory(format!(
            "quantize: {} values of {ty} are not a whole number of its blocks of {block_elems}",
            values.len()
        )));
    }
    let mut out = Vec::with_capacity(values.len() / block_elems * block_bytes);
    match ty {
        GgmlType::F32 => values.iter().for_each(|v| out.extend_from_slice(&v.to_le_bytes())),
        GgmlType::F16 => values.iter().for_each(|v| out.extend_from_slice(&f16::from_f32(*v).to_le_bytes())),
        GgmlType::BF16 => {
            values.iter().for_each(|v| out.extend_from_slice(&bf16::from_f32(*v).to_le_bytes()))
        }
        GgmlType::Q8_0 => values.chunks_exact(QK32).for_each(|x| quantize_q8_0(x, &mut out)),
        GgmlType::Q4_0 => values.chunks_exact(QK32).for_each(|x| quantize_q4_0(x, &mut out)),
        GgmlType::Q4_1 => values.chunks_exact(QK32).for_each(|x| quantize_q4_1(x, &mut out)),
        _ => {
            return Err(FormatError::in_memory(format!(
                "quantize: no reference quantizer for {ty} (there are for F32, F16, BF16, Q8_0, Q4_0, Q4_1)"
            )))
        }
    }
    Ok(out)
}

/// ggml's `quantize_row_q8_0_ref` for one block of 32 values.
fn quantize_q8_0(x: &[f32], out: &mut Vec<u8>) {
    let amax = x.iter().fold(0.0f32, |a, v| a.max(v.abs()));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    out.extend_from_slice(&f16::from_f32(d).to_le_bytes());
    // `roundf` rounds half away from zero, as `f32::round` does; the result is within ±127.
    out.extend(x.iter().map(|v| ((v * id).round() as i8).to_le_bytes()[0]));
}

/// ggml's `quantize_row_q4_0_ref` for one block of 32 values.
fn quantize_q4_0(x: &[f32], out: &mut Vec<u8>) {
    // The signed value of largest magnitude (the first one, on ties), so that it maps to -8
    // exactly and the other extreme gets the 7 side.
    let (mut amax, mut max) = (0.0f32, 0.0f32);
    for &v in x {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    let d = max / -8.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    out.extend_from_slice(&f16::from_f32(d).to_le_bytes());
    // ggml's `(int8_t)(x + 8.5f)` truncates toward zero, as `as i8` does for values in range.
    let q = |v: f32| ((v * id + 8.5) as i8).clamp(0, 15) as u8;
    let (lo, hi) = x.split_at(QK32 / 2);
    out.extend(lo.iter().zip(hi).map(|(&a, &b)| q(a) | (q(b) << 4)));
}

/// ggml's `quantize_row_q4_1_ref` for one block of 32 values.
fn quantize_q4_1(x: &[f32], out: &mut Vec<u8>) {
    let (min, max) = x.iter().fold((f32::MAX, -f32::MAX), |(lo, hi), &v| {
        (if v < lo { v } else { lo }, if v > hi { v } else { hi })
    });
    let d = (max - min) / 15.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    out.extend_from_slice(&f16::from_f32(d).to_le_bytes());
    out.extend_from_slice(&f16::from_f32(min).to_le_bytes());
    let q = |v: f32| (((v - min) * id + 0.5) as i8).clamp(0, 15) as u8;
    let (lo, hi) = x.split_at(QK32 / 2);
    out.extend(lo.iter().zip(hi).map(|(&a, &b)| q(a) | (q(b) << 4)));
}
