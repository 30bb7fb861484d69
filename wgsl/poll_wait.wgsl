// poll_wait: the DevicePoll all-reduce's release, between phase A and phase B of a round
// (src/comm/poll.rs states the protocol). One invocation:
// 1. when `arrive` is set, stores the round into this member's arrival word in host memory,
//    where the relay thread sees it (the data it announces were made available to the host by
//    the barrier before this dispatch);
// 2. polls this member's `go` word, which the relay stores into device-local memory the host
//    maps, until it reaches the round, then records the round in `seen`.
// The poll is bounded: `trips` loop trips of 8 loads each. A dispatch that runs out without
// seeing its round leaves `seen` behind; the last dispatch of a chain (`last` set) then records
// the round in `expired_round` and sets `expired`, which the host reads. A chain exists because
// llvmpipe ends every loop of an invocation after 65,535 trips in total (`poll_wait_cpu`): there,
// a wait is several dispatches, each resuming where `seen` says the wait stands. `abort`, stored
// by the host when the communicator is poisoned, ends every wait at once (as expired).
//
// Rounds, and the words of `flags`: wgsl/include/poll_round.wgsl.

struct PollWaitParams {
    round: u32,
    trips: u32,
    arrive: u32,
    last: u32,
}

@group(0) @binding(0) var<storage, read_write> flags: array<atomic<u32>>;
@group(0) @binding(1) var<storage, read_write> arrival: array<atomic<u32>>;
var<immediate> p: PollWaitParams;

// #include "poll_round.wgsl"

fn wait() {
    if (atomicLoad(&flags[EXPIRED]) != 0u || reached(atomicLoad(&flags[SEEN]))) {
        return;
    }
    for (var t = 0u; t < p.trips; t++) {
        // Eight loads per trip: fewer loop trips for the same wait on drivers that count them.
        if (go_reached() || go_reached() || go_reached() || go_reached()
            || go_reached() || go_reached() || go_reached() || go_reached()) {
            atomicStore(&flags[SEEN], this_round());
            return;
        }
        if (atomicLoad(&flags[ABORT]) != 0u) {
            break;
        }
    }
    if (p.last != 0u || atomicLoad(&flags[ABORT]) != 0u) {
        atomicStore(&flags[EXPIRED_ROUND], this_round());
        atomicStore(&flags[EXPIRED], 1u);
    }
}

@compute @workgroup_size(1)
fn poll_wait() {
    start_round();
    if (p.arrive != 0u) {
        atomicStore(&arrival[0], this_round());
    }
    wait();
}

// The same wait for llvmpipe, which runs a workgroup's invocations eight at a time, one group
// after another, each with its own 65,535 loop trips: 256 invocations poll 32 times as long per
// dispatch, and each trip also runs `delay` (a hundred dependent multiply-adds, straight-line
// code: no loop trips), so one dispatch polls for seconds, not a millisecond, and a wait is a
// chain of a few dispatches rather than thousands. (A longer delay needs fewer dispatches but
// answers later; every dispatch of a chain costs the same even when it returns at once.) The first group to see the round records it;
// the groups after it return at once.
@compute @workgroup_size(256)
fn poll_wait_cpu(@builtin(local_invocation_index) lid: u32) {
    start_round();
    if (p.arrive != 0u && lid == 0u) {
        atomicStore(&arrival[0], this_round());
    }
    if (atomicLoad(&flags[EXPIRED]) != 0u || reached(atomicLoad(&flags[SEEN]))) {
        return;
    }
    var x = f32(this_round() & 0xffu) * 0.001;
    for (var t = 0u; t < p.trips; t++) {
        if (go_reached()) {
            atomicStore(&flags[SEEN], this_round());
            return;
        }
        if (atomicLoad(&flags[ABORT]) != 0u) {
            break;
        }
        x = delay(x);
    }
    // x stays in [0, 1): never negative, but the compiler cannot know, so `delay` stays.
    if (p.last != 0u || atomicLoad(&flags[ABORT]) != 0u || x < 0.0) {
        atomicStore(&flags[EXPIRED_ROUND], this_round());
        atomicStore(&flags[EXPIRED], 1u);
    }
}

fn delay10(x: f32) -> f32 {
    var y = x;
    y = fma(y, 0.5, 0.25);
    y = fma(y, 0.5, 0.25);
    y = fma(y, 0.5, 0.25);
    y = fma(y, 0.5, 0.25);
    y = fma(y, 0.5, 0.25);
    y = fma(y, 0.5, 0.25);
    y = fma(y, 0.5, 0.25);
    y = fma(y, 0.5, 0.25);
    y = fma(y, 0.5, 0.25);
    y = fma(y, 0.5, 0.25);
    return y;
}

fn delay(x: f32) -> f32 {
    return delay10(delay10(delay10(delay10(delay10(delay10(delay10(delay10(delay10(delay10(x))))))))));
}
