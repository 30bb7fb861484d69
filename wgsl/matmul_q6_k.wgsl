// matmul_q6_k: the prompt's product over Q6_K super-blocks as stored (256 elements in 210
// bytes: ql at 0, qh at 128, i8 scales at 192, d at 208). Half n of 128 elements uses
// ql[64n ..], qh[32n ..], scales[8n ..]; element 32t + l of the half (l < 32) is nibble t / 2
// of ql[64n + 32(t % 2) + l] with bits 2t, 2t + 1 of qh[32n + l] on top, scaled by
// scales[8n + 2t + l / 16]; value d · scale · (q - 32): see wgsl/include/matmul_tile.wgsl.

// #include "matmul_tile.wgsl"

fn q6(ql: u32, qh: u32, nib: u32, hb: u32) -> vec4<f32> {
    let lo = (vec4<u32>(ql) >> (vec4<u32>(0u, 8u, 16u, 24u) + nib)) & vec4<u32>(15u);
    let hi = (vec4<u32>(qh) >> (vec4<u32>(0u, 8u, 16u, 24u) + hb)) & vec4<u32>(3u);
    return vec4<f32>(lo | (hi << vec4<u32>(4u))) - 32.0;
}

fn load_w8(row: u32, col: u32) -> W8 {
    let b = 210u * (row * (p.cols / 256u) + col / 256u);
    let e = col % 256u;
    let n = e / 128u;
    let t = (e % 128u) / 32u;
    let l = e % 32u;
    let ql = b + 64u * n + 32u * (t % 2u) + l;
    let qh = b + 128u + 32u * n + l;
    let sc = f32(bitcast<i32>(byte_at(b + 192u + 8u * n + 2u * t + l / 16u) << 24u) >> 24u);
    let ds = vec4<f32>(half_at(b + 208u) * sc);
    let nib = 4u * (t / 2u);
    return W8(ds * q6(word_at(ql), word_at(qh), nib, 2u * t), ds * q6(word_at(ql + 4u), word_at(qh + 4u), nib, 2u * t));
}

@compute @workgroup_size(64)
fn matmul_q6_k(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    matmul_tile(wid, lid);
}
