// matmul_q8_0: the prompt's product over Q8_0 blocks as stored (32 elements in 34 bytes: d at 0,
// qs at 2; value qs[j] · d): see wgsl/include/matmul_tile.wgsl. A block starts at an even byte,
// so its words are read through `word_at`.

// #include "matmul_tile.wgsl"

fn load_w8(row: u32, col: u32) -> W8 {
    let b = 34u * (row * (p.cols / 32u) + col / 32u);
    let d = half_at(b);
    let qs = b + 2u + col % 32u;
    return W8(signed4(word_at(qs)) * d, signed4(word_at(qs + 4u)) * d);
}

@compute @workgroup_size(64)
fn matmul_q8_0(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    matmul_tile(wid, lid);
}
