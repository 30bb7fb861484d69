// matvec_q4_1_q8: y = W x for W in ggml's Q4_1 (layout: matvec_q4_1.wgsl) and x as 8-bit blocks
// (quantize_q8.wgsl), by whole blocks: 32 invocations a row, 8 rows a workgroup of 256
// (wgsl/include/matvec_quant_wide.wgsl), two blocks a trip. A block is five words of W (d and
// m, then 16 bytes of quants) against ten of x (d, s, 32 signed bytes): qs word k holds
// elements 4k .. 4k + 4 in its low nibbles (x's quant word k) and 16 + 4k .. 20 + 4k in its
// high nibbles (word 4 + k). With x ≈ dx · qx and the weight q · d + m, the block adds
// d · (dx · Σ q · qx) + m · s (Σ q · qx an exact integer dot product of eight dot4I8Packed;
// s = dx · Σ qx, the block's sum of x as quantized): ggml's vec_dot_q4_1_q8_1, with s in f32
// rather than f16. By quarter blocks (64 invocations a row, a word of quants a unit beside
// its block's scale and x's: twice the loads per byte of W), the 16-layer 27B-class Q4_1 file
// decoded at 350 tokens/s on one H100 against 394 with this kernel; 16 invocations a row gave
// the same (docs/BENCHMARKS.md, "8-bit inputs").

const LANES: u32 = 32u;
const UNIT: u32 = 32u;

// #include "matvec_quant_wide.wgsl"
// #include "matvec_q8_blocks.wgsl"
// #include "q8_block_unit.wgsl"

fn unit_dot(row: u32, u: u32, xs: ptr<function, XUnit>) -> f32 {
    let base = 5u * (row * (p.cols / 32u) + u);
    let dm = unpack2x16float(w[base]);
    let q = vec4<u32>(w[base + 1u], w[base + 2u], w[base + 3u], w[base + 4u]);
    let nib = vec4<u32>(0x0F0F0F0Fu);
    let x = *xs;
    let sum = dot16(q & nib, x.lo) + dot16((q >> vec4<u32>(4u)) & nib, x.hi);
    return dm.x * (x.ds.x * f32(sum)) + dm.y * x.ds.y;
}

@compute @workgroup_size(WG)
fn matvec_q4_1_q8(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    matvec_wide(wid, nwg, lid);
}
