// Q4_K's packed sub-block scales and mins (matvec_q4_k; matvec_q4_k_q8 unpacks all eight at once): `sw` is
// a super-block's three words of `scales` (its bytes 4 .. 16).

// Byte i (0..12) of the scales, from their three words.
fn scale_byte(sw: vec3<u32>, i: u32) -> u32 {
    return (sw[i / 4u] >> (8u * (i % 4u))) & 255u;
}

// The 6-bit scale and min of sub-block j (0..8): ggml's get_scale_min_k4.
fn scale_min(sw: vec3<u32>, j: u32) -> vec2<f32> {
    if (j < 4u) {
        return vec2<f32>(f32(scale_byte(sw, j) & 63u), f32(scale_byte(sw, j + 4u) & 63u));
    }
    let sc = (scale_byte(sw, j + 4u) & 15u) | ((scale_byte(sw, j - 4u) >> 6u) << 4u);
    let m = (scale_byte(sw, j + 4u) >> 4u) | ((scale_byte(sw, j) >> 6u) << 4u);
    return vec2<f32>(f32(sc), f32(m));
}
