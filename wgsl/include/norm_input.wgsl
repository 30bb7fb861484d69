// The input of a product that norms its own vector (matvec_gate_up_silu_normed,
// matvec_qkv_rope_store_normed): the product reads h = x / sqrt(mean(x^2) + eps) * nw without
// an rmsnorm dispatch before it and without h in memory. Every workgroup sums the squares of x
// the way rmsnorm does (thread lid takes elements lid, lid + 256, ... in order, eight loads
// issued at a time, norm_tail.wgsl) and meets the others in rmsnorm's tree (norm_scale.wgsl,
// included beside it); `x4` then scales x as rmsnorm's put8 does, so h's bits are rmsnorm's and
// the product's are those of rmsnorm then the plain kernel (tests/tp_kernels.rs checks it).
// The decoder uses it where the residual stream stays on one member (docs/BENCHMARKS.md, "The
// norms folded into the products"). The includer declares `x` and `nw` (array<vec4<f32>> of n
// / 4) and includes norm_scale.wgsl.

var<private> norm_input_scale: f32;

// x's element i, or 0 from n.
fn x_element(i: u32, n: u32) -> f32 {
    if (i < n) {
        return x[i >> 2u][i & 3u];
    }
    return 0.0;
}

// Sums the squares of x (n elements) and keeps the scale for `x4`; every thread of the
// workgroup calls it before its product.
fn norm_input(lid: u32, n: u32, eps: f32) {
    var acc = 0.0;
    for (var base = lid; base < n; base += 2048u) {
        let e0 = x_element(base, n);
        let e1 = x_element(base + 256u, n);
        let e2 = x_element(base + 512u, n);
        let e3 = x_element(base + 768u, n);
        let e4 = x_element(base + 1024u, n);
        let e5 = x_element(base + 1280u, n);
        let e6 = x_element(base + 1536u, n);
        let e7 = x_element(base + 1792u, n);
        acc += e0 * e0;
        acc += e1 * e1;
        acc += e2 * e2;
        acc += e3 * e3;
        acc += e4 * e4;
        acc += e5 * e5;
        acc += e6 * e6;
        acc += e7 * e7;
    }
    norm_input_scale = norm_scale(lid, acc, n, eps);
    // `partial` is the product's next: every thread has read the scale before any writes it.
    workgroupBarrier();
}

// h's elements 4i .. 4i + 3.
fn x4(i: u32) -> vec4<f32> {
    return x[i] * norm_input_scale * nw[i];
}
