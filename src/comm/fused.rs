//! DevicePoll rounds a caller fuses into its own kernels, and recordings of rounds replayed:
//! the crate-internal handles the tensor-parallel layers and [`crate::step::Step`] borrow from a
//! [`Comm`]. A fused round is opened by `Comm::fused_round`; each member's partial is
//! recorded straight into its region (`FusedRound::output`), `FusedRound::finish` records
//! the arrival and the wait, and the consumer sums `FusedRound::input` in member order
//! (`reduce_add_rmsnorm`), bitwise what [`Comm::all_reduce`] gives. `Comm::replays` is the
//! handle for recordings of rounds that are submitted again.

use super::options::Mode;
use super::slots::HostSlots;
use super::transport::FusedWait;
use super::Comm;
use crate::error::{Error, Result};
use crate::group::Member;

/// Where a member reads a [`FusedRound`]'s partials (`FusedRound::input`).
pub(crate) struct FusedInput<'a> {
    /// Elements summed.
    pub(crate) n: usize,
    pub(crate) binding: vk_native::BindRange<'a>,
    /// Word offset of the entry's first region in `binding`.
    pub(crate) offset: u64,
    /// Words between two members' regions.
    pub(crate) stride: u64,
    pub(crate) members: usize,
    /// The buffer whose last writer is the member's wait: the reader must come after it.
    pub(crate) after: vk_native::BufferId,
    /// Where the member waits inside the reader itself (GPUs), instead of in `poll_wait`
    /// dispatches recorded by `FusedRound::finish` (CPU devices, whose loops end early).
    pub(crate) wait: Option<FusedWait<'a>>,
}

/// A DevicePoll round on the f32 wire whose phases the caller records into its own kernels:
/// the handle a tensor-parallel layer borrows from its communicator
/// ([`Reducer::fused_round`](crate::tp::Reducer::fused_round)); opaque outside the crate.
pub struct FusedRound<'a> {
    comm: &'a mut Comm,
    round: u64,
    /// Elements summed.
    n: usize,
    finished: bool,
}

impl Comm {
    /// Whether a round of `n` elements can be fused: DevicePoll, one slot, the f32 wire.
    fn fuses(&self, n: usize) -> bool {
        self.mode() == Mode::DevicePoll
            && n > 0
            && (n as u64) * 4 < self.opts.f16_threshold_bytes
            && (n as u64) <= HostSlots::max_capacity(&self.members)
    }

    /// Opens a fused round of `n` elements, or `None` where the communicator cannot fuse one
    /// (another mode, or `n` past one slot or the f16-wire threshold): the caller then uses
    /// [`Comm::all_reduce`], which gives the same bits.
    pub(crate) fn fused_round(&mut self, n: usize) -> Result<Option<FusedRound<'_>>> {
        self.check_healthy()?;
        if !self.fuses(n) {
            return Ok(None);
        }
        self.prepare_slots(n as u64)?;
        let Some(t) = self.transport.device_rounds() else { return Ok(None) };
        let settled = match t.relay_error() {
            Some(e) => Err(e),
            None => t.drain_if_replayed(&self.members),
        };
        if let Err(e) = settled {
            self.poison(&e);
            return Err(e);
        }
        Ok(Some(FusedRound { round: self.round + 1, n, comm: self, finished: false }))
    }

    /// Whether a recording of `rounds` fused rounds of `n` elements can be replayed: DevicePoll, every one
    /// of them fused on the f32 wire, and at most one ring of slot entries (every entry read
    /// once per submission).
    pub(crate) fn replay_fits(&self, rounds: u64, n: usize) -> bool {
        let c = self;
        let capacity = c.slot_capacity().max(n as u64);
        // A replay reuses each entry `rounds` rounds later: the argument that no entry is
        // written while a peer reads it needs two.
        c.transport.device_rounds_ref().is_some_and(|t| rounds <= t.entries(&c.members, capacity))
            && c.poisoned.is_none()
            && c.fuses(n)
            && rounds >= 2
    }

    /// The handle for recordings of DevicePoll rounds replayed; an error in other modes.
    pub(crate) fn replays(&mut self) -> Result<Replays<'_>> {
        match self.transport.device_rounds_ref() {
            Some(_) => Ok(Replays { comm: self }),
            None => Err(Error::InvalidArgument(format!(
                "only DevicePoll rounds are replayed, not {}",
                self.mode()
            ))),
        }
    }
}

impl FusedRound<'_> {
    /// Member `i`'s region of the round's slot entry, where its partial goes: the binding and
    /// the word offset of the region in it.
    pub(crate) fn output(&self, i: usize) -> Result<(vk_native::BindRange<'_>, u64)> {
        let slots = self.comm.transport.slots().ok_or_else(|| Error::InvalidArgument("no slots".into()))?;
        check_member(i, &self.comm.members)?;
        Ok(slots.own_region(i, self.round % slots.layout.entries))
    }

    /// Records the round's arrival and wait on every member (after the partials were recorded
    /// into `FusedRound::output`); the round counts as an all-reduce.
    pub(crate) fn finish(&mut self) -> Result<()> {
        let c = &mut *self.comm;
        let t = c.transport.device_rounds().expect("a fused round is DevicePoll's");
        match t.finish_fused(&c.members, &mut c.round, self.round) {
            Ok(()) => {
                c.all_reduces += 1;
                self.finished = true;
                Ok(())
            }
            Err(e) => {
                c.poison(&e);
                Err(e)
            }
        }
    }

    /// Where member `i` reads the round's sum from (after `FusedRound::finish`): the binding
    /// of the slot entry, the word offset of its first region, the words between regions, and
    /// the buffer the reader must wait for.
    pub(crate) fn input(&self, i: usize) -> Result<FusedInput<'_>> {
        if !self.finished {
            return Err(Error::InvalidArgument("a fused round is read before it was finished".into()));
        }
        let c = &*self.comm;
        check_member(i, &c.members)?;
        let t = c.transport.device_rounds_ref().expect("a fused round is DevicePoll's");
        let slots = c.transport.slots().ok_or_else(|| Error::InvalidArgument("no slots".into()))?;
        let (binding, offset) = slots.entry(i, self.round % slots.layout.entries);
        Ok(FusedInput {
            n: self.n,
            binding,
            offset,
            stride: slots.layout.stride,
            members: c.members.len(),
            after: t.flags_id(i),
            wait: t.inline_wait(&c.members[i], i, self.round),
        })
    }
}

fn check_member(i: usize, members: &[Member]) -> Result<()> {
    match i < members.len() {
        true => Ok(()),
        false => Err(Error::IndexOutOfRange {
            what: "fused round member",
            index: i,
            len: members.len(),
            of: "members in the communicator",
        }),
    }
}

/// Recordings of DevicePoll rounds that are submitted again ([`crate::step::Step`], the decoder).
pub(crate) struct Replays<'a> {
    comm: &'a mut Comm,
}

impl Replays<'_> {
    /// Records, as the last command of a recording of `by` rounds, every member's device-side
    /// advance of the round numbers, so each replay of the recording runs as new rounds.
    pub(crate) fn record_advance(&mut self, by: u64) -> Result<()> {
        let c = &mut *self.comm;
        let t = c.transport.device_rounds().expect("made over DevicePoll");
        t.record_advance(&c.members, c.round, by)
    }

    /// A recording of `by` rounds (ended by [`Replays::record_advance`]) was submitted again on
    /// every member: its rounds are the next `by`, `all_reduces` of them all-reduce calls (the
    /// others other collectives').
    pub(crate) fn replayed(&mut self, by: u64, all_reduces: u64) -> Result<()> {
        self.comm.check_healthy()?;
        let c = &mut *self.comm;
        let t = c.transport.device_rounds().expect("made over DevicePoll");
        if let Err(e) = t.replayed(&c.members, &mut c.round, by) {
            c.poison(&e);
            return Err(e);
        }
        c.all_reduces += all_reduces;
        Ok(())
    }
}
