// The bindings of the quantized matrix–vector kernels that take x as 8-bit blocks
// (matvec_q8_0_q8, matvec_q4_0_q8, matvec_q4_1_q8, matvec_q4_k_q8, matvec_q6_k_q8, laid out by
// matvec_quant_wide.wgsl): W is the GGUF tensor's bytes as stored, `xq` x as quantize_q8.wgsl
// writes it, y f32. A block of 32 elements is 10 words from word 10·b: d (f32 bits), s (f32
// bits: d · Σ q, the sum of the block's values), then the 32 signed 8-bit values, element
// 4j + i in byte i of word 2 + j, so x ≈ d · q.
//
// A block's products are integer dot products of its quants with x's (`dot4I8Packed`: exact,
// at most 32 · 127 · 127 < 2^24 in magnitude, so exact in f32 too), scaled by the two d.

@group(0) @binding(0) var<storage, read> w: array<u32>;
@group(0) @binding(1) var<storage, read> xq: array<u32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
var<immediate> p: MatvecParams;
// #include "matvec_store.wgsl"
// #include "ggml_words.wgsl"

// The quants of elements 4j .. 4j + 4 of block b (j < 8).
fn xq_word(b: u32, j: u32) -> u32 {
    return xq[10u * b + 2u + j];
}

// Block b of x: its quant words 0 .. 4 (elements 0 .. 16) and 4 .. 8 (16 .. 32), then its d
// and s.
struct XBlock {
    lo: vec4<u32>,
    hi: vec4<u32>,
    ds: vec2<f32>,
}

fn x_block(b: u32) -> XBlock {
    let a = 10u * b;
    return XBlock(
        vec4<u32>(xq[a + 2u], xq[a + 3u], xq[a + 4u], xq[a + 5u]),
        vec4<u32>(xq[a + 6u], xq[a + 7u], xq[a + 8u], xq[a + 9u]),
        vec2<f32>(bitcast<f32>(xq[a]), bitcast<f32>(xq[a + 1u])),
    );
}

// Σ q · x over four words of each, as signed bytes (4-bit quants are 0 ..= 15 in them).
fn dot16(q: vec4<u32>, x: vec4<u32>) -> i32 {
    return (dot4I8Packed(q.x, x.x) + dot4I8Packed(q.y, x.y)) + (dot4I8Packed(q.z, x.z) + dot4I8Packed(q.w, x.w));
}
