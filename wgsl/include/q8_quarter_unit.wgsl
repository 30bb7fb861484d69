// The unit of the 32-element formats' products with 8-bit x where blocks are not word-aligned
// (matvec_q8_0_q8, matvec_q4_0_q8; matvec_q4_1_q8 takes whole blocks): a quarter block, whose x is two words of quants and the block's d and s.
// Needs matvec_q8_blocks.wgsl.

// A unit's x: two words of quants, then the block's d and s (as bits).
alias XUnit = vec4<u32>;

// Unit x of quant words j0 and j1 of block b, with the block's d and s.
fn xq_unit(b: u32, j0: u32, j1: u32) -> XUnit {
    return vec4<u32>(xq_word(b, j0), xq_word(b, j1), xq[10u * b], xq[10u * b + 1u]);
}

// d · q of the unit's x dotted with the integers in `lo`, `hi` (four bytes each, signed),
// against its two quant words: the scale of x times the exact integer dot product.
fn scaled_dot(lo: u32, hi: u32, xs: XUnit) -> f32 {
    return bitcast<f32>(xs.z) * f32(dot4I8Packed(lo, xs.x) + dot4I8Packed(hi, xs.y));
}

// The unit's share of its block's sum of x as quantized: a quarter of s (four units a block).
fn quarter_sum(xs: XUnit) -> f32 {
    return 0.25 * bitcast<f32>(xs.w);
}
