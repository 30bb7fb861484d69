// How the plain norm kernels (rmsnorm, add_rmsnorm, reduce_add_rmsnorm, reduce_add_rmsnorm_poll,
// rmsnorm_rows) give norm_tail.wgsl and norm_scale.wgsl their vector: the length and epsilon
// from `p` (n, eps), x and w read from their bindings and y written to its own. A kernel that
// holds its vector elsewhere (matvec_norm_last.wgsl) defines these five functions itself.

fn norm_len() -> u32 {
    return p.n;
}

fn norm_eps() -> f32 {
    return p.eps;
}

// x[i], or 0 past n.
fn get_x(i: u32) -> f32 {
    if (i < p.n) {
        return x[i];
    }
    return 0.0;
}

// w[i], or 0 past n.
fn get_w(i: u32) -> f32 {
    if (i < p.n) {
        return w[i];
    }
    return 0.0;
}

// Stores v as y[i] (nothing past n).
fn put_y(i: u32, v: f32) {
    if (i < p.n) {
        y[i] = v;
    }
}
