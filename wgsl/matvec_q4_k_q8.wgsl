// matvec_q4_k_q8: y = W x for W in ggml's Q4_K (layout: matvec_q4_k.wgsl) and x as 8-bit blocks
// (quantize_q8.wgsl), in the wide layout (64 invocations a row, 4 rows a workgroup of 256;
// wgsl/include/matvec_quant_wide.wgsl). A super-block's sub-blocks of 32 are x's blocks of 32.
// A unit is half of a 64-element chunk c: its qs words 4h .. 4h + 4 (h = 0, 1), whose low
// nibbles are elements 16h .. 16h + 16 of sub-block 2c (x's quant words 4h .. 4h + 4 of that
// block) and high nibbles the same elements of sub-block 2c + 1. With x ≈ dx · qx and the
// weight d · sc · q - dmin · m, each of the two sub-blocks adds
// d · sc · (dx · Σ q · qx) - dmin · m · s / 2 (Σ q · qx four integer dot products; s = dx · Σ qx,
// the block's sum of x as quantized, half of it per unit): ggml's vec_dot_q4_K_q8_1.

const LANES: u32 = 64u;
const UNIT: u32 = 32u;

// The unit's x: the first sub-block's four quant words, the second's, then (d, s) of each.
alias XUnit = array<vec4<u32>, 3>;

// #include "matvec_quant_wide.wgsl"
// #include "matvec_q8_blocks.wgsl"
// #include "q4_k_scales.wgsl"

fn load_x(u: u32, xs: ptr<function, XUnit>) {
    let b = 8u * (u >> 3u) + 2u * ((u >> 1u) & 3u);
    let j = 4u * (u & 1u);
    (*xs)[0] = vec4<u32>(xq_word(b, j), xq_word(b, j + 1u), xq_word(b, j + 2u), xq_word(b, j + 3u));
    (*xs)[1] = vec4<u32>(xq_word(b + 1u, j), xq_word(b + 1u, j + 1u), xq_word(b + 1u, j + 2u), xq_word(b + 1u, j + 3u));
    (*xs)[2] = vec4<u32>(xq[10u * b], xq[10u * b + 1u], xq[10u * b + 10u], xq[10u * b + 11u]);
}

fn unit_dot(row: u32, u: u32, xs: ptr<function, XUnit>) -> f32 {
    let base = 36u * (row * (p.cols / 256u) + (u >> 3u));
    let c = (u >> 1u) & 3u;
    let dm = unpack2x16float(w[base]);
    let sw = vec3<u32>(w[base + 1u], w[base + 2u], w[base + 3u]);
    let sm1 = scale_min(sw, 2u * c);
    let sm2 = scale_min(sw, 2u * c + 1u);
    let qs = base + 4u + 8u * c + 4u * (u & 1u);
    let q = vec4<u32>(w[qs], w[qs + 1u], w[qs + 2u], w[qs + 3u]);
    let lo = q & vec4<u32>(0x0F0F0F0Fu);
    let hi = (q >> vec4<u32>(4u)) & vec4<u32>(0x0F0F0F0Fu);
    let x1 = (*xs)[0];
    let x2 = (*xs)[1];
    let s1 = (dot4I8Packed(lo.x, x1.x) + dot4I8Packed(lo.y, x1.y)) + (dot4I8Packed(lo.z, x1.z) + dot4I8Packed(lo.w, x1.w));
    let s2 = (dot4I8Packed(hi.x, x2.x) + dot4I8Packed(hi.y, x2.y)) + (dot4I8Packed(hi.z, x2.z) + dot4I8Packed(hi.w, x2.w));
    let ds = bitcast<vec4<f32>>((*xs)[2]);
    let scaled = sm1.x * (ds.x * f32(s1)) + sm2.x * (ds.z * f32(s2));
    let mins = sm1.y * ds.y + sm2.y * ds.w;
    return dm.x * scaled - dm.y * (0.5 * mins);
}

@compute @workgroup_size(WG)
fn matvec_q4_k_q8(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    matvec_wide(wid, nwg, lid);
}
