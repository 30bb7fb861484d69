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

// The held path of the kernels that add into x (n <= HELD): stores the thread's four batches
// v0..v3 (from lid, lid + 2048, lid + 4096, lid + 6144) as x, sums their squares in order,
// and writes y from them.
fn keep_held(lid: u32, v0: Eight, v1: Eight, v2: Eight, v3: Eight) {
    var acc = 0.0;
    acc = keep8(acc, lid, v0);
    acc = keep8(acc, lid + 2048u, v1);
    acc = keep8(acc, lid + 4096u, v2);
    acc = keep8(acc, lid + 6144u, v3);
    norm_tail_held(lid, acc, v0, v1, v2, v3);
}
