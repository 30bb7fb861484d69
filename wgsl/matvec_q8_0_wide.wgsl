// matvec_q8_0_wide: y = W x for W in ggml's Q8_0 (layout and bound: matvec_q8_0.wgsl), by
// quarter blocks, 64 invocations a row in a workgroup of 256 (4 rows; see
// wgsl/include/matvec_quant_wide.wgsl). A unit is a quarter of a block: qs bytes 8k .. 8k + 8
// (the block's bytes 2 + 8k .. 10 + 8k, funnelled out of three words where the 34-byte block
// starts at a word's byte 2), elements 8k .. 8k + 8 (two contiguous vec4 of x), values q · d.

const LANES: u32 = 64u;
const UNIT: u32 = 8u;
const UNIT_X: u32 = 2u;
alias XUnit = array<vec4<f32>, UNIT_X>;

// #include "matvec_quant_wide.wgsl"
// #include "matvec_quant_blocks.wgsl"
// #include "ggml_quarters.wgsl"

fn load_x(u: u32, xs: ptr<function, XUnit>) {
    (*xs)[0] = x[2u * u];
    (*xs)[1] = x[2u * u + 1u];
}

fn unit_dot(row: u32, u: u32, xs: ptr<function, XUnit>) -> f32 {
    let q = q8_0_quarter(row, u);
    return q.d * (dot(i8x4(q.lo), (*xs)[0]) + dot(i8x4(q.hi), (*xs)[1]));
}

@compute @workgroup_size(WG)
fn matvec_q8_0_wide(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    matvec_wide(wid, nwg, lid);
}
