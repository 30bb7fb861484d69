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
// hold up what they wait for. The rest is `reduce_slots_f32` line for line (WGSL has no
// includes; wgsl/reduce_slots_f32.wgsl is the commented original), so the bits are the same.

const GO: u32 = 0u;
const ABORT: u32 = 1u;
const SEEN: u32 = 2u;
const EXPIRED: u32 = 3u;
const EXPIRED_ROUND: u32 = 4u;

struct Params {
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
var<immediate> p: Params;

var<workgroup> released: u32;

fn reached(word: u32) -> bool {
    return bitcast<i32>(word - p.round) >= 0;
}

fn go_reached() -> bool {
    return reached(atomicLoad(&flags[GO]));
}

// Thread 0's arrival and bounded wait: 1 once the round is released, 0 if the wait ran out.
fn arrive_and_wait() -> u32 {
    if (p.arrive != 0u) {
        atomicStore(&arrival[0], p.round);
    }
    if (atomicLoad(&flags[EXPIRED]) != 0u) {
        return 0u;
    }
    for (var t = 0u; t < p.trips; t++) {
        if (go_reached() || go_reached() || go_reached() || go_reached()
            || go_reached() || go_reached() || go_reached() || go_reached()) {
            atomicStore(&flags[SEEN], p.round);
            return 1u;
        }
        if (atomicLoad(&flags[ABORT]) != 0u) {
            break;
        }
    }
    atomicStore(&flags[EXPIRED_ROUND], p.round);
    atomicStore(&flags[EXPIRED], 1u);
    return 0u;
}

@compute @workgroup_size(256)
fn reduce_slots_f32_poll(
    @builtin(global_invocation_id) gid: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
    @builtin(num_workgroups) nwg: vec3<u32>,
) {
    if (lid == 0u) {
        released = arrive_and_wait();
    }
    if (workgroupUniformLoad(&released) == 0u) {
        return;
    }
    let quads = (p.n + 3u) / 4u;
    let step = nwg.x * 256u;
    for (var q = gid.x; q < quads; q += step) {
        let e = 4u * q;
        let base = p.dst_offset + e;
        let live = min(p.n - e, 4u);
        var own = vec4<f32>(0.0);
        if (live == 4u) {
            own = vec4<f32>(dst[base], dst[base + 1u], dst[base + 2u], dst[base + 3u]);
        } else {
            for (var k = 0u; k < live; k++) {
                own[k] = dst[base + k];
            }
        }
        var acc: vec4<f32>;
        if (p.self_index == 0u) {
            acc = own;
        } else {
            acc = slots[p.offset / 4u + q];
        }
        for (var j = 1u; j < p.members; j++) {
            if (j == p.self_index) {
                acc += own;
            } else {
                acc += slots[(j * p.stride + p.offset) / 4u + q];
            }
        }
        if (live == 4u) {
            dst[base] = acc.x;
            dst[base + 1u] = acc.y;
            dst[base + 2u] = acc.z;
            dst[base + 3u] = acc.w;
        } else {
            for (var k = 0u; k < live; k++) {
                dst[base + k] = acc[k];
            }
        }
    }
}
