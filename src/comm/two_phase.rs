//! The two-phase transports (HostBridge, SyncFd): per round, phase A writes each member's wire
//! value into its slot of imported host memory; once every peer's phase A is done, phase B sums
//! every member's slot in member order on each device. The module docs of `comm` state the
//! protocol and why no member overwrites a half a peer still reads; this file records it.

use std::sync::Arc;
use std::time::Duration;

use vk_native::{Buffer, DeviceType, TimelineSemaphore};

use super::bridge::{BridgeConfig, BridgeStats, HostBridge};
use super::faults::FaultHooks;
use super::options::{CommOptions, Mode, SPIN_GPUS, SPIN_WITH_CPU_DEVICE};
use super::phases::forget_slots;
use super::slots::HostSlots;
use super::sync_fd::SyncFdExchange;
use super::transport::{RoundContext, RoundWork, Transport};
use crate::error::{Error, Result};
use crate::group::{submit_batch, GroupId, Member};

/// Who releases a member's phase B once every peer's phase A is done.
pub(super) enum Release {
    /// A host thread that watches `done[j]` and signals `go[i]`.
    Bridge(HostBridge),
    /// SYNC_FD payloads of the peers' phase-A submits, imported into each member.
    SyncFd(SyncFdExchange),
}

/// The state of a two-phase transport.
pub(super) struct TwoPhase {
    slots: Option<HostSlots>,
    /// Per member, device memory the f16-wire conversion writes before the copy engine moves it
    /// to the host slot (shader stores to host memory ran at half the copy engine's rate on the
    /// H200). Made at first use, replaced when the slots grow.
    scratch: Vec<Option<Buffer>>,
    done: Vec<TimelineSemaphore>,
    go: Vec<TimelineSemaphore>,
    release: Release,
}

impl TwoPhase {
    /// Semaphores, slots of `capacity` words, and the bridge thread or SYNC_FD exchange of
    /// `mode` (HostBridge or SyncFd).
    pub(super) fn start(
        members: &[Member],
        mode: Mode,
        opts: &CommOptions,
        group: GroupId,
        hooks: &Arc<FaultHooks>,
        capacity: u64,
    ) -> Result<Self> {
        let sem = |m: &Member| TimelineSemaphore::new(m.device(), 0).map_err(|e| m.shared.err(e));
        let done = members.iter().map(sem).collect::<Result<Vec<_>>>()?;
        let go = members.iter().map(sem).collect::<Result<Vec<_>>>()?;
        let slots = HostSlots::new(members, capacity, 2, hooks)?;
        let release = match mode {
            Mode::HostBridge => {
                let cfg = BridgeConfig {
                    done: done.clone(),
                    go: go.clone(),
                    labels: members.iter().map(|m| m.label().to_string()).collect(),
                    spin: opts.spin.unwrap_or_else(|| {
                        let cpu = members.iter().any(|m| m.adapter().device_type == DeviceType::Cpu);
                        if cpu {
                            SPIN_WITH_CPU_DEVICE
                        } else {
                            SPIN_GPUS
                        }
                    }),
                    timeout: opts.timeout,
                };
                let name = format!("crossgpu-bridge-{}", group.0);
                Release::Bridge(
                    HostBridge::start(name, cfg).map_err(|e| {
                        Error::OutOfHostMemory(format!(": cannot start the bridge thread: {e}"))
                    })?,
                )
            }
            Mode::SyncFd => Release::SyncFd(SyncFdExchange::new(members, hooks.clone())?),
            Mode::Generic | Mode::DevicePoll => {
                return Err(Error::InvalidArgument(format!("{mode} is not a semaphore-released transport")))
            }
        };
        let scratch = vec![None; members.len()];
        Ok(Self { slots: Some(slots), scratch, done, go, release })
    }

    /// The host bridge, in HostBridge mode.
    fn bridge(&self) -> Option<&HostBridge> {
        match &self.release {
            Release::Bridge(b) => Some(b),
            Release::SyncFd(_) => None,
        }
    }

    /// Stops the bridge thread, if any (again is harmless).
    fn stop(&mut self) {
        if let Release::Bridge(b) = &mut self.release {
            b.stop();
        }
    }
}

impl Transport for TwoPhase {
    fn mode(&self) -> Mode {
        match self.release {
            Release::Bridge(_) => Mode::HostBridge,
            Release::SyncFd(_) => Mode::SyncFd,
        }
    }

    fn slots(&self) -> Option<&HostSlots> {
        self.slots.as_ref()
    }

    /// Round `*round + 1`; `*round` advances once every phase A is submitted (a later failure
    /// must still release that round).
    fn run_round(
        &mut self,
        cx: &RoundContext<'_>,
        round_counter: &mut u64,
        work: &RoundWork<'_>,
    ) -> Result<()> {
        let (members, submit_batches, opts) = (cx.members, cx.submit_batches, cx.opts);
        let round = *round_counter + 1;
        let half = round % 2;
        let slots = self.slots.as_ref().expect("slots exist while the transport runs");
        let nm = members.len();

        // Phase A on every member: its partial into its own region of this round's half.
        for (i, m) in members.iter().enumerate() {
            let sh = &m.shared;
            work.phase_a(m, i, slots, half, &mut self.scratch[i], opts)?;
            sh.barrier_to_host()?;
            let batch = &submit_batches[i];
            match &mut self.release {
                Release::SyncFd(x) => {
                    let sig = x.phase_a_signal(i, m)?;
                    sh.submit(&[(&self.done[i], round)], &[&sig])?;
                }
                // The batch's last member submits it, each member signalling its `done`.
                Release::Bridge(_) if batch.last() == Some(&i) => {
                    let signals: Vec<[(&TimelineSemaphore, u64); 1]> =
                        batch.iter().map(|&j| [(&self.done[j], round)]).collect();
                    submit_batch(members, batch, &signals)?;
                }
                Release::Bridge(_) => {}
            }
        }
        *round_counter = round;
        match &mut self.release {
            Release::Bridge(b) => b.submitted(round),
            Release::SyncFd(x) => x.exchange(members)?,
        }

        // Phase B on every member, at the start of its next command buffer.
        for (i, m) in members.iter().enumerate() {
            let sh = &m.shared;
            match &mut self.release {
                Release::SyncFd(x) => x.phase_b_waits(i, m),
                Release::Bridge(_) => sh.wait_next_submit(&self.go[i], round),
            }
            sh.barrier_from_host()?;
            work.phase_b(m, i, nm, slots, half, &[])?;
            if work.at_once() {
                // Large rounds go out at once, so the GPU starts as soon as it is released.
                let batch = &submit_batches[i];
                match &self.release {
                    Release::SyncFd(_) => {
                        sh.submit(&[], &[])?;
                    }
                    Release::Bridge(_) if batch.last() == Some(&i) => {
                        submit_batch(members, batch, &vec![[]; batch.len()])?;
                    }
                    Release::Bridge(_) => {}
                }
            }
        }
        if let Some(e) = self.bridge().and_then(|b| b.error()) {
            return Err(e);
        }
        Ok(())
    }

    fn regrow(&mut self, members: &[Member], capacity: u64, hooks: &FaultHooks) -> Result<()> {
        forget_slots(members, &mut self.slots, &mut self.scratch);
        self.slots = Some(HostSlots::new(members, capacity, 2, hooks)?);
        Ok(())
    }

    fn released(&self, round: u64, timeout: Duration) -> Result<()> {
        match self.bridge() {
            // A margin past the bridge's own bound, so its error (naming the member) comes first.
            Some(b) => b.wait_released(round, timeout + Duration::from_secs(1)),
            None => Ok(()),
        }
    }

    /// Signals every `go` up to `round` from the host.
    fn release_waiters(&mut self, round: u64) {
        self.stop();
        for g in &self.go {
            if g.value().is_ok_and(|v| v < round) {
                let _ = g.signal(round);
            }
        }
    }

    fn wind_down(&mut self, round: u64, healthy: bool, timeout: Duration) {
        if let Some(b) = self.bridge() {
            if healthy {
                let _ = b.wait_released(round, timeout);
            }
        }
        self.release_waiters(round);
    }

    fn retire(&mut self, members: &[Member]) {
        self.stop();
        forget_slots(members, &mut self.slots, &mut self.scratch);
    }

    fn bridge_stats(&self) -> Option<BridgeStats> {
        Some(self.bridge()?.shared.lock().stats)
    }

    #[cfg(feature = "test-hooks")]
    fn withhold(&mut self, member: usize) {
        if let Some(b) = self.bridge() {
            b.shared.lock().withhold = Some(member);
        }
    }
}
