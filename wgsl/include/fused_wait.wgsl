// The DevicePoll wait a phase-B kernel does itself (included by the `*_poll` kernels): thread 0
// of each workgroup stores the round into the member's arrival word in host memory (unless
// `p.arrive` is 0: the test hook for a member that never arrives), then polls the member's `go`
// word in its mapped device-local memory, bounded as `poll_wait` is (`p.trips` trips of eight
// loads), and records `seen`, or `expired` when it runs out or `abort` is set.
// The includer declares `p` (with `round`, `trips`, `arrive`) and the bindings `flags` (the
// member's words, `array<atomic<u32>>`) and `arrival` (its arrival word in host memory), and
// includes poll_round.wgsl before this file.

var<workgroup> released: u32;

// Thread 0's arrival and bounded wait: 1 once the round is released, 0 if the wait ran out.
fn arrive_and_wait() -> u32 {
    start_round();
    if (p.arrive != 0u) {
        atomicStore(&arrival[0], this_round());
    }
    if (atomicLoad(&flags[EXPIRED]) != 0u) {
        return 0u;
    }
    for (var t = 0u; t < p.trips; t++) {
        if (go_reached() || go_reached() || go_reached() || go_reached()
            || go_reached() || go_reached() || go_reached() || go_reached()) {
            atomicStore(&flags[SEEN], this_round());
            return 1u;
        }
        if (atomicLoad(&flags[ABORT]) != 0u) {
            break;
        }
    }
    atomicStore(&flags[EXPIRED_ROUND], this_round());
    atomicStore(&flags[EXPIRED], 1u);
    return 0u;
}

// Whether this workgroup's wait saw its round released (uniform: every thread gets thread 0's
// answer); on false the kernel leaves its outputs as they are and the communicator reports it.
fn workgroup_released(lid: u32) -> bool {
    if (lid == 0u) {
        released = arrive_and_wait();
    }
    // Thread 0's wait happens-before every thread's reads of the slots (storage memory), not
    // only of `released` (workgroup memory): a compiler may not move those loads above it.
    storageBarrier();
    return workgroupUniformLoad(&released) != 0u;
}
