// The scale of an RMSNorm over a workgroup of 256: each thread's sum of squares meets the
// others' in a fixed-order tree, so every kernel that includes it (norm_tail.wgsl's users and
// rmsnorm_rows) gives the same bits for the same sums. The includer defines `norm_len` and `norm_eps` (norm_io.wgsl).

var<workgroup> norm_partial: array<f32, 256>;

// 1 / sqrt(mean(x^2) + eps) from every thread's sum of squares, in a fixed-order tree.
fn norm_scale(lid: u32, acc: f32) -> f32 {
    norm_partial[lid] = acc;
    return norm_scale_tree(lid);
}

// The same from the 256 sums in norm_partial: every thread of a workgroup of 256 (or of 128,
// each having stored two, as rmsnorm_of_x_in_halves does) calls it.
fn norm_scale_tree(lid: u32) -> f32 {
    workgroupBarrier();
    for (var s = 128u; s > 0u; s >>= 1u) {
        if (lid < s) {
            norm_partial[lid] += norm_partial[lid + s];
        }
        workgroupBarrier();
    }
    return inverseSqrt(norm_partial[0] / f32(norm_len()) + norm_eps());
}
