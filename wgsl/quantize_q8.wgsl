// quantize_q8: x (f32, 32 · blocks elements) as the 8-bit blocks that the products over
// quantized weights may take instead of it (matvec_q8_0_q8, matvec_q4_0_q8, matvec_q4_1_q8, matvec_q4_k_q8, matvec_q6_k_q8;
// layout in wgsl/include/matvec_q8_blocks.wgsl). Per block of 32 elements: d = max|x| / 127,
// q = round(x · 127 / max|x|) in -127 ..= 127, and s = d · Σ q, the sum of the block's values
// as quantized (ggml's quantize_row_q8_1), so that a product reads one x throughout: Q4_1's
// min and Q4_0's offset meet the same x as the quants do, and the weights' own cancellation
// (q · d + m is small where q · d and m are not) carries over. With s = Σ x instead, SmolLM2's
// first token's distribution moved 50 times as far from the f32 decoder's (KL 0.046 against
// 0.0009 nats). So |x - d · q| is at most about d / 2: the product loses what llama.cpp's q8_1
// path loses, for integer dot products over the weights' quants. A block whose largest magnitude is below 2^-100 (all zeros, or
// nearly) gets q = 0, so 127 / max|x| never overflows: its elements are off by less than 2^-100.
//
// A non-finite x is the caller's: its block's quants are then 0 and d is NaN (Σ x - Σ x) where
// the compiler keeps NaNs (Vulkan does not require it), so the products reading it are NaN as
// the f32 product's would be.
//
// One invocation a block, x read twice (the maximum and sum, then the quants): a few µs for a
// model's widest vector, against products of megabytes.

struct QuantizeParams {
    blocks: u32,
}

@group(0) @binding(0) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read_write> xq: array<u32>;
var<immediate> p: QuantizeParams;

const WG: u32 = 64u;
// 2^-100: below it a block's quants are 0.
const TINY: f32 = 7.888609e-31;
// +Inf's bits; a magnitude's bits at or past them are Inf or NaN.
const INF_BITS: u32 = 0x7F800000u;
const NAN_BITS: u32 = 0x7FC00000u;

@compute @workgroup_size(WG)
fn quantize_q8(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let b = (wid.y * nwg.x + wid.x) * WG + lid;
    if (b >= p.blocks) {
        return;
    }
    // The largest magnitude by its bits (a non-negative float orders as its bits), so that an
    // Inf or NaN shows whatever the compiler assumes of float arithmetic.
    var top = 0u;
    for (var i = 0u; i < 8u; i++) {
        let m = bitcast<vec4<u32>>(x[8u * b + i]) & vec4<u32>(0x7FFFFFFFu);
        top = max(top, max(max(m.x, m.y), max(m.z, m.w)));
    }
    let amax = bitcast<f32>(top);
    if (top >= INF_BITS) {
        // Inf or NaN: quants 0, d and s NaN.
        xq[10u * b] = NAN_BITS;
        xq[10u * b + 1u] = NAN_BITS;
        for (var i = 0u; i < 8u; i++) {
            xq[10u * b + 2u + i] = 0u;
        }
        return;
    }
    let live = amax >= TINY;
    let d = select(0.0, amax / 127.0, live);
    // 127 / max|x| as 127 / m · 2^(127 - e), for max|x| = m · 2^(e - 127) with m in [1, 2): no
    // division by a large number. NVIDIA's divides by one past 2^126 give 0 (H200 and H100,
    // driver 580: a block holding -f32::MAX quantized to zeros, with 127 / max|x| and with
    // 1 / d alike, which the compiler may rewrite into it). At most 2^107 (max|x| ≥ 2^-100),
    // at least 2^-121 (normal).
    let m = bitcast<f32>((top & 0x007FFFFFu) | 0x3F800000u);
    let scale = select(0.0, ldexp(127.0 / m, 127 - i32(top >> 23u)), live);
    var sq = 0;
    for (var i = 0u; i < 8u; i++) {
        let q = vec4<i32>(clamp(round(x[8u * b + i] * scale), vec4<f32>(-127.0), vec4<f32>(127.0)));
        sq += (q.x + q.y) + (q.z + q.w);
        xq[10u * b + 2u + i] = pack4xI8(q);
    }
    xq[10u * b] = bitcast<u32>(d);
    xq[10u * b + 1u] = bitcast<u32>(d * f32(sq));
}
