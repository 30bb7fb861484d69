use half::{bf16, f16};

use super::ggml_type::{supported_type_names, GgmlType, QK32, QK_K};
use crate::error::FormatError;

/// Checks that `bytes` holds exactly the blocks of `elems` elements of `ty`; returns the number
/// of blocks.
fn check_lengths(ty: GgmlType, bytes: usize, elems: usize, op: &str) -> Result<usize, FormatError> {
    let (block_elems, block_bytes) = ty.block();
    // A block is at most a few hundred bytes and elements, so these fit in usize.
    let (block_elems, block_bytes) = (block_elems as usize, block_bytes as usize);
    if !elems.is_multiple_of(block_elems) {
        return Err(FormatError::in_memory(format!(
            "{op}: {elems} elements of {ty} are not a whole number of its blocks of {block_elems}"
        )));
    }
    let blocks = elems / block_elems;
    match blocks.checked_mul(block_bytes) {
        Some(need) if need == bytes => Ok(blocks),
        _ => Err(FormatError::in_memory(format!(
            "{op}: {elems} elements of {ty} take {blocks} blocks of {block_bytes} bytes, but {bytes} bytes \
             were given"
        ))),
    }
}

/// The fixed-size blocks of `bytes` (whose length the caller checked is a multiple of `N`).
fn blocks<const N: usize>(bytes: &[u8]) -> impl Iterator<Item = &[u8; N]> {
    bytes.chunks_exact(N).filter_map(|c| <&[u8; N]>::try_from(c).ok())
}

/// The fixed-size output blocks of `out` (whose length the caller checked is a multiple of `N`).
fn out_blocks<const N: usize>(out: &mut [f32]) -> impl Iterator<Item = &mut [f32; N]> {
    out.chunks_exact_mut(N).filter_map(|c| <&mut [f32; N]>::try_from(c).ok())
}

/// The little-endian f16 at `at` in a block, widened exactly (ggml's `GGML_FP16_TO_FP32`).
fn f16_at<const N: usize>(block: &[u8; N], at: usize) -> f32 {
    let lo = block.get(at).copied().unwrap_or(0);
    let hi = block.get(at + 1).copied().unwrap_or(0);
    f16::from_bits(u16::from_le_bytes([lo, hi])).to_f32()
}

/// Dequantizes `bytes`, a run of whole blocks of `ty`, into `out`, one `f32` per element, exactly
/// as ggml's `dequantize_row_*` does.
///
/// `out.len()` must be a whole number of blocks and `bytes` exactly their size; `ty` must be one
/// of [`SUPPORTED_TYPES`]. The error names the type and the lengths; its `file` is
/// [`FormatError::IN_MEMORY`] (see [`FormatError::in_file`] to attribute it).
///
/// [`SUPPORTED_TYPES`]: super::SUPPORTED_TYPES
pub fn dequantize(ty: GgmlType, bytes: &[u8], out: &mut [f32]) -> Result<(), FormatError> {
    if !ty.supported() {
        return Err(FormatError::in_memory(format!(
            "cannot dequantize {ty}: the supported types are {}",
            supported_type_names()
        )));
    }
    check_lengths(ty, bytes.len(), out.len(), "dequantize")?;
    match ty {
        GgmlType::F32 => {
            for (b, y) in blocks::<4>(bytes).zip(out.iter_mut()) {
                *y = f32::from_le_bytes(*b);
            }
        }
        GgmlType::F16 => {
            for (b, y) in blocks::<2>(bytes).zip(out.iter_mut()) {
                *y = f16::from_le_bytes(*b).to_f32();
            }
        }
        GgmlType::BF16 => {
            // Widening bf16 is exact (its bits become the top half of the f32); `half` differs
            // from ggml's plain shift only by quieting a signalling NaN.
            for (b, y) in blocks::<2>(bytes).zip(out.iter_mut()) {
                *y = bf16::from_le_bytes(*b).to_f32();
            }
        }
        GgmlType::Q8_0 => blocks::<34>(bytes).zip(out_blocks::<QK32>(out)).for_each(dequantize_q8_0),
        GgmlType::Q4_0 => blocks::<18>(bytes).zip(out_blocks::<QK32>(out)).for_each(dequantize_q4_0),
        GgmlType::Q4_1 => blocks::<20>(bytes).zip(out_blocks::<QK32>(out)).for_each(dequantize_q4_1),
        GgmlType::Q4_K => blocks::<144>(bytes).zip(out_blocks::<QK_K>(out)).for_each(dequantize_q4_k),
        GgmlType::Q6_K => blocks::<210>(bytes).zip(out_blocks::<QK_K>(out)).for_each(dequantize_q6_k),
        // `supported()` was checked above; this arm is never taken.
        _ => {
            return Err(FormatError::in_memory(format!("cannot dequantize {ty}")));
        }
    }
    Ok(())
}

/// ggml's `dequantize_row_q8_0` for one block.
fn dequantize_q8_0((b, y): (&[u8; 34], &mut [f32; QK32])) {
    let d = f16_at(b, 0);
    for (j, y) in y.iter_mut().enumerate() {
        let q = i8::from_le_bytes([b[2 + j]]);
        *y = f32::from(q) * d;
    }
}

/// ggml's `dequantize_row_q4_0` for one block.
fn dequantize_q4_0((b, y): (&[u8; 18], &mut [f32; QK32])) {
    let d = f16_at(b, 0);
    for j in 0..QK32 / 2 {
        let q = b[2 + j];
        let x0 = i16::from(q & 0x0F) - 8;
        let x1 = i16::from(q >> 4) - 8;
        y[j] = f32::from(x0) * d;
        y[j + QK32 / 2] = f32::from(x1) * d;
    }
}

/// ggml's `dequantize_row_q4_1` for one block.
fn dequantize_q4_1((b, y): (&[u8; 20], &mut [f32; QK32])) {
    let d = f16_at(b, 0);
    let m = f16_at(b, 2);
    for j in 0..QK32 / 2 {
        let q = b[4 + j];
        y[j] = f32::from(q & 0x0F) * d + m;
        y[j + QK32 / 2] = f32::from(q >> 4) * d + m;
    }
}

/// The 6-bit scale and min of sub-block `j` (0..8) of a Q4_K/Q5_K block, ggml's
/// `get_scale_min_k4`. Sub-blocks 0..4 keep theirs in the low 6 bits of `scales[j]` (scale) and
/// `scales[j + 4]` (min); sub-blocks 4..8 keep their low 4 bits in the nibbles of `scales[j + 4]`
/// and their top 2 bits in the top 2 bits of `scales[j - 4]` (scale) and `scales[j]` (min).
pub(super) fn scale_min_k4(j: usize, scales: &[u8; 12]) -> (u8, u8) {
    if j < 4 {
        (scales[j] & 63, scales[j + 4] & 63)
    } else {
        let scale = (scales[j + 4] & 0x0F) | ((scales[j - 4] >> 6) << 4);
        let min = (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4);
        (scale, min)
    }
}

/// ggml's `dequantize_row_q4_K` for one super-block.
fn dequantize_q4_k((b, y): (&[u8; 144], &mut [f32; QK_K])) {
    let d = f16_at(b, 0);
    let dmin = f16_at(b, 2);
    let scales: [u8; 12] = std::array::from_fn(|i| b[4 + i]);
    for chunk in 0..QK_K / 64 {
        let (sc, m) = scale_min_k4(2 * chunk, &scales);
        let (d1, m1) = (d * f32::from(sc), dmin * f32::from(m));
        let (sc, m) = scale_min_k4(2 * chunk + 1, &scales);
        let (d2, m2) = (d * f32::from(sc), dmin * f32::from(m));
        for l in 0..32 {
            let q = b[16 + 32 * chunk + l];
            y[64 * chunk + l] = d1 * f32::from(q & 0x0F) - m1;
            y[64 * chunk + 32 + l] = d2 * f32::from(q >> 4) - m2;
        }
    }
}

/// ggml's `dequantize_row_q6_K` for one super-block.
fn dequantize_q6_k((b, y): (&[u8; 210], &mut [f32; QK_K])) {
    const QH: usize = 128;
    const SCALES: usize = 192;
    let d = f16_at(b, 208);
    for half in 0..2 {
        let (ql, qh, sc, out) = (64 * half, QH + 32 * half, SCALES + 8 * half, 128 * half);
        let scale = |k: usize| f32::from(i8::from_le_bytes([b[sc + k]]));
        for l in 0..32 {
            let is = l / 16;
            let (lo0, lo32, h) = (b[ql + l], b[ql + l + 32], b[qh + l]);
            let q1 = i16::from((lo0 & 0x0F) | ((h & 3) << 4)) - 32;
            let q2 = i16::from((lo32 & 0x0F) | (((h >> 2) & 3) << 4)) - 32;
            let q3 = i16::from((lo0 >> 4) | (((h >> 4) & 3) << 4)) - 32;
            let q4 = i16::from((lo32 >> 4) | (((h >> 6) & 3) << 4)) - 32;
            y[out + l] = d * scale(is) * f32::from(q1);
            y[out + l + 32] = d * scale(is + 2) * f32::from(q2);
            y[out + l + 64] = d * scale(is + 4) * f32::from(q3);
            y[out + l + 96] = d * scale(is + 6) * f32::from(q4);
        }
    }
}
