// The words of a member's DevicePoll flags, and the round a wait is for (included by
// poll_wait.wgsl and, before fused_wait.wgsl, by the `*_poll` kernels). The includer declares
// `p` (with `round`) and the binding `flags` (the member's words, `array<atomic<u32>>`).
//
// A round is `p.round` plus the member's `round_base` word, which a replayed recording of
// rounds advances on the device (`advance_rounds`), so the same recorded rounds run again as
// new ones. Rounds are the low 32 bits of the communicator's round counter; comparisons are
// modulo 2^32.

const GO: u32 = 0u;
const ABORT: u32 = 1u;
const SEEN: u32 = 2u;
const EXPIRED: u32 = 3u;
const EXPIRED_ROUND: u32 = 4u;
const ROUND_BASE: u32 = 5u;

// The round, read once by the waiting invocation (`start_round`): the base does not move
// during a round.
var<private> round_now: u32;

fn start_round() {
    round_now = p.round + atomicLoad(&flags[ROUND_BASE]);
}

fn this_round() -> u32 {
    return round_now;
}

// Whether `word` has reached the round (modulo 2^32).
fn reached(word: u32) -> bool {
    return bitcast<i32>(word - this_round()) >= 0;
}

fn go_reached() -> bool {
    return reached(atomicLoad(&flags[GO]));
}
