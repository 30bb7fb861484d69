// The end of every rmsnorm kernel (included by rmsnorm, add_rmsnorm, reduce_add_rmsnorm and
// reduce_add_rmsnorm_poll, so they give the same bits for the same x): the sum of squares of
// each thread's `acc` in a fixed-order tree (norm_scale.wgsl, included beside it), then
// y = x / sqrt(mean(x^2) + eps) * w. The includer declares `p` (n, eps) and the bindings `x`,
// `w` and `y` (y writable).
//
// A thread handles elements lid, lid + 256, lid + 512, ... in that order, eight at a time (an
// `Eight`, elements base, base + 256, ..., base + 1792) with every load of a batch issued before
// the first store or sum: a loop that loads, computes and stores one element at a time waits a
// whole memory latency per element (a bus round trip where the partials are in host memory).
// A vector of up to HELD elements stays in registers from the first pass to the second, which
// then loads only w, and w's loads are issued before the tree: the kernel waits for memory
// about twice instead of once per batch and pass (docs/BENCHMARKS.md, "The norms"). Elements
// past n contribute +0.0 to the sum of squares, which leaves its bits as they are.

// The longest vector held in registers between the passes: four batches per thread.
const HELD: u32 = 8192u;

// Eight elements of one thread: base, base + 256, ..., base + 1792.
struct Eight {
    e0: f32,
    e1: f32,
    e2: f32,
    e3: f32,
    e4: f32,
    e5: f32,
    e6: f32,
    e7: f32,
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

fn x8(base: u32) -> Eight {
    return Eight(get_x(base), get_x(base + 256u), get_x(base + 512u), get_x(base + 768u),
        get_x(base + 1024u), get_x(base + 1280u), get_x(base + 1536u), get_x(base + 1792u));
}

fn w8(base: u32) -> Eight {
    return Eight(get_w(base), get_w(base + 256u), get_w(base + 512u), get_w(base + 768u),
        get_w(base + 1024u), get_w(base + 1280u), get_w(base + 1536u), get_w(base + 1792u));
}

// a + b element by element.
fn add8(a: Eight, b: Eight) -> Eight {
    return Eight(a.e0 + b.e0, a.e1 + b.e1, a.e2 + b.e2, a.e3 + b.e3, a.e4 + b.e4, a.e5 + b.e5,
        a.e6 + b.e6, a.e7 + b.e7);
}

// Stores v as y[i] (nothing past n).
fn put_y(i: u32, v: f32) {
    if (i < p.n) {
        y[i] = v;
    }
}

// y = v * scale * w for the eight elements from base, whose x values are v and weights wv.
fn put8(base: u32, v: Eight, wv: Eight, scale: f32) {
    put_y(base, v.e0 * scale * wv.e0);
    put_y(base + 256u, v.e1 * scale * wv.e1);
    put_y(base + 512u, v.e2 * scale * wv.e2);
    put_y(base + 768u, v.e3 * scale * wv.e3);
    put_y(base + 1024u, v.e4 * scale * wv.e4);
    put_y(base + 1280u, v.e5 * scale * wv.e5);
    put_y(base + 1536u, v.e6 * scale * wv.e6);
    put_y(base + 1792u, v.e7 * scale * wv.e7);
}


// The second pass reading x back (any n).
fn norm_tail(lid: u32, acc: f32) {
    let scale = norm_scale(lid, acc);
    for (var base = lid; base < p.n; base += 2048u) {
        let v = x8(base);
        let wv = w8(base);
        put8(base, v, wv, scale);
    }
}

// The second pass of a vector of at most HELD elements whose x values the thread holds:
// v0..v3 are its batches from lid, lid + 2048, lid + 4096 and lid + 6144.
fn norm_tail_held(lid: u32, acc: f32, v0: Eight, v1: Eight, v2: Eight, v3: Eight) {
    let w0 = w8(lid);
    let w1 = w8(lid + 2048u);
    let w2 = w8(lid + 4096u);
    let w3 = w8(lid + 6144u);
    let scale = norm_scale(lid, acc);
    put8(lid, v0, w0, scale);
    put8(lid + 2048u, v1, w1, scale);
    put8(lid + 4096u, v2, w2, scale);
    put8(lid + 6144u, v3, w3, scale);
}
