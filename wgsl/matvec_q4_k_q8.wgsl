// matvec_q4_k_q8: y = W x for W in ggml's Q4_K (layout: matvec_q4_k.wgsl) and x as 8-bit blocks
// (quantize_q8.wgsl), by 64-element chunks: 32 invocations a row, 8 rows a workgroup of 256
// (wgsl/include/matvec_quant_wide.wgsl), two chunks a trip. Chunk c of a super-block is its qs
// words 8c .. 8c + 8, whose low nibbles are sub-block 2c (x's block 2u for unit u = 4g + c)
// and high nibbles sub-block 2c + 1 (block 2u + 1). With x ≈ dx · qx and the weight
// d · sc · q - dmin · m, each sub-block adds d · sc · (dx · Σ q · qx) - dmin · m · s
// (Σ q · qx eight integer dot products; s = dx · Σ qx, the block's sum of x as quantized):
// ggml's vec_dot_q4_K_q8_1. The eight 6-bit scales and mins are unpacked into bytes as ggml's
// CPU kernels do (no branch, no indexing by lane). (By half chunks, 64 invocations a row with
// a branch per scale, the same file decoded 28% slower than llama.cpp's Vulkan backend.)

const LANES: u32 = 32u;
const UNIT: u32 = 64u;

// #include "matvec_quant_wide.wgsl"
// #include "matvec_q8_blocks.wgsl"

// A chunk's x: x's blocks 2u and 2u + 1 (sub-blocks 2c and 2c + 1).
struct XUnit {
    a: XBlock,
    b: XBlock,
}

fn load_x(u: u32, xs: ptr<function, XUnit>) {
    *xs = XUnit(x_block(2u * u), x_block(2u * u + 1u));
}

fn unit_dot(row: u32, u: u32, xs: ptr<function, XUnit>) -> f32 {
    let base = 36u * (row * (p.cols / 256u) + (u >> 2u));
    let c = u & 3u;
    let dm = unpack2x16float(w[base]);
    let s0 = w[base + 1u];
    let s1 = w[base + 2u];
    let s2 = w[base + 3u];
    // Scales 0 .. 4 are the low 6 bits of bytes 0 .. 4 and mins 0 .. 4 of bytes 4 .. 8; scales
    // and mins 4 .. 8 are the low and high nibbles of bytes 8 .. 12 under the top two bits of
    // bytes 0 .. 4 and 4 .. 8 (ggml's get_scale_min_k4). Chunk c takes bytes 2c, 2c + 1 of the
    // first four or 2c - 4, 2c - 3 of the second.
    let six = 0x3F3F3F3Fu;
    let nib = 0x0F0F0F0Fu;
    let top = 0x03030303u;
    let high = c >= 2u;
    let scales = select(s0 & six, (s2 & nib) | (((s0 >> 6u) & top) << 4u), high);
    let mins = select(s1 & six, ((s2 >> 4u) & nib) | (((s1 >> 6u) & top) << 4u), high);
    let sh = 16u * (c & 1u);
    let sc = vec2<f32>(f32((scales >> sh) & 255u), f32((scales >> (sh + 8u)) & 255u));
    let mn = vec2<f32>(f32((mins >> sh) & 255u), f32((mins >> (sh + 8u)) & 255u));
    let qs = base + 4u + 8u * c;
    let q0 = vec4<u32>(w[qs], w[qs + 1u], w[qs + 2u], w[qs + 3u]);
    let q1 = vec4<u32>(w[qs + 4u], w[qs + 5u], w[qs + 6u], w[qs + 7u]);
    let m4 = vec4<u32>(nib);
    let x = *xs;
    let sa = dot16(q0 & m4, x.a.lo) + dot16(q1 & m4, x.a.hi);
    let sb = dot16((q0 >> vec4<u32>(4u)) & m4, x.b.lo) + dot16((q1 >> vec4<u32>(4u)) & m4, x.b.hi);
    let scaled = sc.x * (x.a.ds.x * f32(sa)) + sc.y * (x.b.ds.x * f32(sb));
    return dm.x * scaled - dm.y * (mn.x * x.a.ds.y + mn.y * x.b.ds.y);
}

@compute @workgroup_size(WG)
fn matvec_q4_k_q8(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    matvec_wide(wid, nwg, lid);
}
