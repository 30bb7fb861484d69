// matvec_q4_0: y = W x for W in ggml's Q4_0 (see wgsl/include/matvec_quant.wgsl for the
// structure). A block is 32 elements in 18 bytes: d (f16) at byte 0, qs (16 bytes) at 2;
// element j < 16 is the low nibble of qs[j], element j + 16 its high nibble; value (q - 8) · d.
// Block g starts at byte 18g, 2 mod 4 for odd g: an invocation reads the 5 words from the one
// holding its byte 0 (an even block's last word ends 2 bytes past it, in the next block or the
// padding). qs word k holds qs[4k .. 4k + 4], so its low nibbles are elements 4k .. 4k + 4 and
// its high nibbles elements 16 + 4k .. 20 + 4k: x vec4s k and 4 + k. Two rows per workgroup.
//
// The block sum is d · Σ_j (q_j - 8) x_j: (q - 8) · d is exact in f32, so factoring d out keeps
// every term an exact w·x product rounded along at most 1 + 31 + 1 + (blocks - 1) <= cols
// operations.

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
    let base = (9u * g) >> 1u;
    let odd = (g & 1u) == 1u;
    var a: array<u32, 5>;
    for (var i = 0u; i < 5u; i++) {
        a[i] = w[base + i];
    }
    var s = 0.0;
    for (var k = 0u; k < 4u; k++) {
        let q = after_half(a[k], a[k + 1u], odd);
        s += dot(lo4(q) - 8.0, (*xs)[k]);
        s += dot(hi4(q) - 8.0, (*xs)[4u + k]);
    }
    return half_at(a[0], odd) * s;
}

@compute @workgroup_size(WG)
fn matvec_q4_0(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    matvec_quant(wid, nwg, lid);
}
