// A Q4_K super-block's 64-element chunk as the unit of a quantized product with x in f32
// (matvec_q4_k.wgsl, whose header has the layout): `load_x` and `unit_dot` for
// wgsl/include/matvec_quant.wgsl. The
// includer sets `UNIT_X` = 16 and `alias XUnit = array<vec4<f32>, UNIT_X>` and includes
// matvec_quant_blocks.wgsl and q4_k_scales.wgsl.

fn load_x(u: u32, xs: ptr<function, XUnit>) {
    load_x_run(u, xs);
}

fn unit_dot(row: u32, u: u32, xs: ptr<function, XUnit>) -> f32 {
    let base = 36u * (row * (p.cols / 256u) + u / 4u);
    let c = u % 4u;
    let dm = unpack2x16float(w[base]);
    let sw = vec3<u32>(w[base + 1u], w[base + 2u], w[base + 3u]);
    let sm1 = scale_min(sw, 2u * c);
    let sm2 = scale_min(sw, 2u * c + 1u);
    let d1 = vec4<f32>(dm.x * sm1.x);
    let m1 = vec4<f32>(dm.y * sm1.y);
    let d2 = vec4<f32>(dm.x * sm2.x);
    let m2 = vec4<f32>(dm.y * sm2.y);
    let qs = base + 4u + 8u * c;
    var s = 0.0;
    for (var k = 0u; k < 8u; k++) {
        let q = w[qs + k];
        s += dot(lo4(q) * d1 - m1, (*xs)[k]);
        s += dot(hi4(q) * d2 - m2, (*xs)[8u + k]);
    }
    return s;
}
