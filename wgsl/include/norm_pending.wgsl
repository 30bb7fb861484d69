// The scale of an RMSNorm left pending by the product before it (matvec_add_norm_pending.wgsl):
// s = 1 / sqrt(Σ sq / p.cols + p.eps) from the partial sums of squares `sq` (p.squares of them)
// that product left, summed by each of a workgroup's 256 threads over every 256th partial in
// order, then in a fixed-order tree; every workgroup of every kernel that includes it gets the
// same bits. The readers multiply their finished dot products by it (of the weighted vector
// y * nw, which the product before wrote): the norm without a dispatch and without a pass over
// the vector. The includer declares `sq` (array<f32>) and `p` (cols, eps, squares); every
// thread of a workgroup of exactly 256 must call it (it waits at barriers).

var<workgroup> pending_sums: array<f32, 256>;

fn pending_scale(lid: u32) -> f32 {
    var s = 0.0;
    for (var i = lid; i < p.squares; i += 256u) {
        s += sq[i];
    }
    pending_sums[lid] = s;
    workgroupBarrier();
    for (var k = 128u; k > 0u; k >>= 1u) {
        if (lid < k) {
            pending_sums[lid] += pending_sums[lid + k];
        }
        workgroupBarrier();
    }
    return inverseSqrt(pending_sums[0] / f32(p.cols) + p.eps);
}
