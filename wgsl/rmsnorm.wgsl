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

// #include "norm_io.wgsl"
// #include "norm_tail.wgsl"
// #include "norm_scale.wgsl"

@compute @workgroup_size(256)
fn rmsnorm(@builtin(local_invocation_index) lid: u32) {
    rmsnorm_of_x(lid);
}
