// matvec_q4_1_wide: y = W x for W in ggml's Q4_1 (layout: matvec_q4_1.wgsl), by quarter
// blocks, 64 invocations a row in a workgroup of 256 (4 rows; see
// wgsl/include/matvec_quant_wide.wgsl). A unit is a quarter of a block: its qs word k (the
// block's word 1 + k), whose low nibbles are elements 4k .. 4k + 4 and high nibbles
// 16 + 4k .. 20 + 4k, with the block's d and m (word 0). The weight is formed as q · d + m
// before it meets x, as ggml's dequantize does.

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
    let q = q4_1_quarter(row, u);
    let dm = q.dm;
    return dot(lo4(q.q) * dm.x + dm.y, (*xs)[0]) + dot(hi4(q.q) * dm.x + dm.y, (*xs)[1]);
}

@compute @workgroup_size(WG)
fn matvec_q4_1_wide(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    matvec_wide(wid, nwg, lid);
}
