// matvec_q4_1_q8: y = W x for W in ggml's Q4_1 (layout: matvec_q4_1.wgsl) and x as 8-bit blocks
// (quantize_q8.wgsl), laid out as matvec_q4_1_wide (quarter blocks, 64 invocations a row, 4
// rows a workgroup of 256; wgsl/include/matvec_quant_wide.wgsl). Unit k of a block is its qs
// word k: low nibbles elements 4k .. 4k + 4 (x's quant word k), high nibbles 16 + 4k .. 20 + 4k
// (word 4 + k). With x ≈ dx · qx and the weight q · d + m, the unit adds
// d · (dx · Σ q · qx) + m · s / 4 (Σ q · qx an integer dot product; s = dx · Σ qx, the
// block's sum of x as quantized, a quarter of it per unit): ggml's vec_dot_q4_1_q8_1, with s
// in f32 rather than f16.

const LANES: u32 = 64u;
const UNIT: u32 = 8u;

// #include "matvec_quant_wide.wgsl"
// #include "matvec_q8_blocks.wgsl"
// #include "q8_quarter_unit.wgsl"
// #include "ggml_quarters.wgsl"

fn load_x(u: u32, xs: ptr<function, XUnit>) {
    let k = u & 3u;
    *xs = xq_unit(u >> 2u, k, 4u + k);
}

fn unit_dot(row: u32, u: u32, xs: ptr<function, XUnit>) -> f32 {
    let q = q4_1_quarter(row, u);
    let lo = q.q & 0x0F0F0F0Fu;
    let hi = (q.q >> 4u) & 0x0F0F0F0Fu;
    return q.dm.x * scaled_dot(lo, hi, *xs) + q.dm.y * quarter_sum(*xs);
}

@compute @workgroup_size(WG)
fn matvec_q4_1_q8(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    matvec_wide(wid, nwg, lid);
}
