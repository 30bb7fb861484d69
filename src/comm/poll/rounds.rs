//! DevicePoll's rounds fused into a caller's kernels and replayed ([`DeviceRounds`]).

use std::sync::atomic::Ordering;

use vk_native::{BindRange, GpuBuffer};

use super::device_poll::{restart_if_submitted, DevicePoll};
use super::wait::cuts_loops;
use crate::comm::relay::{flag, ARRIVAL_STRIDE};
use crate::comm::transport::{DeviceRounds, FusedWait};
use crate::error::{Error, Result};
use crate::group::Member;
use crate::kernels::{AdvanceParams, ADVANCE_ROUNDS};

impl DeviceRounds for DevicePoll {
    fn entries(&self, members: &[Member], capacity: u64) -> u64 {
        Self::entries(members, capacity)
    }

    /// [`Self::error`] once the relay or a member's completion check saw a wait run out (an
    /// atomic load until then): checked before every round, where a bus read per member would
    /// cost more than recording the round.
    fn relay_error(&self) -> Option<Error> {
        if self.words.expiry_seen.load(Ordering::Acquire) {
            return self.error();
        }
        self.relay.error()
    }

    /// Before the first round recorded after replays: waits until every member finished its
    /// replayed work. A replay reuses its recording's slot entries whatever the round numbers,
    /// so the usual argument (an entry is written again only two rounds after it was last
    /// read) does not cover a recorded round that follows a replayed one.
    fn drain_if_replayed(&mut self, members: &[Member]) -> Result<()> {
        if self.replayed {
            for m in members {
                m.synchronize()?;
            }
            self.replayed = false;
        }
        Ok(())
    }

    /// Records round `round` (= `*round_counter + 1`) of a fused all-reduce, whose partials
    /// the caller recorded into each member's region: the barrier to the host and the wait on
    /// every member, as [`DevicePoll::run_round`] does between its phases.
    fn finish_fused(&mut self, members: &[Member], round_counter: &mut u64, round: u64) -> Result<()> {
        if round != *round_counter + 1 {
            return Err(Error::InvalidArgument(format!(
                "fused all-reduce round {round} finished out of order (next is {})",
                *round_counter + 1
            )));
        }
        if let Some(e) = self.relay_error() {
            return Err(e);
        }
        for (i, m) in members.iter().enumerate() {
            restart_if_submitted(&mut self.open[i], m);
            m.shared.barrier_to_host()?;
            // On a GPU the reader waits itself (`inline_wait`); a CPU device's wait is a chain.
            if cuts_loops(m) {
                self.record_wait(m, i, round)?;
            }
            self.hook.recorded(i);
            self.open[i].1 += 1;
        }
        *round_counter = round;
        self.recorded = true;
        self.relay.announce(round);
        self.flush_if_ring_full(members)
    }

    /// The flags buffer of member `i` (its wait's last write).
    fn flags_id(&self, i: usize) -> vk_native::BufferId {
        self.words.flags[i].id()
    }

    /// The wait the reader of a fused round on member `i` does itself, or `None` where
    /// [`DevicePoll::finish_fused`] recorded it (a device whose loops end early).
    fn inline_wait<'a>(&'a self, m: &Member, i: usize, round: u64) -> Option<FusedWait<'a>> {
        (!cuts_loops(m)).then(|| FusedWait {
            flags: BindRange::whole(&self.words.flags[i]),
            arrival: BindRange {
                buffer: &self.arrival_imports[i],
                offset: i as u64 * ARRIVAL_STRIDE,
                size: ARRIVAL_STRIDE,
            },
            round: self.recorded_round(round),
            trips: self.plans[i].trips,
        })
    }

    /// Records, on every member, the device's advance of `round_base` by `by`: the last command
    /// of a recording that holds `by` rounds and is replayed (after a barrier, so every wait of
    /// the recording read the base first).
    fn record_advance(&mut self, members: &[Member], round_counter: u64, by: u64) -> Result<()> {
        // The rounds just recorded belong to the recording: replaying it next is the usual
        // sequence of rounds, `by` apart for each entry. The recording is submitted before
        // anything recorded after it, so from here on the devices' base is `by` further.
        self.recorded = false;
        self.replay_offset = round_counter.wrapping_sub(by).wrapping_sub(self.round_base);
        self.round_base = self.round_base.wrapping_add(by);
        for (i, m) in members.iter().enumerate() {
            let flags = &self.words.flags[i];
            m.shared.dispatch_ranges(
                ADVANCE_ROUNDS,
                &[BindRange::whole(flags)],
                &[],
                &AdvanceParams { by: by as u32 },
                [1, 1, 1],
            )?;
        }
        Ok(())
    }

    /// A recording of `by` rounds (ending with [`DevicePoll::record_advance`]) is submitted
    /// again: its rounds are the next `by` of the communicator. The relay may release them.
    fn replayed(&mut self, members: &[Member], round_counter: &mut u64, by: u64) -> Result<()> {
        // After rounds recorded since, the same reasoning as in `drain_if_replayed`, the
        // other way round.
        if self.recorded {
            for m in members {
                m.synchronize()?;
            }
            self.recorded = false;
        }
        // The base this submission needs for its rounds to be the next ones. Rounds recorded
        // since the last submission of the recording moved the count but not the devices'
        // base: then (the devices idle, drained above) the host stores the new base.
        let base = round_counter.wrapping_sub(self.replay_offset);
        if base != self.round_base {
            for f in &self.words.flags {
                f.publish(flag::ROUND_BASE, base as u32);
            }
        }
        *round_counter += by;
        self.round_base = base.wrapping_add(by);
        self.replayed = true;
        self.relay.announce(*round_counter);
        Ok(())
    }
}
