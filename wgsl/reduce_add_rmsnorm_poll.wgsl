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
//
// Each thread handles elements lid, lid + 256, lid + 512, ... in that order, eight at a time in
// scalar registers: every load of a batch is issued before the first store or sum. A loop that
// loads, computes and stores one element at a time waits a whole memory latency per element (a
// bus round trip where the partials are in host memory), which made these single-workgroup
// kernels the decoder's slowest per byte (docs/BENCHMARKS.md, "The norms"). Elements past n
// contribute +0.0 to the sum of squares, which leaves its bits as they are.

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

// slots[at + i], or 0 past n.
fn slot(at: u32, i: u32) -> f32 {
    if (i < p.n) {
        return slots[at + i];
    }
    return 0.0;
}

// x[i], or 0 past n.
fn get_x(i: u32) -> f32 {
    if (i < p.n) {
        return x[i];
    }
    return 0.0;
}

// Stores v as x[i] and returns its square, or 0 past n.
fn keep_x(i: u32, v: f32) -> f32 {
    if (i < p.n) {
        x[i] = v;
        return v * v;
    }
    return 0.0;
}

// x[i] * scale * w[i], or 0 past n.
fn scaled(i: u32, scale: f32) -> f32 {
    if (i < p.n) {
        return x[i] * scale * w[i];
    }
    return 0.0;
}

// Stores v as y[i] (nothing past n).
fn put_y(i: u32, v: f32) {
    if (i < p.n) {
        y[i] = v;
    }
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
    for (var base = lid; base < p.n; base += 2048u) {
        // r = the members' partials in member order (member 0's first), then x + r.
        var r0 = slot(p.offset, base);
        var r1 = slot(p.offset, base + 256u);
        var r2 = slot(p.offset, base + 512u);
        var r3 = slot(p.offset, base + 768u);
        var r4 = slot(p.offset, base + 1024u);
        var r5 = slot(p.offset, base + 1280u);
        var r6 = slot(p.offset, base + 1536u);
        var r7 = slot(p.offset, base + 1792u);
        for (var j = 1u; j < p.members; j++) {
            let at = j * p.stride + p.offset;
            r0 += slot(at, base);
            r1 += slot(at, base + 256u);
            r2 += slot(at, base + 512u);
            r3 += slot(at, base + 768u);
            r4 += slot(at, base + 1024u);
            r5 += slot(at, base + 1280u);
            r6 += slot(at, base + 1536u);
            r7 += slot(at, base + 1792u);
        }
        let v0 = get_x(base) + r0;
        let v1 = get_x(base + 256u) + r1;
        let v2 = get_x(base + 512u) + r2;
        let v3 = get_x(base + 768u) + r3;
        let v4 = get_x(base + 1024u) + r4;
        let v5 = get_x(base + 1280u) + r5;
        let v6 = get_x(base + 1536u) + r6;
        let v7 = get_x(base + 1792u) + r7;
        acc += keep_x(base, v0);
        acc += keep_x(base + 256u, v1);
        acc += keep_x(base + 512u, v2);
        acc += keep_x(base + 768u, v3);
        acc += keep_x(base + 1024u, v4);
        acc += keep_x(base + 1280u, v5);
        acc += keep_x(base + 1536u, v6);
        acc += keep_x(base + 1792u, v7);
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
    for (var base = lid; base < p.n; base += 2048u) {
        let y0 = scaled(base, scale);
        let y1 = scaled(base + 256u, scale);
        let y2 = scaled(base + 512u, scale);
        let y3 = scaled(base + 768u, scale);
        let y4 = scaled(base + 1024u, scale);
        let y5 = scaled(base + 1280u, scale);
        let y6 = scaled(base + 1536u, scale);
        let y7 = scaled(base + 1792u, scale);
        put_y(base, y0);
        put_y(base + 256u, y1);
        put_y(base + 512u, y2);
        put_y(base + 768u, y3);
        put_y(base + 1024u, y4);
        put_y(base + 1280u, y5);
        put_y(base + 1536u, y6);
        put_y(base + 1792u, y7);
    }
}
