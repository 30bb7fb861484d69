// matvec_q4_0_q8: y = W x for W in ggml's Q4_0 (layout: matvec_q4_0.wgsl) and x as 8-bit blocks
// (quantize_q8.wgsl), by whole blocks: 32 invocations a row, 8 rows a workgroup of 256
// (wgsl/include/matvec_quant_wide.wgsl), two blocks a trip. An 18-byte block starts at byte 2
// of word (9g) >> 1 for odd g and on it for even g: its qs word k (funnelled out of words k and
// k + 1 from there, five words in all) holds elements 4k .. 4k + 4 in its low nibbles (x's
// quant word k) and 16 + 4k .. 20 + 4k in its high nibbles (word 4 + k). With x ≈ dx · qx and
// the weight (q - 8) · d, the block adds d · (dx · Σ q · qx - 8 · s): ggml's
// vec_dot_q4_0_q8_1, with s = dx · Σ qx the block's sum of x as quantized, in f32.

const LANES: u32 = 32u;
const UNIT: u32 = 32u;

// #include "matvec_quant_wide.wgsl"
// #include "matvec_q8_blocks.wgsl"
// #include "q8_block_unit.wgsl"

fn unit_dot(row: u32, u: u32, xs: ptr<function, XUnit>) -> f32 {
    let g = row * (p.cols / 32u) + u;
    let base = (9u * g) >> 1u;
    let odd = (g & 1u) == 1u;
    let q = after_half4(base, odd);
    let nib = vec4<u32>(0x0F0F0F0Fu);
    let x = *xs;
    let sum = dot16(q & nib, x.lo) + dot16((q >> vec4<u32>(4u)) & nib, x.hi);
    return half_at(w[base], odd) * (x.ds.x * f32(sum) - 8.0 * x.ds.y);
}

@compute @workgroup_size(WG)
fn matvec_q4_0_q8(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    matvec_wide(wid, nwg, lid);
}
