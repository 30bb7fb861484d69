//! The one interface between the communicator and its transports (after NCCL's
//! `include/transport.h`): [`Comm`](super::Comm) validates a call, plans its chunks and keeps the
//! round counter and the poisoning; a [`Transport`] owns everything a mode needs (slots,
//! semaphores, threads), runs one round, grows its slots, releases waiting members after a
//! failure and tears itself down. Generic, the two-phase transports (HostBridge and SyncFd) and
//! DevicePoll each implement it in their own file; no code outside them matches on the mode.

use std::time::Duration;

use vk_native::{Buffer, BufferId};

use super::bridge::BridgeStats;
use super::exchange::Exchange;
use super::faults::FaultHooks;
use super::options::{CommOptions, Mode};
use super::phases::{record_phase_a, record_reduce};
use super::slots::HostSlots;
use crate::error::{Error, Result};
use crate::group::Member;
use crate::tensor::Tensor;

/// What a round works with, owned by the communicator.
pub(super) struct RoundContext<'a> {
    pub(super) members: &'a [Member],
    /// For each member, the members whose submits go out as one batch with its own
    /// (`Comm::submit_batches`).
    pub(super) submit_batches: &'a [Vec<usize>],
    pub(super) opts: &'a CommOptions,
}

/// What one round carries: the all-reduce sum, or any other collective's exchange.
pub(super) enum RoundWork<'a> {
    /// The sum over elements `c0..c0 + n` of every tensor (one per member), in place, on the
    /// f32 or the f16 wire.
    Sum { tensors: &'a [&'a Tensor], c0: usize, n: usize, f16_wire: bool },
    /// A collective's round (`exchange.rs`).
    Exchange(&'a Exchange<'a>),
}

/// Payload from which an exchange's phase B is submitted at once (as the f16-wire sum's is).
const AT_ONCE_BYTES: usize = 1 << 20;

impl RoundWork<'_> {
    /// Records phase A of member `i` into its region of slot entry `e`.
    pub(super) fn phase_a(
        &self,
        m: &Member,
        i: usize,
        slots: &HostSlots,
        e: u64,
        scratch: &mut Option<Buffer>,
        opts: &CommOptions,
    ) -> Result<()> {
        match self {
            Self::Sum { tensors, c0, n, f16_wire } => {
                record_phase_a(m, i, tensors[i], slots, e, scratch, opts, *c0, *n, *f16_wire)
            }
            Self::Exchange(x) => x.record_send(m, i, slots, e, scratch, opts),
        }
    }

    /// Records phase B of member `i` of `nm` from slot entry `e`, after writes to `after`.
    pub(super) fn phase_b(
        &self,
        m: &Member,
        i: usize,
        nm: usize,
        slots: &HostSlots,
        e: u64,
        after: &[BufferId],
    ) -> Result<()> {
        match self {
            Self::Sum { tensors, c0, n, f16_wire } => {
                record_reduce(m, i, nm, tensors[i], slots, e, *c0, *n, *f16_wire, after)
            }
            Self::Exchange(x) => x.record_places(m, i, slots, e, after),
        }
    }

    /// Whether phase B is submitted at once, so the GPUs start as soon as they are released
    /// (large rounds), rather than riding with the caller's next submit.
    pub(super) fn at_once(&self) -> bool {
        match self {
            Self::Sum { f16_wire, .. } => *f16_wire,
            Self::Exchange(x) => x.spec.words(x.dtype) * 4 >= AT_ONCE_BYTES,
        }
    }
}

/// How a communicator's rounds travel.
pub(super) trait Transport: Send + Sync {
    /// The mode this transport implements.
    fn mode(&self) -> Mode;

    /// Its host slots (`None` for Generic, which has none).
    fn slots(&self) -> Option<&HostSlots>;

    /// Before a call's first round: settles what earlier replays left (DevicePoll).
    fn begin_call(&mut self, _members: &[Member]) -> Result<()> {
        Ok(())
    }

    /// Round `*round + 1`, carrying `work`; advances `*round` once the round is out (a later
    /// failure must still release it).
    fn run_round(&mut self, cx: &RoundContext<'_>, round: &mut u64, work: &RoundWork<'_>) -> Result<()>;

    /// Replaces the slots (and what is bound over them) by slots of `capacity` words per member
    /// and entry. The members are idle. An error says why they could not be made.
    fn regrow(&mut self, members: &[Member], capacity: u64, hooks: &FaultHooks) -> Result<()>;

    /// Waits until every round up to `round` was released (HostBridge: by its thread, within
    /// `timeout` and a margin, so that its error naming the member comes before a member's).
    fn released(&self, _round: u64, _timeout: Duration) -> Result<()> {
        Ok(())
    }

    /// A failure the transport saw on its own: its thread's, a member that never arrived.
    fn failure(&self) -> Option<crate::error::Error> {
        None
    }

    /// After a failure: releases every member still waiting for a round up to `round`, so no
    /// queue stays blocked on a release that will never come.
    fn release_waiters(&mut self, round: u64);

    /// The first step of a teardown, before the members are synchronised: a healthy
    /// transport lets its rounds up to `round` be released (within `timeout`), a poisoned one
    /// releases every waiter at once.
    fn wind_down(&mut self, round: u64, healthy: bool, timeout: Duration);

    /// The last step of a teardown (the communicator's drop, or a fallback to Generic): stops
    /// its threads and drops its slots and everything bound over them.
    fn retire(&mut self, members: &[Member]);

    /// How the host bridge released its rounds (HostBridge).
    fn bridge_stats(&self) -> Option<BridgeStats> {
        None
    }

    /// How long a member's wait for its peers polls before it gives up (DevicePoll).
    fn poll_bound(&self) -> Option<Duration> {
        None
    }

    /// The rounds that wait on the devices (DevicePoll): fused into a caller's kernels and
    /// replayed.
    fn device_rounds(&mut self) -> Option<&mut dyn DeviceRounds> {
        None
    }

    /// [`Transport::device_rounds`], to read.
    fn device_rounds_ref(&self) -> Option<&dyn DeviceRounds> {
        None
    }

    /// Test hook: `member` is never released again (HostBridge) or never arrives (DevicePoll).
    #[cfg(feature = "test-hooks")]
    fn withhold(&mut self, _member: usize) {}
}

/// What a transport whose members wait for each other on the devices (DevicePoll) offers
/// beyond [`Transport`]: rounds whose phases a caller fuses into its own kernels
/// (`fused.rs`), and recordings of rounds submitted again.
pub(super) trait DeviceRounds {
    /// A failure the relay saw (cheap: checked before every round).
    fn relay_error(&self) -> Option<Error>;

    /// Before the first round recorded after replays: waits until every member finished its
    /// replayed work.
    fn drain_if_replayed(&mut self, members: &[Member]) -> Result<()>;

    /// Ring entries of slots of `capacity` words: the most rounds one replay may hold.
    fn entries(&self, members: &[Member], capacity: u64) -> u64;

    /// Records round `round` (= `*round_counter + 1`) of a fused all-reduce, whose partials
    /// the caller recorded into each member's region: the barrier to the host and the wait.
    fn finish_fused(&mut self, members: &[Member], round_counter: &mut u64, round: u64) -> Result<()>;

    /// The buffer whose last writer is member `i`'s wait: a reader of the sum comes after it.
    fn flags_id(&self, i: usize) -> vk_native::BufferId;

    /// The wait the reader of a fused round on member `i` does itself, or `None` where
    /// [`DeviceRounds::finish_fused`] recorded it (a device whose loops end early).
    fn inline_wait<'a>(&'a self, m: &Member, i: usize, round: u64) -> Option<FusedWait<'a>>;

    /// Records, on every member, the device's advance of the round numbers by `by`: the last
    /// command of a recording of `by` rounds that is replayed.
    fn record_advance(&mut self, members: &[Member], round_counter: u64, by: u64) -> Result<()>;

    /// A recording of `by` rounds was submitted again: its rounds are the next `by`.
    fn replayed(&mut self, members: &[Member], round_counter: &mut u64, by: u64) -> Result<()>;
}

/// A wait the reader of a fused round does itself: `wgsl/reduce_add_rmsnorm_poll.wgsl`.
pub(crate) struct FusedWait<'a> {
    /// The member's flags (its `go` word among them).
    pub(crate) flags: vk_native::BindRange<'a>,
    /// The member's arrival word in host memory.
    pub(crate) arrival: vk_native::BindRange<'a>,
    /// The round, low 32 bits.
    pub(crate) round: u32,
    /// Loop trips of the bounded poll.
    pub(crate) trips: u32,
}
