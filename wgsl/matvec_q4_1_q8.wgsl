// matvec_q4_1_q8: y = W x for W in ggml's Q4_1 (layout: matvec_q4_1.wgsl) and x as 8-bit blocks
// (quantize_q8.wgsl), by whole blocks: 32 invocations a row, 8 rows a workgroup of 256
// (wgsl/include/matvec_quant_wide.wgsl), two blocks a trip. A block is five words of W (d and
// m, then 16 bytes of quants) against ten of x (d, s, 32 signed bytes): qs word k holds
// elements 4k .. 4k + 4 in its low nibbles (x's quant word k) and 16 + 4k .. 20 + 4k in its
// high nibbles (word 4 + k). With x ≈ dx · qx and the weight q · d + m, the block adds
// d · (dx · Σ q · qx) + m · s (Σ q · qx an exact integer dot product of eight dot4I8Packed;
// s = dx · Σ qx, the block's sum of x as quantized): ggml's vec_dot_q4_1_q8_1, with s in f32
// rather than f16. (By quarter blocks, 64 invocations a row, each unit loaded a word of quants
// beside its block's scale and x's: six loads per four bytes of W against three here.)

const LANES: u32 = 32u;
const UNIT: u32 = 32u;

// #include "matvec_quant_wide.wgsl"
// #include "matvec_q8_blocks.wgsl"

// A block of x: quant words 0 .. 4 (elements 0 .. 16) and 4 .. 8 (16 .. 32), then d and s.
struct XUnit {
    lo: vec4<u32>,
    hi: vec4<u32>,
    ds: vec2<f32>,
}

fn load_x(u: u32, xs: ptr<function, XUnit>) {
    let a = 10u * u;
    *xs = XUnit(
        vec4<u32>(xq[a + 2u], xq[a + 3u], xq[a + 4u], xq[a + 5u]),
        vec4<u32>(xq[a + 6u], xq[a + 7u], xq[a + 8u], xq[a + 9u]),
        vec2<f32>(bitcast<f32>(xq[a]), bitcast<f32>(xq[a + 1u])),
    );
}

fn unit_dot(row: u32, u: u32, xs: ptr<function, XUnit>) -> f32 {
    let base = 5u * (row * (p.cols / 32u) + u);
    let dm = unpack2x16float(w[base]);
    let q = vec4<u32>(w[base + 1u], w[base + 2u], w[base + 3u], w[base + 4u]);
    let lo = q & vec4<u32>(0x0F0F0F0Fu);
    let hi = (q >> vec4<u32>(4u)) & vec4<u32>(0x0F0F0F0Fu);
    let x = *xs;
    let low = (dot4I8Packed(lo.x, x.lo.x) + dot4I8Packed(lo.y, x.lo.y))
        + (dot4I8Packed(lo.z, x.lo.z) + dot4I8Packed(lo.w, x.lo.w));
    let high = (dot4I8Packed(hi.x, x.hi.x) + dot4I8Packed(hi.y, x.hi.y))
        + (dot4I8Packed(hi.z, x.hi.z) + dot4I8Packed(hi.w, x.hi.w));
    return dm.x * (x.ds.x * f32(low + high)) + dm.y * x.ds.y;
}

@compute @workgroup_size(WG)
fn matvec_q4_1_q8(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    matvec_wide(wid, nwg, lid);
}
