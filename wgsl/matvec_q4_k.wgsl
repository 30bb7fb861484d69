// matvec_q4_k: y = W x for W in ggml's Q4_K (see wgsl/include/matvec_quant.wgsl for the
// structure). A super-block is 256 elements in 144 bytes: d (f16) at 0, dmin (f16) at 2,
// scales (12 bytes) at 4, qs (128 bytes) at 16. Its elements come in four chunks of 64: chunk
// c takes qs[32c .. 32c + 32], whose low nibbles are elements 64c .. 64c + 32 (sub-block 2c)
// and high nibbles elements 64c + 32 .. 64c + 64 (sub-block 2c + 1); sub-block j has a 6-bit
// scale sc and min m packed in `scales` (ggml's get_scale_min_k4: `scale_min`,
// wgsl/include/q4_k_scales.wgsl); value d·sc·q - dmin·m. 144 bytes is 9 × 16, so every super-block starts on a word (36s).
//
// The unit of work is one chunk (64 elements): an invocation reads the d/dmin word, the three
// scale words and the chunk's 8 qs words, and 16 vec4 of x. Neighbouring invocations take
// neighbouring chunks, so a warp reads whole super-blocks. Two rows per workgroup.
//
// Each weight is formed as (d·sc)·q - dmin·m, as ggml's dequantize does: d·sc, dmin·m and
// (d·sc)·q are exact in f32 (at most 11 + 6 + 4 significant bits), so the weight is ggml's f32
// (one rounding, fused or not), then a plain dot product with x (no cancellation between the
// scale and the min hidden in a factored sum).

const ROWS: u32 = 2u;
const UNIT: u32 = 64u;
const UNIT_X: u32 = 16u;

alias XUnit = array<vec4<f32>, UNIT_X>;

const WG: u32 = 64u;

// #include "matvec_quant.wgsl"
// #include "matvec_quant_blocks.wgsl"
// #include "q4_k_scales.wgsl"
// #include "q4_k_chunk.wgsl"

@compute @workgroup_size(WG)
fn matvec_q4_k(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    matvec_quant(wid, nwg, lid);
}
