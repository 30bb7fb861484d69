// A Q6_K super-block's 64-element unit (half n, t) of a quantized product with x in f32
// (matvec_q6_k.wgsl, whose header has the layout and the unit): `load_x` and `unit_dot` for
// wgsl/include/matvec_quant.wgsl.
// The includer sets `UNIT_X` = 16 and `alias XUnit = array<vec4<f32>, UNIT_X>` and includes
// matvec_quant_blocks.wgsl.

fn load_x(u: u32, xs: ptr<function, XUnit>) {
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

fn unit_dot(row: u32, u: u32, xs: ptr<function, XUnit>) -> f32 {
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
