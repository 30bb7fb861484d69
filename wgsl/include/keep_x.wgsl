// Stores v as x[i] and returns its square, for the sum of squares (included by the kernels
// that add into x before their norm, after norm_tail.wgsl). The includer declares `p` (n) and
// a writable `x`.

// Stores v as x[i] and returns its square, or 0 past n.
fn keep_x(i: u32, v: f32) -> f32 {
    if (i < p.n) {
        x[i] = v;
        return v * v;
    }
    return 0.0;
}

// acc plus the squares of v, added in element order, storing v as x from base.
fn keep8(acc: f32, base: u32, v: Eight) -> f32 {
    var s = acc;
    s += keep_x(base, v.e0);
    s += keep_x(base + 256u, v.e1);
    s += keep_x(base + 512u, v.e2);
    s += keep_x(base + 768u, v.e3);
    s += keep_x(base + 1024u, v.e4);
    s += keep_x(base + 1280u, v.e5);
    s += keep_x(base + 1536u, v.e6);
    s += keep_x(base + 1792u, v.e7);
    return s;
}
