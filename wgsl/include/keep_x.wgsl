// Stores v as x[i] and returns its square, for the sum of squares (included by the kernels
// that add into x before their norm). The includer declares `p` (n) and a writable `x`.

// Stores v as x[i] and returns its square, or 0 past n.
fn keep_x(i: u32, v: f32) -> f32 {
    if (i < p.n) {
        x[i] = v;
        return v * v;
    }
    return 0.0;
}
