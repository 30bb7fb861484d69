// matvec_q4_1: y = W x for W in ggml's Q4_1 (see wgsl/include/matvec_quant.wgsl for the
// structure). A block is 32 elements in 20 bytes: d (f16) at byte 0, m (f16) at 2, qs (16
// bytes) at 4, nibbles ordered as in Q4_0; value q · d + m. Blocks are 20 bytes, so every one
// starts on a word: an invocation reads its 5 words (d and m, then qs words k = qs[4k .. 4k + 4],
// whose low nibbles are elements 4k .. 4k + 4 and high nibbles 16 + 4k .. 20 + 4k). Two rows
// per workgroup.
//
// Each weight is formed as q · d + m before it meets x, as ggml's dequantize does: q · d is
// exact, so the f32 weight is ggml's (fused or not), and a product w·x never hides a
// cancellation between q · d and m (factoring m out as m · Σx could).

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
    let base = 5u * (row * (p.cols / 32u) + u);
    let dm = unpack2x16float(w[base]);
    let d = vec4<f32>(dm.x);
    let m = vec4<f32>(dm.y);
    var s = 0.0;
    for (var k = 0u; k < 4u; k++) {
        let q = w[base + 1u + k];
        s += dot(lo4(q) * d + m, (*xs)[k]);
        s += dot(hi4(q) * d + m, (*xs)[4u + k]);
    }
    return s;
}

@compute @workgroup_size(WG)
fn matvec_q4_1(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    matvec_quant(wid, nwg, lid);
}
