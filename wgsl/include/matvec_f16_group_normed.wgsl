// One step of the f16 products whose input is an RMSNorm left pending (the "normed" fused
// kernels): a weight group of eight f16 (one vec4<u32>) against h = x * nw at x's columns
// 8g .. 8g + 7, added to a thread's running sum `acc.x`, and those columns' x² added to its sum
// of squares `acc.y`. The norm's scale 1 / sqrt(mean(x²) + eps) multiplies the finished dot
// product (`normed_scale`): the scale is one number per vector, so it can wait until after the
// sum, and the squares ride along in the loop that already reads x (no pass over x before the
// first weight load, no norm dispatch before the product). The includer declares `x` and `nw`
// (array<vec4<f32>>), `p` (with `cols` and `eps`) and `PAIRED` (as matvec_f16_group.wgsl).

fn add_group_normed(acc: vec2<f32>, v: vec4<u32>, g: u32) -> vec2<f32> {
    let x0 = x[2u * g];
    let x1 = x[2u * g + 1u];
    let lo = dot(vec4<f32>(unpack2x16float(v.x), unpack2x16float(v.y)), x0 * nw[2u * g]);
    let hi = dot(vec4<f32>(unpack2x16float(v.z), unpack2x16float(v.w)), x1 * nw[2u * g + 1u]);
    let squares = acc.y + (dot(x0, x0) + dot(x1, x1));
    if (PAIRED) {
        return vec2<f32>(acc.x + (lo + hi), squares);
    }
    return vec2<f32>(acc.x + lo + hi, squares);
}

// The norm's scale from the whole vector's sum of squares.
fn normed_scale(squares: f32) -> f32 {
    return inverseSqrt(squares / f32(p.cols) + p.eps);
}
