// advance_rounds: adds `by` to a DevicePoll member's `round_base` word (flags[5]; see
// wgsl/poll_wait.wgsl), after the last round of a recording that is replayed: each replay's
// recorded rounds then run as the next `by` rounds of the communicator.

const ROUND_BASE: u32 = 5u;

struct AdvanceParams {
    by: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<storage, read_write> flags: array<atomic<u32>>;
var<immediate> p: AdvanceParams;

@compute @workgroup_size(1)
fn advance_rounds() {
    atomicAdd(&flags[ROUND_BASE], p.by);
}
