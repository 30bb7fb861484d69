// matvec_bf16: y = W x for W in bfloat16 as stored (Hugging Face checkpoints' bf16, ggml's BF16),
// 4 rows per workgroup (see wgsl/include/matvec_quant.wgsl for the structure). A bf16 is the
// top 16 bits of an f32, so element 2i + h of a word-aligned run is `bitcast<f32>` of word i's
// half h moved to the top: exact, no rounding. A unit is 8 elements (4 words, two vec4 of x);
// rows are a whole number of units (QuantFormat::BF16 blocks of 8), so every row starts on a word.

const ROWS: u32 = 4u;
const UNIT: u32 = 8u;
const UNIT_X: u32 = 2u;
alias XUnit = array<vec4<f32>, UNIT_X>;

const WG: u32 = 64u;

// #include "matvec_quant.wgsl"
// #include "matvec_quant_blocks.wgsl"

fn load_x(u: u32, xs: ptr<function, XUnit>) {
    load_x_run(u, xs);
}

// The two bf16 halves of word v as f32, low half first.
fn bf16x2(v: u32) -> vec2<f32> {
    return vec2<f32>(bitcast<f32>(v << 16u), bitcast<f32>(v & 0xffff0000u));
}

fn unit_dot(row: u32, u: u32, xs: ptr<function, XUnit>) -> f32 {
    let base = 4u * (row * (p.cols / 8u) + u);
    let a = bf16x2(w[base]);
    let b = bf16x2(w[base + 1u]);
    let c = bf16x2(w[base + 2u]);
    let d = bf16x2(w[base + 3u]);
    return dot(vec4<f32>(a, b), (*xs)[0]) + dot(vec4<f32>(c, d), (*xs)[1]);
}

@compute @workgroup_size(WG)
fn matvec_bf16(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    matvec_quant(wid, nwg, lid);
}
