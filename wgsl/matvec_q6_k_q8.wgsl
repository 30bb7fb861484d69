// matvec_q6_k_q8: y = W x for W in ggml's Q6_K (layout: matvec_q6_k.wgsl) and x as 8-bit blocks
// (quantize_q8.wgsl), in the wide layout (64 invocations a row, 4 rows a workgroup of 256;
// wgsl/include/matvec_quant_wide.wgsl). A unit is 32 elements of a half n of a super-block,
// t, h in 0, 1: the low nibbles of ql bytes 64n + 32t + 16h .. + 16 with qh bytes
// 32n + 16h .. + 16's bit pairs 2t (elements 32t + 16h .. + 16 of the half, the second or first
// 16 of x's block 4n + t, scale 2t + h of the half's eight) and their high nibbles with bit
// pairs 4 + 2t (elements 64 + 32t + 16h .., x's block 4n + 2 + t, scale 4 + 2t + h). The 6-bit
// quants q (0 ..= 63) go into the integer dot products as they are, and the offset of 32 as
// 32 · Σ qx (a dot product with ones): each group of 16 adds
// d · sc · dx · (Σ q · qx - 32 · Σ qx), ggml's vec_dot_q6_K_q8_1. Super-blocks start at byte
// 210g, half a word off for odd g: fields funnelled as matvec_q6_k reads them.

const LANES: u32 = 64u;
const UNIT: u32 = 32u;

// The unit's x: the first group's four quant words, the second's, then the two blocks' d.
alias XUnit = array<vec4<u32>, 3>;

// #include "matvec_quant_wide.wgsl"
// #include "matvec_q8_blocks.wgsl"

fn load_x(u: u32, xs: ptr<function, XUnit>) {
    // u = 8 · super-block + 4n + 2t + h.
    let b = 8u * (u >> 3u) + 4u * ((u >> 2u) & 1u) + ((u >> 1u) & 1u);
    let j = 4u * (u & 1u);
    (*xs)[0] = vec4<u32>(xq_word(b, j), xq_word(b, j + 1u), xq_word(b, j + 2u), xq_word(b, j + 3u));
    let b2 = b + 2u;
    (*xs)[1] = vec4<u32>(xq_word(b2, j), xq_word(b2, j + 1u), xq_word(b2, j + 2u), xq_word(b2, j + 3u));
    (*xs)[2] = vec4<u32>(xq[10u * b], xq[10u * b2], 0u, 0u);
}

// Σ (q - 32) · qx over four words of quants `q` (bytes 0 ..= 63) and of x.
fn offset_dot(q: vec4<u32>, x: vec4<u32>) -> i32 {
    return dot16(q, x) - 32 * dot16(vec4<u32>(0x01010101u), x);
}

// Signed byte i (0..4) of v.
fn i8_at(v: u32, i: u32) -> f32 {
    return f32(bitcast<i32>(v << (24u - 8u * i)) >> 24u);
}

fn unit_dot(row: u32, u: u32, xs: ptr<function, XUnit>) -> f32 {
    let g = row * (p.cols / 256u) + (u >> 3u);
    let base = (105u * g) >> 1u;
    let odd = (g & 1u) == 1u;
    let n = (u >> 2u) & 1u;
    let t = (u >> 1u) & 1u;
    let h = u & 1u;
    let d = half_at(w[base + 52u], odd);
    let ql = base + 16u * n + 8u * t + 4u * h;
    let qh = base + 32u + 8u * n + 4u * h;
    let lw = straddle4(ql, odd);
    let hw = straddle4(qh, odd);
    let nibbles = vec4<u32>(0x0F0F0F0Fu);
    let pairs = vec4<u32>(0x03030303u);
    let q1 = (lw & nibbles) | (((hw >> vec4<u32>(2u * t)) & pairs) << vec4<u32>(4u));
    let q2 = ((lw >> vec4<u32>(4u)) & nibbles) | (((hw >> vec4<u32>(4u + 2u * t)) & pairs) << vec4<u32>(4u));
    // The scales of the two groups: bytes 2t + h and 4 + 2t + h of the half's eight.
    let sc = base + 48u + 2u * n;
    let s0 = straddle(w[sc], w[sc + 1u], odd);
    let s1 = straddle(w[sc + 1u], w[sc + 2u], odd);
    let sh = 2u * t + h;
    let dx = bitcast<vec2<f32>>((*xs)[2].xy);
    let first = i8_at(s0, sh) * (dx.x * f32(offset_dot(q1, (*xs)[0])));
    let second = i8_at(s1, sh) * (dx.y * f32(offset_dot(q2, (*xs)[1])));
    return d * (first + second);
}

@compute @workgroup_size(WG)
fn matvec_q6_k_q8(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    matvec_wide(wid, nwg, lid);
}
