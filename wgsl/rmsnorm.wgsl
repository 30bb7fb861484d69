// rmsnorm: y = x / sqrt(mean(x^2) + eps) * w, over one vector of n f32 (w is f32). One
// workgroup; the sum of squares uses a fixed-order tree reduction, so every member computing
// the same norm of the same (bitwise equal) x gets the same bits.

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

var<workgroup> partial: array<f32, 256>;

@compute @workgroup_size(256)
fn rmsnorm(@builtin(local_invocation_index) lid: u32) {
    var acc = 0.0;
    for (var i = lid; i < p.n; i += 256u) {
        acc += x[i] * x[i];
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
