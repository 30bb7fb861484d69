// matmul_bf16: the prompt's product over bf16 weights as stored ([rows, cols], cols % 8 == 0,
// so every row starts on a word): see wgsl/include/matmul_tile.wgsl. A bf16 is the top half
// of an f32: exact.

// #include "matmul_tile.wgsl"

fn bf16x2(v: u32) -> vec2<f32> {
    return vec2<f32>(bitcast<f32>(v << 16u), bitcast<f32>(v & 0xffff0000u));
}

fn load_w8(row: u32, col: u32) -> W8 {
    let i = (row * p.cols + col) >> 1u;
    return W8(vec4<f32>(bf16x2(w_word(i)), bf16x2(w_word(i + 1u))),
        vec4<f32>(bf16x2(w_word(i + 2u)), bf16x2(w_word(i + 3u))));
}

@compute @workgroup_size(64)
fn matmul_bf16(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    matmul_tile(wid, lid);
}
