// matvec_q4_k_wide: y = W x for W in ggml's Q4_K (layout: matvec_q4_k.wgsl), by 64-element
// units (wgsl/include/q4_k_chunk.wgsl), 32 invocations a row in a workgroup of 256 (8 rows;
// wgsl/include/matvec_quant_wide.wgsl): each invocation's sum a scalar and two units' loads in
// flight a trip, as the Q8_0/Q4_0/Q4_1 `_wide` kernels, where matvec_q4_k keeps two rows' sums
// in a function-local array. 32 lanes, not 64: a 5120-column row has 80 units.

const LANES: u32 = 32u;
const UNIT: u32 = 64u;
const UNIT_X: u32 = 16u;
alias XUnit = array<vec4<f32>, UNIT_X>;

// #include "matvec_quant_wide.wgsl"
// #include "matvec_quant_blocks.wgsl"
// #include "q4_k_scales.wgsl"
// #include "q4_k_chunk.wgsl"

@compute @workgroup_size(WG)
fn matvec_q4_k_wide(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    matvec_wide(wid, nwg, lid);
}
