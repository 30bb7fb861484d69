// matmul_q4_0: the prompt's product over Q4_0 blocks as stored (32 elements in 18 bytes: d at 0,
// qs at 2; element j < 16 the low nibble of qs[j], j + 16 its high nibble; value (q - 8) · d):
// see wgsl/include/matmul_tile.wgsl.

// #include "matmul_tile.wgsl"

fn load_w8(row: u32, col: u32) -> W8 {
    let b = 18u * (row * (p.cols / 32u) + col / 32u);
    let d = half_at(b);
    let j = col % 32u;
    let qs = b + 2u + j % 16u;
    let shift = 4u * (j / 16u);
    return W8((nibbles(word_at(qs), shift) - 8.0) * d, (nibbles(word_at(qs + 4u), shift) - 8.0) * d);
}

@compute @workgroup_size(64)
fn matmul_q4_0(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    matmul_tile(wid, lid);
}
