// matmul_q4_1: the prompt's product over Q4_1 blocks as stored (32 elements in 20 bytes: d at 0,
// m at 2, qs at 4, nibbles as Q4_0's; value q · d + m): see wgsl/include/matmul_tile.wgsl.

// #include "matmul_tile.wgsl"

fn load_w8(row: u32, col: u32) -> W8 {
    let b = 20u * (row * (p.cols / 32u) + col / 32u);
    let dm = unpack2x16float(w_word(b >> 2u));
    let j = col % 32u;
    let qs = b + 4u + j % 16u;
    let shift = 4u * (j / 16u);
    return W8(nibbles(word_at(qs), shift) * dm.x + dm.y, nibbles(word_at(qs + 4u), shift) * dm.x + dm.y);
}

@compute @workgroup_size(64)
fn matmul_q4_1(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    matmul_tile(wid, lid);
}
