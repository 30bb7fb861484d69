// matvec_q6_k: y = W x for W in ggml's Q6_K (see wgsl/include/matvec_quant.wgsl for the
// structure). A super-block is 256 elements in 210 bytes: ql (128 bytes, low 4 bits) at 0, qh
// (64 bytes, high 2 bits) at 128, scales (16 × i8, one per 16 elements) at 192, d (f16) at 208.
// Two halves of 128; half n uses ql[64n ..], qh[32n ..], scales[8n ..]. For l < 32 with
// h = qh[l]: element l is ql[l] & 15 | (h & 3) << 4, element l + 32 is ql[l + 32] & 15 |
// (h >> 2 & 3) << 4, element l + 64 is ql[l] >> 4 | (h >> 4 & 3) << 4, element l + 96 is
// ql[l + 32] >> 4 | (h >> 6) << 4; each minus 32, times d times the scale of its 16.
//
// The unit of work is 64 elements, (half n, t = 0 or 1): elements 32t + l and 64 + 32t + l of
// the half, the low and high nibbles of ql[32t + l] with qh[l]'s bits 2t and 4 + 2t, so a unit
// reads 8 ql words, 8 qh words, 2 scale words and d, and two runs of 8 vec4 of x. Super-block g
// starts at byte 210g, 2 mod 4 for odd g, where every field is then half a word off: each is
// funnelled out of the words from the one holding the super-block's byte 0 (`straddle`); the
// last word read ends at most 2 bytes past the block (an even one's), in the next or the
// padding. Two rows per workgroup.
//
// Each group of 16 sums Σ (q - 32)·x and multiplies by d·scale: d·scale and d·scale·q are exact
// in f32 (11 + 8 + 6 significant bits at most), so every term is an exact w·x product rounded
// along at most 1 + 15 + 1 + (cols/16 - 1) <= cols operations.

const ROWS: u32 = 2u;
const UNIT: u32 = 64u;
const UNIT_X: u32 = 16u;

const WG: u32 = 64u;

// #include "matvec_quant.wgsl"
// #include "matvec_quant_blocks.wgsl"

fn load_x(u: u32, xs: ptr<function, array<vec4<f32>, UNIT_X>>) {
    // Elements 256(u / 4) + 128n + 32t .. + 32 and 64 further, as vec4s.
    let first = 16u * u - 8u * (u % 2u);
    for (var k = 0u; k < 8u; k++) {
        (*xs)[k] = x[first + k];
        (*xs)[8u + k] = x[first + 16u + k];
    }
}

// The 6-bit quants of four elements from a ql word's nibbles (shifted by `nib`) and a qh
// word's bit pairs (shifted by `hb`), minus 32.
fn q6x4(ql: u32, qh: u32, nib: u32, hb: u32) -> vec4<f32> {
    let lo = (vec4<u32>(ql) >> (vec4<u32>(0u, 8u, 16u, 24u) + nib)) & vec4<u32>(15u);
    let hi = (vec4<u32>(qh) >> (vec4<u32>(0u, 8u, 16u, 24u) + hb)) & vec4<u32>(3u);
    return vec4<f32>(lo | (hi << vec4<u32>(4u))) - 32.0;
}

// Signed byte i (0..4) of v.
fn i8_at(v: u32, i: u32) -> f32 {
    return f32(bitcast<i32>(v << (24u - 8u * i)) >> 24u);
}

fn unit_dot(row: u32, u: u32, xs: ptr<function, array<vec4<f32>, UNIT_X>>) -> f32 {
    let g = row * (p.cols / 256u) + u / 4u;
    let base = (105u * g) >> 1u;
    let odd = (g & 1u) == 1u;
    let n = (u % 4u) / 2u;
    let t = u % 2u;
    let d = half_at(w[base + 52u], odd);
    let ql = base + 16u * n + 8u * t;
    let qh = base + 32u + 8u * n;
    let sc = base + 48u + 2u * n;
    let s0 = straddle(w[sc], w[sc + 1u], odd);
    let s1 = straddle(w[sc + 1u], w[sc + 2u], odd);
    // Scales 2t, 2t + 1 (low nibbles) and 4 + 2t, 5 + 2t (high nibbles) of the half's eight.
    let sh = 2u * t;
    var sums = vec4<f32>(0.0);
    for (var k = 0u; k < 8u; k++) {
        let lw = straddle(w[ql + k], w[ql + k + 1u], odd);
        let hw = straddle(w[qh + k], w[qh + k + 1u], odd);
        let a = dot(q6x4(lw, hw, 0u, 2u * t), (*xs)[k]);
        let b = dot(q6x4(lw, hw, 4u, 4u + 2u * t), (*xs)[8u + k]);
        if (k < 4u) {
            sums += vec4<f32>(a, 0.0, b, 0.0);
        } else {
            sums += vec4<f32>(0.0, a, 0.0, b);
        }
    }
    let scales = d * vec4<f32>(i8_at(s0, sh), i8_at(s0, sh + 1u), i8_at(s1, sh), i8_at(s1, sh + 1u));
    return dot(scales, sums);
}

@compute @workgroup_size(WG)
fn matvec_q6_k(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    matvec_quant(wid, nwg, lid);
}
