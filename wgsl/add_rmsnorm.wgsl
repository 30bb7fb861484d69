// add_rmsnorm: x += r, then y = x / sqrt(mean(x^2) + eps) * w, over one vector of n f32 — the
// residual add and the next norm of the decoder in one dispatch. One workgroup; each thread
// adds and squares the same elements it would in `add_f32` then `rmsnorm`, and the sum of
// squares uses rmsnorm's fixed-order tree, so the bits equal those two kernels' bits.

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

var<workgroup> partial: array<f32, 256>;

@compute @workgroup_size(256)
fn add_rmsnorm(@builtin(local_invocation_index) lid: u32) {
    var acc = 0.0;
    for (var i = lid; i < p.n; i += 256u) {
        let v = x[i] + r[i];
        x[i] = v;
        acc += v * v;
    }
    partial[lid] = acc;
    workgroupBarrier();
    for (var s = 128u; s > 0u; s >>= 1u) {
        if (lid < s) {
            partial[lid] += partial[lid + s];
        }
        workgroupBarrier();
    }
    let scale = inverseSqrt(partial[0] / f32(p.n) + p.eps);
    for (var i = lid; i < p.n; i += 256u) {
        y[i] = x[i] * scale * w[i];
    }
}
