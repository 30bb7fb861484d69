// add_rmsnorm: x += r, then y = x / sqrt(mean(x^2) + eps) * w, over one vector of n f32 — the
// residual add and the next norm of the decoder in one dispatch. One workgroup; each thread
// adds and squares the same elements it would in `add_f32` then `rmsnorm`, and the sum of
// squares uses rmsnorm's fixed-order tree, so the bits equal those two kernels' bits.
//
// How a thread walks the vector, and why: wgsl/include/norm_tail.wgsl.

struct NormParams {
    n: u32,
    eps: f32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<storage, read> r: array<f32>;
@group(0) @binding(1) var<storage, read> w: array<f32>;
@group(0) @binding(2) var<storage, read_write> x: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
var<immediate> p: NormParams;

// #include "norm_tail.wgsl"
// #include "norm_scale.wgsl"
// #include "keep_x.wgsl"

// x + r for the eight elements from base (0 past n).
fn xr8(base: u32) -> Eight {
    let r = Eight(get_r(base), get_r(base + 256u), get_r(base + 512u), get_r(base + 768u),
        get_r(base + 1024u), get_r(base + 1280u), get_r(base + 1536u), get_r(base + 1792u));
    return add8(x8(base), r);
}

// r[i], or 0 past n.
fn get_r(i: u32) -> f32 {
    if (i < p.n) {
        return r[i];
    }
    return 0.0;
}

@compute @workgroup_size(256)
fn add_rmsnorm(@builtin(local_invocation_index) lid: u32) {
    var acc = 0.0;
    if (p.n <= HELD) {
        let v0 = xr8(lid);
        let v1 = xr8(lid + 2048u);
        let v2 = xr8(lid + 4096u);
        let v3 = xr8(lid + 6144u);
        keep_held(lid, v0, v1, v2, v3);
        return;
    }
    for (var base = lid; base < p.n; base += 2048u) {
        acc = keep8(acc, base, xr8(base));
    }
    norm_tail(lid, acc);
}
