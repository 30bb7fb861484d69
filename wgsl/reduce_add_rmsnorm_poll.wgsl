// reduce_add_rmsnorm_poll: `reduce_add_rmsnorm` that first does the DevicePoll wait itself, so a
// fused all-reduce costs its consumer no dispatch of its own (GPUs only: llvmpipe's loops end
// after 65,535 trips, and there the wait stays a chain of `poll_wait_cpu` dispatches). Thread 0
// stores the round into the member's arrival word in host memory (the barrier before this
// dispatch made the partial it announces available), then polls the member's `go` word in its
// mapped device-local memory, bounded as `poll_wait` is (`trips` trips of eight loads), and
// records `seen`, or `expired` when it runs out or `abort` is set: then x and y are left as they
// are and the communicator reports the error (wgsl/include/fused_wait.wgsl). The rest is
// `reduce_add_rmsnorm`'s own (both include it), so the bits are the same.

struct ReduceNormPollParams {
    n: u32,
    eps: f32,
    members: u32,
    stride: u32,
    offset: u32,
    round: u32,
    trips: u32,
    // 0: store no arrival (the test hook for a member that never arrives).
    arrive: u32,
}

@group(0) @binding(0) var<storage, read> slots: array<f32>;
@group(0) @binding(1) var<storage, read> w: array<f32>;
@group(0) @binding(2) var<storage, read_write> x: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
@group(0) @binding(4) var<storage, read_write> flags: array<atomic<u32>>;
@group(0) @binding(5) var<storage, read_write> arrival: array<atomic<u32>>;
var<immediate> p: ReduceNormPollParams;

// #include "norm_tail.wgsl"
// #include "norm_scale.wgsl"
// #include "keep_x.wgsl"
// #include "poll_round.wgsl"
// #include "fused_wait.wgsl"
// #include "reduce_add_rmsnorm_body.wgsl"

@compute @workgroup_size(256)
fn reduce_add_rmsnorm_poll(@builtin(local_invocation_index) lid: u32) {
    if (!workgroup_released(lid)) {
        return;
    }
    reduce_add_rmsnorm_body(lid);
}
