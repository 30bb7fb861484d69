// rmsnorm: y = x / sqrt(mean(x^2) + eps) * w, over one vector of n f32 (w is f32). One
// workgroup; the sum of squares uses a fixed-order tree reduction, so every member computing
// the same norm of the same (bitwise equal) x gets the same bits.
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

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> w: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
var<immediate> p: Params;

// #include "norm_tail.wgsl"

// x[i], or 0 past n.
fn get_x(i: u32) -> f32 {
    if (i < p.n) {
        return x[i];
    }
    return 0.0;
}

@compute @workgroup_size(256)
fn rmsnorm(@builtin(local_invocation_index) lid: u32) {
    var acc = 0.0;
    for (var base = lid; base < p.n; base += 2048u) {
        let x0 = get_x(base);
        let x1 = get_x(base + 256u);
        let x2 = get_x(base + 512u);
        let x3 = get_x(base + 768u);
        let x4 = get_x(base + 1024u);
        let x5 = get_x(base + 1280u);
        let x6 = get_x(base + 1536u);
        let x7 = get_x(base + 1792u);
        acc += x0 * x0;
        acc += x1 * x1;
        acc += x2 * x2;
        acc += x3 * x3;
        acc += x4 * x4;
        acc += x5 * x5;
        acc += x6 * x6;
        acc += x7 * x7;
    }
    norm_tail(lid, acc);
}
