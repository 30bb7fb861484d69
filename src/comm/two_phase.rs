//! The two-phase transports (HostBridge, SyncFd): per round, phase A writes each member's wire
//! value into its slot of imported host memory; once every peer's phase A is done, phase B sums
//! every member's slot in member order on each device. The module docs of `comm` state the
//! protocol and why no member overwrites a half a peer still reads; this file records it.

use std::borrow::Borrow;
use std::sync::Arc;

use vk_native::{BindRange, Buffer, BufferId, BufferUsage, DeviceType, GpuBuffer, TimelineSemaphore};

use super::bridge::{BridgeConfig, HostBridge};
use super::faults::FaultHooks;
use super::slots::HostSlots;
use super::sync_fd::SyncFdExchange;
use super::{CommOptions, Mode, SPIN_GPUS, SPIN_WITH_CPU_DEVICE};
use crate::error::{Error, Result};
use crate::group::{submit_batch, GroupId, Member};
use crate::kernels::{
    elementwise_groups, CopyParams, ReduceSlotsParams, COPY_U32, F32_TO_F16, REDUCE_SLOTS_F16,
    REDUCE_SLOTS_F32,
};
use crate::tensor::Tensor;

/// Who releases a member's phase B once every peer's phase A is done.
pub(super) enum Release {
    /// A host thread that watches `done[j]` and signals `go[i]`.
    Bridge(HostBridge),
    /// SYNC_FD payloads of the peers' phase-A submits, imported into each member.
    SyncFd(SyncFdExchange),
}

/// The state of a two-phase transport.
pub(super) struct TwoPhase {
    pub(super) slots: Option<HostSlots>,
    /// Per member, device memory the f16-wire conversion writes before the copy engine moves it
    /// to the host slot (shader stores to host memory ran at half the copy engine's rate on the
    /// H200). Made at first use, replaced when the slots grow.
    scratch: Vec<Option<Buffer>>,
    done: Vec<TimelineSemaphore>,
    go: Vec<TimelineSemaphore>,
    pub(super) release: Release,
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

    /// The mode this transport implements.
    pub(super) fn mode(&self) -> Mode {
        match self.release {
            Release::Bridge(_) => Mode::HostBridge,
            Release::SyncFd(_) => Mode::SyncFd,
        }
    }

    /// The host bridge, in HostBridge mode.
    pub(super) fn bridge(&self) -> Option<&HostBridge> {
        match &self.release {
            Release::Bridge(b) => Some(b),
            Release::SyncFd(_) => None,
        }
    }

    /// Stops the bridge thread, if any.
    pub(super) fn stop(&mut self) {
        if let Release::Bridge(b) = &mut self.release {
            b.stop();
        }
    }

    /// Signals every `go` up to `round` from the host, so no queue stays blocked on a release
    /// that will never come.
    pub(super) fn release_all(&self, round: u64) {
        for g in &self.go {
            if g.value().is_ok_and(|v| v < round) {
                let _ = g.signal(round);
            }
        }
    }

    /// Drops the slots and scratch buffers and every cached bind group over them.
    pub(super) fn forget(&mut self, members: &[Member]) {
        forget_slots(members, &mut self.slots, &mut self.scratch);
    }

    /// Round `*round + 1` over elements `c0..c0 + n` of every tensor; `*round` advances once
    /// every phase A is submitted (a later failure must still release that round).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn run_round<T: Borrow<Tensor>>(
        &mut self,
        members: &[Member],
        submit_batches: &[Vec<usize>],
        opts: &CommOptions,
        round_counter: &mut u64,
        tensors: &mut [T],
        c0: usize,
        n: usize,
        f16_wire: bool,
    ) -> Result<()> {
        let round = *round_counter + 1;
        let half = round % 2;
        let slots = self.slots.as_ref().expect("slots exist while the transport runs");
        let nm = members.len();

        // Phase A on every member: its partial into its own region of this round's half.
        for (i, (m, t)) in members.iter().zip(tensors.iter()).enumerate() {
            let sh = &m.shared;
            record_phase_a(m, i, t.borrow(), slots, half, &mut self.scratch[i], opts, c0, n, f16_wire)?;
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
        for (i, (m, t)) in members.iter().zip(tensors.iter()).enumerate() {
            let sh = &m.shared;
            match &mut self.release {
                Release::SyncFd(x) => x.phase_b_waits(i, m),
                Release::Bridge(_) => sh.wait_next_submit(&self.go[i], round),
            }
            sh.barrier_from_host()?;
            record_reduce(m, i, nm, t.borrow(), slots, half, c0, n, f16_wire, &[])?;
            if f16_wire {
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
}

/// Drops `slots` and every member's `scratch` buffer, and every cached bind group over them:
/// what both two-phase transports (semaphore-released and DevicePoll) do before new slots.
pub(crate) fn forget_slots(
    members: &[Member],
    slots: &mut Option<HostSlots>,
    scratch: &mut [Option<Buffer>],
) {
    if let Some(old) = slots.take() {
        for (m, b) in members.iter().zip(&old.imports) {
            m.shared.forget_buffer(b.id());
        }
    }
    for (m, b) in members.iter().zip(scratch.iter_mut()) {
        if let Some(b) = b.take() {
            m.shared.forget_buffer(b.id());
        }
    }
}

/// Records phase A of member `i`: elements `c0..c0 + n` of `t` (its partial), as f32 or
/// converted to f16, into its region of slot entry `e`: by a kernel storing straight into host
/// memory up to `opts.phase_a_kernel_bytes`, else through the copy engine (the f16 wire first
/// converts into `scratch`, device memory made or grown here). The caller records the barrier
/// that makes it visible to the host.
#[allow(clippy::too_many_arguments)]
pub(crate) fn record_phase_a(
    m: &Member,
    i: usize,
    t: &Tensor,
    slots: &HostSlots,
    e: u64,
    scratch: &mut Option<Buffer>,
    opts: &CommOptions,
    c0: usize,
    n: usize,
    f16_wire: bool,
) -> Result<()> {
    let sh = &m.shared;
    let slot = slots.import(i);
    let words = if f16_wire { n.div_ceil(2) } else { n } as u64;
    if words * 4 <= opts.phase_a_kernel_bytes {
        // A kernel stores straight into this member's region of the entry.
        let (region, at) = slots.own_region(i, e);
        let entry = if f16_wire { F32_TO_F16 } else { COPY_U32 };
        sh.dispatch_ranges(
            entry,
            &[BindRange::whole(&t.buffer), region],
            &[],
            &CopyParams { n: n as u32, src_offset: c0 as u32, dst_offset: at as u32 },
            elementwise_groups(words as usize),
        )
    } else if f16_wire {
        // Convert into device memory, then let the copy engine write the host slot.
        let need = slots.capacity * 4;
        if scratch.as_ref().is_none_or(|b| b.size() < need) {
            if let Some(old) = scratch.take() {
                sh.forget_buffer(old.id());
            }
            let usage = BufferUsage { copy_src: true, copy_dst: false };
            *scratch =
                Some(Buffer::new(&sh.device, need, usage, "crossgpu f16 wire").map_err(|e| sh.err(e))?);
        }
        let scratch = scratch.as_ref().expect("made above");
        sh.dispatch(
            F32_TO_F16,
            &[&t.buffer, scratch],
            &[],
            &CopyParams { n: n as u32, src_offset: c0 as u32, dst_offset: 0 },
            elementwise_groups(words as usize),
        )?;
        sh.record_copy(scratch, 0, slot, slots.region_bytes(i, e), words * 4)
    } else {
        sh.record_copy(&t.buffer, c0 as u64 * 4, slot, slots.region_bytes(i, e), words * 4)
    }
}

/// Records phase B's sum on member `i` of `nm`: every member's wire values of slot entry `e`,
/// in member order, into elements `c0..c0 + n` of `t`. `after` are buffers the sum must wait
/// for (hazard tracking places the barrier).
#[allow(clippy::too_many_arguments)]
pub(crate) fn record_reduce(
    m: &Member,
    i: usize,
    nm: usize,
    t: &Tensor,
    slots: &HostSlots,
    e: u64,
    c0: usize,
    n: usize,
    f16_wire: bool,
    after: &[BufferId],
) -> Result<()> {
    let sh = &m.shared;
    let words = if f16_wire { n.div_ceil(2) } else { n };
    let entry = if f16_wire { REDUCE_SLOTS_F16 } else { REDUCE_SLOTS_F32 };
    // The kernel reads the peers' slots straight from host memory with 16-byte loads
    // (docs/BENCHMARKS.md: faster than staging them through device memory first).
    let (binding, at) = slots.entry(i, e);
    let imm = ReduceSlotsParams {
        n: n as u32,
        members: nm as u32,
        stride: slots.layout.stride as u32,
        offset: at as u32,
        dst_offset: c0 as u32,
        self_index: i as u32,
    };
    // reduce_slots reads 4 words per thread and step (vec4 loads).
    sh.dispatch_ranges(
        entry,
        &[binding, BindRange::whole(&t.buffer)],
        after,
        &imm,
        elementwise_groups(words.div_ceil(4)),
    )
}
