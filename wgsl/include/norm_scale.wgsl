// The scale of an RMSNorm over a workgroup of 256: each thread's sum of squares meets the
// others' in a fixed-order tree, so every kernel that includes it (norm_tail.wgsl's users and
// rmsnorm_rows) gives the same bits for the same sums. The includer declares `p` (n, eps).

var<workgroup> partial: array<f32, 256>;

// 1 / sqrt(mean(x^2) + eps) from every thread's sum of squares, in a fixed-order tree.
fn norm_scale(lid: u32, acc: f32) -> f32 {
    partial[lid] = acc;
    workgroupBarrier();
    for (var s = 128u; s > 0u; s >>= 1u) {
        if (lid < s) {
            partial[lid] += partial[lid + s];
        }
        workgroupBarrier();
    }
    return inverseSqrt(partial[0] / f32(p.n) + p.eps);
}
