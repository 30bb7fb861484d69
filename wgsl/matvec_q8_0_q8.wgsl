// matvec_q8_0_q8: y = W x for W in ggml's Q8_0 (layout: matvec_q8_0.wgsl) and x as 8-bit blocks
// (quantize_q8.wgsl), laid out as matvec_q8_0_wide (quarter blocks, 64 invocations a row, 4
// rows a workgroup of 256; wgsl/include/matvec_quant_wide.wgsl). Unit k of a block is its qs
// bytes 8k .. 8k + 8 (funnelled out of three words where the 34-byte block starts at a word's
// byte 2), elements 8k .. 8k + 8 (x's quant words 2k, 2k + 1). With x ≈ dx · qx and the weight
// q · d, the unit adds d · (dx · Σ q · qx): ggml's vec_dot_q8_0_q8_1.

const LANES: u32 = 64u;
const UNIT: u32 = 8u;

// #include "matvec_quant_wide.wgsl"
// #include "matvec_q8_blocks.wgsl"
// #include "q8_quarter_unit.wgsl"
// #include "ggml_quarters.wgsl"

fn load_x(u: u32, xs: ptr<function, XUnit>) {
    let k = u & 3u;
    *xs = xq_unit(u >> 2u, 2u * k, 2u * k + 1u);
}

fn unit_dot(row: u32, u: u32, xs: ptr<function, XUnit>) -> f32 {
    let q = q8_0_quarter(row, u);
    return q.d * scaled_dot(q.lo, q.hi, *xs);
}

@compute @workgroup_size(WG)
fn matvec_q8_0_q8(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    matvec_wide(wid, nwg, lid);
}
