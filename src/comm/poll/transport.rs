//! DevicePoll as a [`Transport`]: a call's rounds, growth, failure and retirement.

use std::time::Duration;

use vk_native::GpuBuffer;

use super::device_poll::{restart_if_submitted, DevicePoll, FUSED_WAIT_MAX_WORDS};
use super::wait::cuts_loops;
use crate::comm::faults::FaultHooks;
use crate::comm::options::Mode;
use crate::comm::phases::forget_slots;
use crate::comm::slots::HostSlots;
use crate::comm::transport::{DeviceRounds, RoundContext, RoundWork, Transport};
use crate::error::{Error, Result};
use crate::group::Member;

impl Transport for DevicePoll {
    fn mode(&self) -> Mode {
        Mode::DevicePoll
    }

    fn slots(&self) -> Option<&HostSlots> {
        self.slots.as_ref()
    }

    fn begin_call(&mut self, members: &[Member]) -> Result<()> {
        self.drain_if_replayed(members)
    }

    /// Records round `*round + 1` on every member; `*round` advances once every member
    /// recorded it.
    fn run_round(
        &mut self,
        cx: &RoundContext<'_>,
        round_counter: &mut u64,
        work: &RoundWork<'_>,
    ) -> Result<()> {
        let (members, opts) = (cx.members, cx.opts);
        if let Some(e) = self.relay_error() {
            return Err(e);
        }
        let round = *round_counter + 1;
        let slots = self.slots.as_ref().expect("slots exist while the transport runs");
        let e = round % slots.layout.entries;
        let nm = members.len();
        for (i, m) in members.iter().enumerate() {
            let sh = &m.shared;
            restart_if_submitted(&mut self.open[i], m);
            work.phase_a(m, i, slots, e, &mut self.scratch[i], opts)?;
            sh.barrier_to_host()?;
            match *work {
                RoundWork::Sum { tensors, c0, n, f16_wire: false }
                    if !cuts_loops(m) && n <= FUSED_WAIT_MAX_WORDS =>
                {
                    self.record_wait_and_reduce(m, i, nm, tensors[i], e, c0, n, round)?;
                }
                _ => {
                    self.record_wait(m, i, round)?;
                    work.phase_b(m, i, nm, slots, e, &[self.words.flags[i].id()])?;
                }
            }
            self.hook.recorded(i);
            self.open[i].1 += 1;
        }
        *round_counter = round;
        self.recorded = true;
        self.relay.announce(round);
        // Every entry at most once per submission; large rounds go out at once, so the GPUs
        // start as soon as they are released.
        if work.at_once() {
            for m in members {
                m.flush()?;
            }
        }
        self.flush_if_ring_full(members)?;
        Ok(())
    }

    fn regrow(&mut self, members: &[Member], capacity: u64, hooks: &FaultHooks) -> Result<()> {
        forget_slots(members, &mut self.slots, &mut self.scratch);
        let entries = Self::entries(members, capacity);
        self.slots = Some(HostSlots::new(members, capacity, entries, hooks)?);
        Ok(())
    }

    fn failure(&self) -> Option<Error> {
        self.error()
    }

    /// Ends every wait at once.
    fn release_waiters(&mut self, _round: u64) {
        self.abort();
    }

    /// A poisoned transport's waits end at once; a healthy one's complete as the relay
    /// releases them while the members synchronise.
    fn wind_down(&mut self, _round: u64, healthy: bool, _timeout: Duration) {
        if !healthy {
            self.abort();
        }
    }

    fn retire(&mut self, members: &[Member]) {
        self.abort();
        for m in members {
            let _ = m.synchronize();
        }
        forget_slots(members, &mut self.slots, &mut self.scratch);
        self.detach(members);
    }

    fn poll_bound(&self) -> Option<Duration> {
        Some(self.bound())
    }

    fn device_rounds(&mut self) -> Option<&mut dyn DeviceRounds> {
        Some(self)
    }

    fn device_rounds_ref(&self) -> Option<&dyn DeviceRounds> {
        Some(self)
    }

    /// `member`'s later rounds never store their arrival (a member that never arrives).
    #[cfg(feature = "test-hooks")]
    fn withhold(&mut self, member: usize) {
        self.withheld = Some(member);
    }
}
