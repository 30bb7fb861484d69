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
    var amax = 0.0;
    var sx = 0.0;
    for (var i = 0u; i < 8u; i++) {
        let v = x[8u * b + i];
        let a = abs(v);
        amax = max(amax, max(max(a.x, a.y), max(a.z, a.w)));
        sx += (v.x + v.y) + (v.z + v.w);
    }
    let finite = amax >= TINY && amax <= 3.4e38 && sx - sx == 0.0;
    let scale = select(0.0, 127.0 / amax, finite);
    let d = amax / 127.0 + (sx - sx);
    var sq = 0;
    for (var i = 0u; i < 8u; i++) {
        let q = vec4<i32>(clamp(round(x[8u * b + i] * scale), vec4<f32>(-127.0), vec4<f32>(127.0)));
        sq += (q.x + q.y) + (q.z + q.w);
        xq[10u * b + 2u + i] = pack4xI8(q);
    }
    xq[10u * b] = bitcast<u32>(d);
    xq[10u * b + 1u] = bitcast<u32>(d * f32(sq));
}
