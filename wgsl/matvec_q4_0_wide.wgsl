// matvec_q4_0_wide: y = W x for W in ggml's Q4_0 (layout and bound: matvec_q4_0.wgsl), by
// quarter blocks, 64 invocations a row in a workgroup of 256 (4 rows; see
// wgsl/include/matvec_quant_wide.wgsl). A unit is a quarter of a block: qs bytes 4k .. 4k + 4
// (the block's bytes 2 + 4k .. 6 + 4k, funnelled out of two words where the 18-byte block starts
// at a word's byte 2), low nibbles elements 4k .. 4k + 4, high nibbles 16 + 4k .. 20 + 4k,
// values (q - 8) · d.

const LANES: u32 = 64u;
const UNIT: u32 = 8u;
const UNIT_X: u32 = 2u;
alias XUnit = array<vec4<f32>, UNIT_X>;

// #include "matvec_quant_wide.wgsl"
// #include "matvec_quant_blocks.wgsl"
// #include "ggml_quarters.wgsl"

fn load_x(u: u32, xs: ptr<function, XUnit>) {
    let b = u >> 2u;
    let k = u & 3u;
    (*xs)[0] = x[8u * b + k];
    (*xs)[1] = x[8u * b + 4u + k];
}

fn unit_dot(row: u32, u: u32, xs: ptr<function, XUnit>) -> f32 {
    let q = q4_0_quarter(row, u);
    return q.d * (dot(lo4(q.q) - 8.0, (*xs)[0]) + dot(hi4(q.q) - 8.0, (*xs)[1]));
}

@compute @workgroup_size(WG)
fn matvec_q4_0_wide(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    matvec_wide(wid, nwg, lid);
}
