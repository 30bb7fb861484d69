// matmul_f16: the prompt's product over f16 weights [rows, cols] (any cols: an odd width puts
// every other row's start in the middle of a word, and its elements are read one by one): see
// wgsl/include/matmul_tile.wgsl.

// #include "matmul_tile.wgsl"

// Element i of W (clamped into the buffer), or 0 when `ok` is false.
fn w_f16(i: u32, ok: bool) -> f32 {
    let h = unpack2x16float(w_word(i >> 1u));
    return select(0.0, select(h.x, h.y, (i & 1u) == 1u), ok);
}

fn load_w8(row: u32, col: u32) -> W8 {
    let i = row * p.cols + col;
    let c = vec4<u32>(col) + vec4<u32>(0u, 1u, 2u, 3u);
    if ((p.cols & 1u) == 0u) {
        // Even widths: every row starts on a word, so 8 elements are 4 words (those past the
        // row's end read the next row's and are zeroed).
        let h = i >> 1u;
        let a = vec4<f32>(unpack2x16float(w_word(h)), unpack2x16float(w_word(h + 1u)));
        let b = vec4<f32>(unpack2x16float(w_word(h + 2u)), unpack2x16float(w_word(h + 3u)));
        let n = vec4<u32>(p.cols);
        return W8(select(vec4<f32>(0.0), a, c < n), select(vec4<f32>(0.0), b, c + vec4<u32>(4u) < n));
    }
    let a = vec4<f32>(w_f16(i, c.x < p.cols), w_f16(i + 1u, c.y < p.cols), w_f16(i + 2u, c.z < p.cols),
        w_f16(i + 3u, c.w < p.cols));
    let b = vec4<f32>(w_f16(i + 4u, c.x + 4u < p.cols), w_f16(i + 5u, c.y + 4u < p.cols),
        w_f16(i + 6u, c.z + 4u < p.cols), w_f16(i + 7u, c.w + 4u < p.cols));
    return W8(a, b);
}

@compute @workgroup_size(64)
fn matmul_f16(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    matmul_tile(wid, lid);
}
