// The unit of the 32-element formats' products with 8-bit x by whole blocks (matvec_q8_0_q8,
// matvec_q4_0_q8, matvec_q4_1_q8): x's block u, its quant words 0 .. 4 (elements 0 .. 16) and
// 4 .. 8 (16 .. 32), then its d and s. Needs matvec_q8_blocks.wgsl.

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
