// rmsnorm: y = x / sqrt(mean(x^2) + eps) * w, over one vector of n f32 (w is f32). One
// workgroup; the sum of squares uses a fixed-order tree reduction, so every member computing
// the same norm of the same (bitwise equal) x gets the same bits.
//
// How a thread walks the vector, and why: wgsl/include/norm_tail.wgsl.

struct NormParams {
    n: u32,
    eps: f32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> w: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
var<immediate> p: NormParams;

// #include "norm_tail.wgsl"
// #include "norm_scale.wgsl"

// acc plus the squares of v, added in element order.
fn squares(acc: f32, v: Eight) -> f32 {
    var s = acc;
    s += v.e0 * v.e0;
    s += v.e1 * v.e1;
    s += v.e2 * v.e2;
    s += v.e3 * v.e3;
    s += v.e4 * v.e4;
    s += v.e5 * v.e5;
    s += v.e6 * v.e6;
    s += v.e7 * v.e7;
    return s;
}

@compute @workgroup_size(256)
fn rmsnorm(@builtin(local_invocation_index) lid: u32) {
    var acc = 0.0;
    if (p.n <= HELD) {
        let v0 = x8(lid);
        let v1 = x8(lid + 2048u);
        let v2 = x8(lid + 4096u);
        let v3 = x8(lid + 6144u);
        acc = squares(acc, v0);
        acc = squares(acc, v1);
        acc = squares(acc, v2);
        acc = squares(acc, v3);
        norm_tail_held(lid, acc, v0, v1, v2, v3);
        return;
    }
    for (var base = lid; base < p.n; base += 2048u) {
        acc = squares(acc, x8(base));
    }
    norm_tail(lid, acc);
}
