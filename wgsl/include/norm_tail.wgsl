// The end of every rmsnorm kernel (included by rmsnorm, add_rmsnorm, reduce_add_rmsnorm and
// reduce_add_rmsnorm_poll, so they give the same bits for the same x): the sum of squares of
// each thread's `acc` in a fixed-order tree, then y = x / sqrt(mean(x^2) + eps) * w, eight
// elements per thread at a time, every load of a batch before its stores. The includer
// declares `p` (n, eps) and the bindings `x`, `w` and `y` (y writable).

var<workgroup> partial: array<f32, 256>;

// x[i] * scale * w[i], or 0 past n.
fn scaled(i: u32, scale: f32) -> f32 {
    if (i < p.n) {
        return x[i] * scale * w[i];
    }
    return 0.0;
}

// Stores v as y[i] (nothing past n).
fn put_y(i: u32, v: f32) {
    if (i < p.n) {
        y[i] = v;
    }
}

fn norm_tail(lid: u32, acc: f32) {
    partial[lid] = acc;
    workgroupBarrier();
    for (var s = 128u; s > 0u; s >>= 1u) {
        if (lid < s) {
            partial[lid] += partial[lid + s];
        }
        workgroupBarrier();
    }
    let scale = inverseSqrt(partial[0] / f32(p.n) + p.eps);
    for (var base = lid; base < p.n; base += 2048u) {
        let y0 = scaled(base, scale);
        let y1 = scaled(base + 256u, scale);
        let y2 = scaled(base + 512u, scale);
        let y3 = scaled(base + 768u, scale);
        let y4 = scaled(base + 1024u, scale);
        let y5 = scaled(base + 1280u, scale);
        let y6 = scaled(base + 1536u, scale);
        let y7 = scaled(base + 1792u, scale);
        put_y(base, y0);
        put_y(base + 256u, y1);
        put_y(base + 512u, y2);
        put_y(base + 768u, y3);
        put_y(base + 1024u, y4);
        put_y(base + 1280u, y5);
        put_y(base + 1536u, y6);
        put_y(base + 1792u, y7);
    }
}
