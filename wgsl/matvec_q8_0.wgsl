// matvec_q8_0: y = W x for W in ggml's Q8_0 (see wgsl/include/matvec_quant.wgsl for the
// structure). A block is 32 elements in 34 bytes: d (f16) at byte 0, qs (32 × i8) at 2;
// element j is qs[j] · d. Block g of the matrix starts at byte 34g, which is 2 mod 4 for odd g,
// so an invocation reads a block as the 9 words from the one holding its byte 0 (always within
// the zero-padded buffer: an even block's last word ends 2 bytes past it, in the next block or
// the padding) and funnels qs out of neighbouring halves. Two rows per workgroup of 64.
//
// The block sum is d · Σ_j qs[j] x[j]: qs[j] · d is exact in f32 (8 + 11 significant bits), so
// factoring d out keeps every term an exact w·x product rounded along a path of at most
// 1 + 31 + 1 + (blocks - 1) <= cols operations (the bound the tests use).

const ROWS: u32 = 2u;
const UNIT: u32 = 32u;
const UNIT_X: u32 = 8u;
alias XUnit = array<vec4<f32>, UNIT_X>;

const WG: u32 = 64u;

// #include "matvec_quant.wgsl"
// #include "matvec_quant_blocks.wgsl"

fn load_x(u: u32, xs: ptr<function, XUnit>) {
    load_x_run(u, xs);
}

fn unit_dot(row: u32, u: u32, xs: ptr<function, XUnit>) -> f32 {
    let g = row * (p.cols / 32u) + u;
    let base = (17u * g) >> 1u;
    let odd = (g & 1u) == 1u;
    var a: array<u32, 9>;
    for (var i = 0u; i < 9u; i++) {
        a[i] = w[base + i];
    }
    var s = 0.0;
    for (var k = 0u; k < 8u; k++) {
        s += dot(i8x4(after_half(a[k], a[k + 1u], odd)), (*xs)[k]);
    }
    return half_at(a[0], odd) * s;
}

@compute @workgroup_size(WG)
fn matvec_q8_0(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    matvec_quant(wid, nwg, lid);
}
