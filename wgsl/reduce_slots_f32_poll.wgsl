// reduce_slots_f32_poll: `reduce_slots_f32` that first does the DevicePoll wait itself, so a
// small round costs each member one dispatch and one barrier fewer (GPUs only: llvmpipe's loops
// end after 65,535 trips, and there the wait stays a chain of `poll_wait_cpu` dispatches before
// `reduce_slots_f32`). Thread 0 of every workgroup stores the round into the member's arrival
// word in host memory (the same value from every workgroup, so none depends on another being
// scheduled; the barrier before this dispatch made phase A's slot available to the host), then
// polls the member's `go` word in its mapped device-local memory, bounded as `poll_wait` is
// (`trips` trips of eight loads), and records `seen`, or `expired` when it runs out or `abort` is
// set: then the workgroup leaves its part of dst as it is and the communicator reports the error.
// Nothing else on this GPU waits behind the polling workgroups (phase A is done), so they cannot
// hold up what they wait for. The sum is `reduce_slots_f32`'s own (both include it), so the
// bits are the same.

struct ReduceSlotsPollParams {
    n: u32,
    members: u32,
    stride: u32,
    offset: u32,
    dst_offset: u32,
    self_index: u32,
    round: u32,
    trips: u32,
    // 0: store no arrival (the test hook for a member that never arrives).
    arrive: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<storage, read> slots: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read_write> dst: array<f32>;
@group(0) @binding(2) var<storage, read_write> flags: array<atomic<u32>>;
@group(0) @binding(3) var<storage, read_write> arrival: array<atomic<u32>>;
var<immediate> p: ReduceSlotsPollParams;

// #include "poll_round.wgsl"
// #include "fused_wait.wgsl"
// #include "reduce_slots_f32_body.wgsl"

@compute @workgroup_size(256)
fn reduce_slots_f32_poll(
    @builtin(global_invocation_id) gid: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
    @builtin(num_workgroups) nwg: vec3<u32>,
) {
    if (!workgroup_released(lid)) {
        return;
    }
    reduce_slots_f32_body(gid.x, nwg.x);
}
