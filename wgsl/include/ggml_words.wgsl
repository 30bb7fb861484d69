// Reading ggml blocks held as u32 words (the quantized matrix–vector kernels: their bindings in
// matvec_quant_blocks.wgsl, f32 x, and matvec_q8_blocks.wgsl, x in 8-bit blocks).

// Reading a 2-byte-aligned block as words: `lo` and `hi` are words j and j + 1 counted from the
// word holding the block's first byte, and `odd` says the block starts at that word's byte 2.
// `straddle` is the block's bytes 4j .. 4j + 4; `after_half` its bytes 4j + 2 .. 4j + 6 (the
// fields that follow a leading f16, as Q8_0's and Q4_0's qs follow d).
fn straddle(lo: u32, hi: u32, odd: bool) -> u32 {
    return select(lo, (lo >> 16u) | (hi << 16u), odd);
}

fn after_half(lo: u32, hi: u32, odd: bool) -> u32 {
    return select((lo >> 16u) | (hi << 16u), hi, odd);
}

// Four `straddle` words of the block from word j = `at` of `w` (counted as for `straddle`):
// the block's bytes 4j .. 4j + 16, from five loads.
fn straddle4(at: u32, odd: bool) -> vec4<u32> {
    let a0 = w[at];
    let a1 = w[at + 1u];
    let a2 = w[at + 2u];
    let a3 = w[at + 3u];
    let a4 = w[at + 4u];
    return vec4<u32>(straddle(a0, a1, odd), straddle(a1, a2, odd), straddle(a2, a3, odd), straddle(a3, a4, odd));
}

// Four `after_half` words likewise: the block's bytes 4j + 2 .. 4j + 18.
fn after_half4(at: u32, odd: bool) -> vec4<u32> {
    let a0 = w[at];
    let a1 = w[at + 1u];
    let a2 = w[at + 2u];
    let a3 = w[at + 3u];
    let a4 = w[at + 4u];
    return vec4<u32>(after_half(a0, a1, odd), after_half(a1, a2, odd), after_half(a2, a3, odd), after_half(a3, a4, odd));
}

// The f16 at the block's bytes 4j .. 4j + 2, from word j (counted as for `straddle`).
fn half_at(aj: u32, odd: bool) -> f32 {
    let h = unpack2x16float(aj);
    return select(h.x, h.y, odd);
}

// The four signed bytes of v, lowest first, as f32.
fn i8x4(v: u32) -> vec4<f32> {
    let s = bitcast<vec4<i32>>(vec4<u32>(v << 24u, v << 16u, v << 8u, v)) >> vec4<u32>(24u);
    return vec4<f32>(s);
}

// The low nibbles of v's four bytes, lowest byte first.
fn lo4(v: u32) -> vec4<f32> {
    return vec4<f32>((vec4<u32>(v) >> vec4<u32>(0u, 8u, 16u, 24u)) & vec4<u32>(15u));
}

// The high nibbles of v's four bytes, lowest byte first.
fn hi4(v: u32) -> vec4<f32> {
    return vec4<f32>((vec4<u32>(v) >> vec4<u32>(4u, 12u, 20u, 28u)) & vec4<u32>(15u));
}
