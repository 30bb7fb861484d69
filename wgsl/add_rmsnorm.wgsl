// add_rmsnorm: x += r, then y = x / sqrt(mean(x^2) + eps) * w, over one vector of n f32 — the
// residual add and the next norm of the decoder in one dispatch. One workgroup; each thread
// adds and squares the same elements it would in `add_f32` then `rmsnorm`, and the sum of
// squares uses rmsnorm's fixed-order tree, so the bits equal those two kernels' bits.
//
// Each thread handles elements lid, lid + 256, lid + 512, ... in that order, eight at a time in
// scalar registers: every load of a batch is issued before the first store or sum. A loop that
// loads, computes and stores one element at a time waits a whole memory latency per element (a
// bus round trip where the partials are in host memory), which made these single-workgroup
// kernels the decoder's slowest per byte (docs/BENCHMARKS.md, "The norms"). Elements past n
// contribute +0.0 to the sum of squares, which leaves its bits as they are.

struct Params {
    n: u32,
    eps: f32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<storage, read> r: array<f32>;
@group(0) @binding(1) var<storage, read> w: array<f32>;
@group(0) @binding(2) var<storage, read_write> x: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
var<immediate> p: Params;

// #include "keep_x.wgsl"
// #include "norm_tail.wgsl"

// x[i] + r[i], or 0 past n.
fn sum_xr(i: u32) -> f32 {
    if (i < p.n) {
        return x[i] + r[i];
    }
    return 0.0;
}

@compute @workgroup_size(256)
fn add_rmsnorm(@builtin(local_invocation_index) lid: u32) {
    var acc = 0.0;
    for (var base = lid; base < p.n; base += 2048u) {
        let v0 = sum_xr(base);
        let v1 = sum_xr(base + 256u);
        let v2 = sum_xr(base + 512u);
        let v3 = sum_xr(base + 768u);
        let v4 = sum_xr(base + 1024u);
        let v5 = sum_xr(base + 1280u);
        let v6 = sum_xr(base + 1536u);
        let v7 = sum_xr(base + 1792u);
        acc += keep_x(base, v0);
        acc += keep_x(base + 256u, v1);
        acc += keep_x(base + 512u, v2);
        acc += keep_x(base + 768u, v3);
        acc += keep_x(base + 1024u, v4);
        acc += keep_x(base + 1280u, v5);
        acc += keep_x(base + 1536u, v6);
        acc += keep_x(base + 1792u, v7);
    }
    norm_tail(lid, acc);
}
