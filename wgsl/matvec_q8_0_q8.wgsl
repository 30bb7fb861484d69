// matvec_q8_0_q8: y = W x for W in ggml's Q8_0 (layout: matvec_q8_0.wgsl) and x as 8-bit blocks
// (quantize_q8.wgsl), by whole blocks: 32 invocations a row, 8 rows a workgroup of 256
// (wgsl/include/matvec_quant_wide.wgsl), two blocks a trip. A 34-byte block starts at byte 2
// of word (17g) >> 1 for odd g and on it for even g: its qs word j (elements 4j .. 4j + 4, x's
// quant word j) is funnelled out of words j and j + 1 from there, nine words in all. With
// x ≈ dx · qx and the weight q · d, the block adds d · (dx · Σ q · qx): ggml's
// vec_dot_q8_0_q8_1.

const LANES: u32 = 32u;
const UNIT: u32 = 32u;

// #include "matvec_quant_wide.wgsl"
// #include "matvec_q8_blocks.wgsl"
// #include "q8_block_unit.wgsl"

fn unit_dot(row: u32, u: u32, xs: ptr<function, XUnit>) -> f32 {
    let g = row * (p.cols / 32u) + u;
    let base = (17u * g) >> 1u;
    let odd = (g & 1u) == 1u;
    let lo = after_half4(base, odd);
    let hi = after_half4(base + 4u, odd);
    let x = *xs;
    return half_at(w[base], odd) * (x.ds.x * f32(dot16(lo, x.lo) + dot16(hi, x.hi)));
}

@compute @workgroup_size(WG)
fn matvec_q8_0_q8(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    matvec_wide(wid, nwg, lid);
}
