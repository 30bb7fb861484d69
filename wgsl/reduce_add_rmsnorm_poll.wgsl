// reduce_add_rmsnorm_poll: `reduce_add_rmsnorm` that first does the DevicePoll wait itself, so a
// fused all-reduce costs its consumer no dispatch of its own (GPUs only: llvmpipe's loops end
// after 65,535 trips, and there the wait stays a chain of `poll_wait_cpu` dispatches). Thread 0
// stores the round into the member's arrival word in host memory (the barrier before this
// dispatch made the partial it announces available), then polls the member's `go` word in its
// mapped device-local memory, bounded as `poll_wait` is (`trips` trips of eight loads), and
// records `seen`, or `expired` when it runs out or `abort` is set: then x and y are left as they
// are and the communicator reports the error. The rest is `reduce_add_rmsnorm` line for line
// (WGSL has no includes; wgsl/reduce_add_rmsnorm.wgsl is the commented original), so the bits
// are the same.

const GO: u32 = 0u;
const ABORT: u32 = 1u;
const SEEN: u32 = 2u;
const EXPIRED: u32 = 3u;
const EXPIRED_ROUND: u32 = 4u;

struct Params {
    n: u32,
    eps: f32,
    members: u32,
    stride: u32,
    offset: u32,
    round: u32,
    trips: u32,
    _pad0: u32,
}

@group(0) @binding(0) var<storage, read> slots: array<f32>;
@group(0) @binding(1) var<storage, read> w: array<f32>;
@group(0) @binding(2) var<storage, read_write> x: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
@group(0) @binding(4) var<storage, read_write> flags: array<atomic<u32>>;
@group(0) @binding(5) var<storage, read_write> arrival: array<atomic<u32>>;
var<immediate> p: Params;

var<workgroup> partial: array<f32, 256>;
var<workgroup> released: u32;

fn reached(word: u32) -> bool {
    return bitcast<i32>(word - p.round) >= 0;
}

fn go_reached() -> bool {
    return reached(atomicLoad(&flags[GO]));
}

// Thread 0's arrival and bounded wait: 1 once the round is released, 0 if the wait ran out.
fn arrive_and_wait() -> u32 {
    atomicStore(&arrival[0], p.round);
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
fn reduce_add_rmsnorm_poll(@builtin(local_invocation_index) lid: u32) {
    if (lid == 0u) {
        released = arrive_and_wait();
    }
    if (workgroupUniformLoad(&released) == 0u) {
        return;
    }
    var acc = 0.0;
    for (var i = lid; i < p.n; i += 256u) {
        var r = slots[p.offset + i];
        for (var j = 1u; j < p.members; j++) {
            r += slots[j * p.stride + p.offset + i];
        }
        let v = x[i] + r;
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
