// matmul_q4_k: the prompt's product over Q4_K super-blocks as stored (256 elements in 144
// bytes: d and dmin at 0, twelve bytes of 6-bit scales and mins at 4, qs at 16; chunk c of 64
// elements takes qs[32c ..]: low nibbles sub-block 2c, high nibbles 2c + 1; value
// d·sc·q - dmin·m): see wgsl/include/matmul_tile.wgsl.

// #include "matmul_tile.wgsl"

fn scale_byte(b: u32, i: u32) -> u32 {
    return byte_at(b + 4u + i);
}

// Sub-block j's (scale, min), as ggml's get_scale_min_k4 reads them (both forms computed, one
// selected: no branch).
fn scale_min(b: u32, j: u32) -> vec2<f32> {
    let lo = j < 4u;
    let j4 = select(j - 4u, j, lo);
    let low = vec2<u32>(scale_byte(b, j4) & 63u, scale_byte(b, j4 + 4u) & 63u);
    let s = scale_byte(b, j4 + 8u);
    let high = vec2<u32>((s & 15u) | ((scale_byte(b, j4) >> 6u) << 4u),
        (s >> 4u) | ((scale_byte(b, j4 + 4u) >> 6u) << 4u));
    return vec2<f32>(select(high, low, lo));
}

fn load_w8(row: u32, col: u32) -> W8 {
    let b = 144u * (row * (p.cols / 256u) + col / 256u);
    let dm = unpack2x16float(w_word(b >> 2u));
    let e = col % 256u;
    let c = e / 64u;
    let high = (e % 64u) / 32u;
    let sm = scale_min(b, 2u * c + high);
    let d = vec4<f32>(dm.x * sm.x);
    let m = vec4<f32>(dm.y * sm.y);
    let qs = b + 16u + 32u * c + e % 32u;
    return W8(nibbles(word_at(qs), 4u * high) * d - m, nibbles(word_at(qs + 4u), 4u * high) * d - m);
}

@compute @workgroup_size(64)
fn matmul_q4_k(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    matmul_tile(wid, lid);
}
