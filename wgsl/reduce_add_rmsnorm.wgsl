// reduce_add_rmsnorm: phase B of a DevicePoll all-reduce fused with the decoder's residual add
// and next norm. r[i] = the sum over members j = 0..members-1, in that order, of
// slots[j * stride + offset + i] (every member's partial, its own included, as the row-parallel
// product wrote it into its slot); then x += r, and y = x / sqrt(mean(x^2) + eps) * w.
// One workgroup. The sum adds the same f32 values in the same order as `reduce_slots_f32` (whose
// own term is the same bits, from the tensor phase A copied), and the rest is `add_rmsnorm`'s
// arithmetic and fixed-order tree, so x and y are bitwise those of all_reduce then add_rmsnorm.

struct ReduceNormParams {
    n: u32,
    eps: f32,
    members: u32,
    stride: u32,
    offset: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<storage, read> slots: array<f32>;
@group(0) @binding(1) var<storage, read> w: array<f32>;
@group(0) @binding(2) var<storage, read_write> x: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
var<immediate> p: ReduceNormParams;

// #include "norm_tail.wgsl"
// #include "norm_scale.wgsl"
// #include "keep_x.wgsl"
// #include "reduce_add_rmsnorm_body.wgsl"

@compute @workgroup_size(256)
fn reduce_add_rmsnorm(@builtin(local_invocation_index) lid: u32) {
    reduce_add_rmsnorm_body(lid);
}
