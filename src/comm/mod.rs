//! The all-reduce communicator: sums one f32 tensor per member, in place, so every member ends
//! with bitwise the same sum.
//!
//! Layering (after NCCL): [`Comm::all_reduce`] validates and plans (wire precision, slot size,
//! chunks), then the communicator's transport runs each round; one enum (`Transport`) is the
//! seam between the two:
//! - **HostBridge** (`two_phase.rs`): two phases through `slots::HostSlots` in imported host
//!   memory, members released by the `bridge::HostBridge` thread through host-signalled
//!   timeline semaphores.
//! - **SyncFd** (`two_phase.rs`): the same two phases, members released by SYNC_FD payloads
//!   exchanged between devices (`sync_fd::SyncFdExchange`), no host thread on the path.
//! - **DevicePoll** (`poll.rs`): the same two phases recorded into each member's stream with
//!   no semaphore and no submit of their own; a kernel polls a `go` word in mapped device
//!   memory that the `relay::Relay` thread stores once every member's arrival word says so.
//! - **Generic** (`generic.rs`): read back, sum on the CPU, write back; works on any devices.
//!
//! `options.rs` holds what a caller chooses, `faults.rs` the reliability tests' fault hooks.
//!
//! ## The two phases, per member i, round k (slot half h = k mod 2)
//! A: copy (f32 wire), or convert in device memory and copy (f16 wire), the partial into slot
//!    (h, i); barrier from shader
//!    and transfer writes to host reads; submit, signalling `done[i] = k`. This closes the
//!    member's open command buffer: the caller's earlier work rides in the same submit.
//! B: recorded at the start of the next command buffer, whose submit waits for `go[i] = k`:
//!    barrier from host writes to shader reads, then `reduce_slots` sums slot (h, j) for
//!    j = 0..N-1 **in that order** into the tensor. Every member adds the same wire values in
//!    the same order, its own included, so all end with the same bits. f32-wire rounds ride
//!    with the caller's next submit; f16-wire (large) rounds are submitted at once.
//!
//! Members that share one queue (stand-ins such as `0/2`) submit phase A, and the at-once
//! phase B, as one batch (`CommOptions::joint_submit`): the batch waits on every member's
//! `go` and signals every member's `done` when all of it completed, which orders nothing
//! differently from separate submits on that one in-order queue except that a member's `done`
//! comes when its queue-mates' phase A has also finished.
//!
//! ## Why no member overwrites a half a peer still reads (any N)
//! Member i writes half h again in round k+2, in phase A(k+2). That command is later in i's
//! submission order than i's wait for `go[i] = k+1`, so it runs after that wait (a semaphore
//! wait's second scope is every later command on the queue). The bridge signals `go[i] = k+1`
//! only after every peer j signalled `done[j] = k+1`, and that signal's first scope is every
//! earlier command on j's queue, which includes j's phase B(k), the last reader of half h of
//! round k. So every read of round k's half h completes before any write of round k+2 into it.
//! (The reference design released a device when *its* partner was done, which with three
//! devices let a fast pair lap the slow one.) SyncFd gives the same chain: phase B(k+1) of i
//! waits on every peer's phase-A(k+1) payload.
//!
//! ## Wire precision
//! f32 below `f16_threshold_bytes` of payload (default 1 MiB, `CROSSGPU_F16_WIRE_BYTES`), f16
//! from there unless [`AllReduceOptions::precision`] says otherwise. On the f16 wire each
//! partial is rounded to f16 (relative error ≤ 2^-11) and **values beyond ±65504 saturate to
//! ±65504**; the sum is then accumulated in f32. Use `Precision::F32` for data that may exceed
//! the f16 range.

pub(crate) mod bridge;
mod faults;
mod generic;
mod options;
mod poll;
mod relay;
pub(crate) mod slots;
mod sync_fd;
pub(crate) mod two_phase;

use std::borrow::Borrow;
use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::group::{DeviceGroup, GroupId, Member};
use crate::tensor::{DType, Tensor};

pub use bridge::BridgeStats;
use faults::FaultHooks;
pub use options::{
    AllReduceOptions, CommOptions, Mode, ModeRequest, Precision, SPIN_GPUS, SPIN_WITH_CPU_DEVICE,
};

use generic::Generic;
#[cfg(feature = "bench")]
pub(crate) use poll::blocker as poll_blocker;
use poll::DevicePoll;
use slots::HostSlots;
use two_phase::TwoPhase;

/// How a communicator's rounds travel: the seam between the planner ([`Comm::all_reduce`]) and
/// the transports.
enum Transport {
    /// Read back, sum on the host, write back.
    Generic,
    /// Two phases through host slots (HostBridge or SyncFd).
    TwoPhase(Box<TwoPhase>),
    /// Two phases through host slots, released by polling kernels.
    Poll(Box<DevicePoll>),
}

/// A DevicePoll round whose phases the caller fuses into its own kernels
/// ([`Comm::fused_round`]).
#[derive(Debug)]
pub(crate) struct FusedRound {
    round: u64,
    /// Elements summed.
    n: usize,
}

/// Where a member reads a [`FusedRound`]'s partials ([`Comm::fused_input`]).
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
    /// dispatches recorded by [`Comm::fused_finish`] (CPU devices, whose loops end early).
    pub(crate) wait: Option<FusedWait<'a>>,
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

/// The all-reduces a communicator ran since its log was last taken ([`Comm::take_round_log`]).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct RoundLog {
    /// All-reduce calls.
    pub(crate) calls: u64,
    /// Calls that could not be replayed: not DevicePoll, the f16 wire, or several rounds.
    pub(crate) unreplayable: u64,
    /// The largest call, in elements.
    pub(crate) largest: usize,
}

impl RoundLog {
    fn note(&mut self, replayable: bool, n: usize) {
        self.calls += 1;
        self.unreplayable += u64::from(!replayable);
        self.largest = self.largest.max(n);
    }
}

/// An all-reduce communicator over a group's members.
pub struct Comm {
    group: GroupId,
    members: Vec<Member>,
    reason: String,
    opts: CommOptions,
    transport: Transport,
    round: u64,
    poisoned: Option<String>,
    hooks: Arc<FaultHooks>,
    all_reduces: u64,
    log: RoundLog,
    /// Generic's staging buffers and sum, kept across rounds (and after a fallback).
    generic: Generic,
    /// For each member, the members whose phase submits go out as one batch with its own, in
    /// member order: those sharing its queue (VkDevice and queue index) with `joint_submit`,
    /// else the member alone. The batch's last member submits it.
    submit_batches: Vec<Vec<usize>>,
}

/// [`Comm::submit_batches`] of `members`.
fn submit_batches(members: &[Member], joint: bool) -> Vec<Vec<usize>> {
    let queue = |m: &Member| (m.device().id(), m.shared.queue_index);
    (0..members.len())
        .map(|i| match joint {
            true => (0..members.len()).filter(|&j| queue(&members[j]) == queue(&members[i])).collect(),
            false => vec![i],
        })
        .collect()
}

impl std::fmt::Debug for Comm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Comm")
            .field("mode", &self.mode())
            .field("members", &self.members.len())
            .field("round", &self.round)
            .finish()
    }
}

/// Why the fast modes cannot run on these members, or `None` if they can.
fn host_bridge_blocker(members: &[Member]) -> Option<String> {
    members.iter().find_map(|m| {
        let c = &m.adapter().caps;
        if !m.device().has_host_import() {
            Some(format!("{} lacks VK_EXT_external_memory_host", m.label()))
        } else if !c.timeline_semaphore {
            Some(format!("{} lacks timeline semaphores", m.label()))
        } else {
            None
        }
    })
}

fn sync_fd_blocker(members: &[Member]) -> Option<String> {
    if members.len() < 2 {
        return Some("SyncFd needs at least two members".into());
    }
    host_bridge_blocker(members).or_else(|| {
        members.iter().find(|m| !m.device().has_sync_fd()).map(|m| {
            format!("{} lacks VK_KHR_external_semaphore_fd with SYNC_FD export and import", m.label())
        })
    })
}

impl Comm {
    /// A communicator over every member of `group`, options from the environment.
    pub fn new(group: &DeviceGroup) -> Result<Self> {
        Self::with_options(group, CommOptions::from_env()?)
    }

    /// A communicator with explicit options.
    pub fn with_options(group: &DeviceGroup, opts: CommOptions) -> Result<Self> {
        Self::build(group, opts, Arc::new(FaultHooks::default()))
    }

    /// Like [`Comm::with_options`], with fault hooks armed before creation (feature
    /// `test-hooks`, for the reliability tests).
    #[cfg(feature = "test-hooks")]
    pub fn with_faults(
        group: &DeviceGroup,
        opts: CommOptions,
        fail_alloc: bool,
        fail_import: bool,
    ) -> Result<Self> {
        let hooks = Arc::new(FaultHooks::default());
        hooks.arm(fail_alloc, fail_import);
        Self::build(group, opts, hooks)
    }

    fn build(group: &DeviceGroup, opts: CommOptions, hooks: Arc<FaultHooks>) -> Result<Self> {
        let members = group.members().to_vec();
        let all_mesa_fd =
            members.iter().all(|m| m.adapter().is_mesa()) && sync_fd_blocker(&members).is_none();
        let (mode, reason) = match opts.mode {
            ModeRequest::Forced(Mode::Generic) => {
                (Mode::Generic, "forced by CROSSGPU_ALLREDUCE=generic".to_string())
            }
            ModeRequest::Forced(Mode::HostBridge) => match host_bridge_blocker(&members) {
                None => (Mode::HostBridge, "forced by CROSSGPU_ALLREDUCE=bridge".to_string()),
                Some(why) => return Err(Error::Unsupported(format!("CROSSGPU_ALLREDUCE=bridge: {why}"))),
            },
            ModeRequest::Forced(Mode::SyncFd) => match sync_fd_blocker(&members) {
                None => (Mode::SyncFd, "forced by CROSSGPU_ALLREDUCE=sync_fd".to_string()),
                Some(why) => return Err(Error::Unsupported(format!("CROSSGPU_ALLREDUCE=sync_fd: {why}"))),
            },
            ModeRequest::Forced(Mode::DevicePoll) => match poll::blocker(&members) {
                None => (Mode::DevicePoll, "forced by CROSSGPU_ALLREDUCE=poll".to_string()),
                Some(why) => return Err(Error::Unsupported(format!("CROSSGPU_ALLREDUCE=poll: {why}"))),
            },
            ModeRequest::Auto if members.len() < 2 => (Mode::Generic, "fewer than two members".to_string()),
            ModeRequest::Auto if all_mesa_fd => {
                (Mode::SyncFd, "every member is on a Mesa driver with SYNC_FD export and import".to_string())
            }
            ModeRequest::Auto => match host_bridge_blocker(&members) {
                None => (
                    Mode::HostBridge,
                    "every member has VK_EXT_external_memory_host and timeline semaphores".to_string(),
                ),
                Some(why) => (Mode::Generic, why),
            },
        };
        let mut comm = Self {
            submit_batches: submit_batches(&members, opts.joint_submit),
            group: group.id(),
            members,
            reason,
            opts,
            transport: Transport::Generic,
            round: 0,
            poisoned: None,
            hooks,
            all_reduces: 0,
            log: RoundLog::default(),
            generic: Generic::default(),
        };
        if mode == Mode::DevicePoll {
            match DevicePoll::start(&comm.members, &comm.opts, comm.group, &comm.hooks, 4096) {
                Ok(t) => {
                    if let Some(note) = t.short_bound_note(&comm.members, comm.opts.timeout) {
                        comm.reason.push_str(&note);
                    }
                    comm.transport = Transport::Poll(Box::new(t));
                }
                Err(why) => comm.fall_back(why),
            }
        } else if mode != Mode::Generic {
            match TwoPhase::start(&comm.members, mode, &comm.opts, comm.group, &comm.hooks, 4096) {
                Ok(t) => comm.transport = Transport::TwoPhase(Box::new(t)),
                Err(why) => comm.fall_back(why),
            }
        }
        log::info!("all-reduce over {} members: {} ({})", comm.members.len(), comm.mode(), comm.reason);
        Ok(comm)
    }

    /// Drops the two-phase transport after `why` (its slots could not be made) and continues
    /// in Generic mode, which loses no data: nothing of the failed call was recorded.
    fn fall_back(&mut self, why: Error) {
        log::warn!("all-reduce falls back to Generic: {why}");
        match std::mem::replace(&mut self.transport, Transport::Generic) {
            Transport::TwoPhase(mut t) => {
                t.stop();
                t.forget(&self.members);
            }
            Transport::Poll(mut t) => {
                t.abort();
                for m in &self.members {
                    let _ = m.synchronize();
                }
                t.forget(&self.members);
                t.detach(&self.members);
            }
            Transport::Generic => {}
        }
        self.reason = format!("fallback: {why}");
    }

    /// The two-phase transport (HostBridge, SyncFd), if that is the mode.
    fn two_phase(&self) -> Option<&TwoPhase> {
        match &self.transport {
            Transport::TwoPhase(t) => Some(t),
            _ => None,
        }
    }

    /// The host slots, unless the mode is Generic.
    fn slots(&self) -> Option<&HostSlots> {
        match &self.transport {
            Transport::TwoPhase(t) => t.slots.as_ref(),
            Transport::Poll(t) => t.slots.as_ref(),
            Transport::Generic => None,
        }
    }

    /// The mode in use.
    pub fn mode(&self) -> Mode {
        match &self.transport {
            Transport::TwoPhase(t) => t.mode(),
            Transport::Poll(_) => Mode::DevicePoll,
            Transport::Generic => Mode::Generic,
        }
    }

    /// In DevicePoll mode, how long a member's wait for its peers polls before it gives up
    /// (calibrated to 90% of the timeout; on llvmpipe, whose loops end after 65,535 trips,
    /// about a second whatever the timeout says, and [`Comm::reason`] says so).
    pub fn poll_bound(&self) -> Option<Duration> {
        match &self.transport {
            Transport::Poll(t) => Some(t.bound()),
            _ => None,
        }
    }

    /// Why this mode was chosen.
    pub fn reason(&self) -> &str {
        &self.reason
    }

    /// Members in the communicator: [`Comm::all_reduce`] takes one tensor for each.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// The members, in the order [`Comm::all_reduce`] takes their tensors (for `RankComm`).
    #[cfg(feature = "mpi")]
    pub(crate) fn members(&self) -> &[Member] {
        &self.members
    }

    /// Whether a call of `n` elements with `opts` exchanges f16 (`opts.precision`, for `Auto`
    /// from the payload against the f16-wire threshold).
    pub(crate) fn f16_wire(&self, opts: &AllReduceOptions, n: usize) -> bool {
        let threshold = opts.f16_threshold_bytes.unwrap_or(self.opts.f16_threshold_bytes);
        match opts.precision {
            Precision::F32 => false,
            Precision::F16 => true,
            Precision::Auto => n as u64 * 4 >= threshold,
        }
    }

    /// The options the communicator was made with (for `RankComm`'s shared path).
    #[cfg(feature = "mpi")]
    pub(crate) fn options(&self) -> &CommOptions {
        &self.opts
    }

    /// Whether the communicator has no members.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Payload bytes from which `Precision::Auto` uses the f16 wire.
    pub fn f16_threshold_bytes(&self) -> u64 {
        self.opts.f16_threshold_bytes
    }

    /// All-reduces performed.
    pub fn all_reduce_count(&self) -> u64 {
        self.all_reduces
    }

    /// Current slot capacity per member and half, in f32 elements (0 in Generic mode).
    pub fn slot_capacity(&self) -> u64 {
        self.slots().map_or(0, |s| s.capacity)
    }

    /// How the host bridge released its rounds so far; `None` unless the mode is HostBridge.
    pub fn bridge_stats(&self) -> Option<BridgeStats> {
        Some(self.two_phase()?.bridge()?.shared.lock().stats)
    }

    /// Test hook (feature `test-hooks`): the bridge never releases `member` again (simulates a lost signal); in
    /// DevicePoll mode `member` never stores its arrival again (a member that never arrives).
    #[cfg(feature = "test-hooks")]
    pub fn withhold_release(&mut self, member: usize) {
        match &mut self.transport {
            Transport::TwoPhase(t) => {
                if let Some(b) = t.bridge() {
                    b.shared.lock().withhold = Some(member);
                }
            }
            Transport::Poll(t) => t.withhold(member),
            Transport::Generic => {}
        }
    }

    /// Test hook (feature `test-hooks`): the next SYNC_FD import into a peer's semaphore fails
    /// (SyncFd mode), as a driver's refusal would.
    #[cfg(feature = "test-hooks")]
    pub fn inject_sync_fd_import_failure(&self) {
        self.hooks.sync_fd_import.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Test hook (feature `test-hooks`): the next slot growth fails to allocate (`alloc`) or to import (`import`).
    #[cfg(feature = "test-hooks")]
    pub fn inject_growth_failure(&self, alloc: bool, import: bool) {
        self.hooks.arm(alloc, import);
    }

    pub(crate) fn validate<T: Borrow<Tensor>>(
        &self,
        tensors: &[T],
        opts: &AllReduceOptions,
    ) -> Result<usize> {
        if let Some(p) = &self.poisoned {
            return Err(Error::Poisoned("the communicator".into(), p.clone()));
        }
        if tensors.len() != self.members.len() {
            return Err(Error::LengthMismatch {
                what: "all_reduce: one tensor per member".into(),
                expected: self.members.len(),
                got: tensors.len(),
            });
        }
        let n = tensors[0].borrow().len();
        // Checked once without building messages (this runs every round); the messages only
        // on a failure.
        let fine = tensors.iter().zip(&self.members).all(|(t, m)| {
            let t = t.borrow();
            t.member.group == self.group
                && t.member.index == m.shared.index
                && t.dtype() == DType::F32
                && t.len() == n
        });
        for (i, t) in tensors.iter().enumerate().filter(|_| !fine) {
            let t = t.borrow();
            if t.member.group != self.group {
                return Err(Error::WrongOwner {
                    what: format!("all_reduce tensor {i}"),
                    expected: format!("group {:?}", self.group),
                    got: format!("group {:?}", t.member.group),
                });
            }
            t.check_on(&self.members[i].shared, &format!("all_reduce tensor {i}"))?;
            t.check_dtype(DType::F32, &format!("all_reduce tensor {i}"))?;
            if t.len() != n {
                return Err(Error::LengthMismatch {
                    what: format!("all_reduce tensor {i}"),
                    expected: n,
                    got: t.len(),
                });
            }
        }
        if let Some(&z) = opts.zero_contribution.iter().find(|&&z| z >= self.members.len()) {
            return Err(Error::IndexOutOfRange {
                what: "zero-contribution member index",
                index: z,
                len: self.members.len(),
                of: "members in the communicator",
            });
        }
        Ok(n)
    }

    /// Sums `tensors` (one f32 tensor per member, in group order, same length) in place: every
    /// member ends with bitwise the same sum. The work is recorded into each member's stream in
    /// order with the caller's other work; it costs one submit per member (phase A).
    ///
    /// Invalid input (count, length, dtype, owner) returns an error and modifies nothing. An
    /// error after work was submitted poisons the communicator: later calls return
    /// [`Error::Poisoned`].
    pub fn all_reduce<T: Borrow<Tensor>>(
        &mut self,
        tensors: &mut [T],
        opts: &AllReduceOptions,
    ) -> Result<()> {
        let n = self.validate(tensors, opts)?;
        if n == 0 {
            return Ok(());
        }
        if let Transport::Poll(t) = &mut self.transport {
            if let Err(e) = t.drain_if_replayed(&self.members) {
                self.poison(&e);
                return Err(e);
            }
        }
        for &z in &opts.zero_contribution {
            self.members[z].fill(tensors[z].borrow(), 0.0)?;
        }
        let f16_wire = self.f16_wire(opts, n);
        let words = if f16_wire { n.div_ceil(2) } else { n } as u64;
        self.prepare_slots(words)?;
        let cap = self.slot_capacity() as usize;
        let result = match &mut self.transport {
            Transport::Generic => self.generic.run(&self.members, tensors, n, f16_wire),
            Transport::Poll(t) => {
                let chunk = if f16_wire { 2 * cap } else { cap };
                (0..n).step_by(chunk).try_for_each(|c0| {
                    t.run_round(
                        &self.members,
                        &self.opts,
                        &mut self.round,
                        tensors,
                        c0,
                        chunk.min(n - c0),
                        f16_wire,
                    )
                })
            }
            Transport::TwoPhase(t) => {
                let chunk = if f16_wire { 2 * cap } else { cap };
                (0..n).step_by(chunk).try_for_each(|c0| {
                    t.run_round(
                        &self.members,
                        &self.submit_batches,
                        &self.opts,
                        &mut self.round,
                        tensors,
                        c0,
                        chunk.min(n - c0),
                        f16_wire,
                    )
                })
            }
        };
        match result {
            Ok(()) => {
                self.all_reduces += 1;
                let one_round = f16_wire || n <= cap;
                self.log.note(self.mode() == Mode::DevicePoll && !f16_wire && one_round && n <= cap, n);
                Ok(())
            }
            Err(e) => {
                self.poison(&e);
                Err(e)
            }
        }
    }

    /// The log of the rounds since the last call, and a new log from here (for a step that
    /// learns whether its rounds can be replayed: [`crate::Step`]).
    pub(crate) fn take_round_log(&mut self) -> RoundLog {
        std::mem::take(&mut self.log)
    }

    /// Grows the slots towards `words` per member (at most what one binding covers: larger
    /// all-reduces run in chunks), unless the mode is Generic; falls back to Generic where new
    /// slots cannot be made, and poisons on any other failure.
    fn prepare_slots(&mut self, words: u64) -> Result<()> {
        if self.mode() == Mode::Generic {
            return Ok(());
        }
        let max_cap = HostSlots::max_capacity(&self.members);
        let grow = if max_cap == 0 {
            Ok(Err(Error::Unsupported(
                "the devices' maxStorageBufferRange leaves no room for host slots".into(),
            )))
        } else {
            self.ensure_capacity(words.min(max_cap), max_cap)
        };
        match grow {
            Ok(Ok(())) => Ok(()),
            // The new slots could not be made; nothing was recorded for this call, and the old
            // slots were drained first: fall back and lose no data.
            Ok(Err(why)) => {
                self.fall_back(why);
                Ok(())
            }
            Err(e) => {
                self.poison(&e);
                Err(e)
            }
        }
    }

    /// Starts a DevicePoll round on the f32 wire whose two phases the caller fuses into its
    /// own kernels (the decoder: the row-parallel product writes each member's partial into
    /// [`Comm::fused_output`], [`Comm::fused_finish`] records the arrival and the wait, and the
    /// next norm sums [`Comm::fused_input`] in member order). `None` where the communicator
    /// cannot (another mode, or `n` elements past one slot or the f16-wire threshold): the
    /// caller then uses [`Comm::all_reduce`], which gives the same bits.
    pub(crate) fn fused_round(&mut self, n: usize) -> Result<Option<FusedRound>> {
        if let Some(p) = &self.poisoned {
            return Err(Error::Poisoned("the communicator".into(), p.clone()));
        }
        let wants = self.mode() == Mode::DevicePoll
            && n > 0
            && (n as u64) * 4 < self.opts.f16_threshold_bytes
            && (n as u64) <= HostSlots::max_capacity(&self.members);
        if !wants {
            return Ok(None);
        }
        self.prepare_slots(n as u64)?;
        let Transport::Poll(t) = &mut self.transport else { return Ok(None) };
        if let Some(e) = t.relay_error() {
            self.poison(&e);
            return Err(e);
        }
        t.drain_if_replayed(&self.members)?;
        Ok(Some(FusedRound { round: self.round + 1, n }))
    }

    /// Whether a recording of `rounds` fused rounds of `n` elements can be replayed: DevicePoll
    /// (whose rounds wait on the devices), every one of them fused on the f32 wire, and at most
    /// one ring of slot entries (every entry read once per submission).
    pub(crate) fn replay_fits(&self, rounds: u64, n: usize) -> bool {
        let Transport::Poll(_) = &self.transport else { return false };
        let fused = n > 0
            && (n as u64) * 4 < self.opts.f16_threshold_bytes
            && (n as u64) <= HostSlots::max_capacity(&self.members);
        let capacity = self.slot_capacity().max(n as u64);
        // A replay reuses each entry `rounds` rounds later: the argument that no entry is
        // written while a peer reads it needs two.
        self.poisoned.is_none()
            && fused
            && rounds >= 2
            && rounds <= poll::DevicePoll::entries(&self.members, capacity)
    }

    /// Poisons the communicator after `e` left its members out of step (a recording of rounds
    /// that will never run, a replay submitted on some members only).
    pub(crate) fn abandon(&mut self, e: &Error) {
        if self.poisoned.is_none() {
            self.poison(e);
        }
    }

    /// Grows the slots to `n` words now (growing waits for the members: never inside a
    /// recording), and settles replayed rounds, before a recording of rounds of `n` elements.
    pub(crate) fn prepare_recording(&mut self, n: usize) -> Result<()> {
        self.prepare_slots(n as u64)?;
        if let Transport::Poll(t) = &mut self.transport {
            t.drain_if_replayed(&self.members)?;
        }
        Ok(())
    }

    /// Rounds recorded or replayed so far.
    pub(crate) fn rounds(&self) -> u64 {
        self.round
    }

    /// Records, as the last command of a recording of `by` rounds, every member's device-side
    /// advance of the round numbers, so each replay of the recording runs as new rounds.
    pub(crate) fn record_round_advance(&mut self, by: u64) -> Result<()> {
        let Transport::Poll(t) = &mut self.transport else {
            return Err(Error::InvalidArgument("only DevicePoll rounds are replayed".into()));
        };
        t.record_advance(&self.members, self.round, by)
    }

    /// A recording of `by` rounds (ended by [`Comm::record_round_advance`]) is submitted again
    /// on every member: its rounds count as the next `by` all-reduces.
    pub(crate) fn replayed(&mut self, by: u64) -> Result<()> {
        if let Some(p) = &self.poisoned {
            return Err(Error::Poisoned("the communicator".into(), p.clone()));
        }
        let Transport::Poll(t) = &mut self.transport else {
            return Err(Error::InvalidArgument("only DevicePoll rounds are replayed".into()));
        };
        if let Err(e) = t.replayed(&self.members, &mut self.round, by) {
            self.poison(&e);
            return Err(e);
        }
        self.all_reduces += by;
        Ok(())
    }

    /// Member `i`'s region of `r`'s slot entry, where its partial goes: the binding and the
    /// word offset of the region in it.
    pub(crate) fn fused_output(&self, r: &FusedRound, i: usize) -> Result<(vk_native::BindRange<'_>, u64)> {
        let slots = self.slots().ok_or_else(|| Error::InvalidArgument("no DevicePoll round".into()))?;
        Ok(slots.own_region(i, r.round % slots.layout.entries))
    }

    /// Records `r`'s arrival and wait on every member (after the partials were recorded into
    /// [`Comm::fused_output`]); the round counts as an all-reduce.
    pub(crate) fn fused_finish(&mut self, r: &FusedRound) -> Result<()> {
        let Transport::Poll(t) = &mut self.transport else {
            return Err(Error::InvalidArgument("no DevicePoll round".into()));
        };
        match t.finish_fused(&self.members, &mut self.round, r.round) {
            Ok(()) => {
                self.all_reduces += 1;
                Ok(())
            }
            Err(e) => {
                self.poison(&e);
                Err(e)
            }
        }
    }

    /// Where member `i` reads `r`'s sum from: the binding of the slot entry, the word offset of
    /// its first region, the words between regions, and the buffer the reader must wait for
    /// (the wait's flags).
    pub(crate) fn fused_input(&self, r: &FusedRound, i: usize) -> Result<FusedInput<'_>> {
        let Transport::Poll(t) = &self.transport else {
            return Err(Error::InvalidArgument("no DevicePoll round".into()));
        };
        let slots = t.slots.as_ref().ok_or_else(|| Error::InvalidArgument("no slots".into()))?;
        let (binding, offset) = slots.entry(i, r.round % slots.layout.entries);
        Ok(FusedInput {
            n: r.n,
            binding,
            offset,
            stride: slots.layout.stride,
            members: self.members.len(),
            after: t.flags_id(i),
            wait: t.inline_wait(&self.members[i], i, r.round),
        })
    }

    /// Marks the communicator unusable after `e`, and releases every member's pending phase B
    /// from the host so no queue stays blocked on a `go` that will never come (those tensors'
    /// contents are then unspecified; later calls return [`Error::Poisoned`]).
    fn poison(&mut self, e: &Error) {
        log::error!("all-reduce communicator poisoned: {e}");
        self.poisoned = Some(e.to_string());
        match &mut self.transport {
            Transport::TwoPhase(t) => {
                t.stop();
                t.release_all(self.round);
            }
            Transport::Poll(t) => t.abort(),
            Transport::Generic => {}
        }
    }

    /// Grows the slots to `words` per half; first waits for every member so no slot is in use.
    /// The inner error says why new slots could not be made (the caller falls back).
    fn ensure_capacity(&mut self, words: u64, max_cap: u64) -> Result<Result<(), Error>> {
        let cap = self.slot_capacity();
        if words <= cap {
            return Ok(Ok(()));
        }
        let new_cap = words.max(cap * 2).next_multiple_of(1024).min(max_cap);
        self.quiesce()?;
        let made = match &mut self.transport {
            Transport::TwoPhase(t) => {
                t.forget(&self.members);
                HostSlots::new(&self.members, new_cap, 2, &self.hooks).map(|s| t.slots = Some(s))
            }
            Transport::Poll(t) => {
                t.forget(&self.members);
                let entries = DevicePoll::entries(&self.members, new_cap);
                HostSlots::new(&self.members, new_cap, entries, &self.hooks).map(|s| t.slots = Some(s))
            }
            Transport::Generic => return Ok(Ok(())),
        };
        if made.is_ok() {
            log::debug!("all-reduce slots grown to {new_cap} words per member and entry");
        }
        Ok(made)
    }

    /// Submits every member's pending work and waits for all of it, and for the bridge to have
    /// released every round.
    fn quiesce(&mut self) -> Result<()> {
        if let Some(b) = self.two_phase().and_then(TwoPhase::bridge) {
            // A margin past the bridge's own bound, so its error (naming the member) comes first.
            b.wait_released(self.round, self.opts.timeout + Duration::from_secs(1))?;
        }
        for m in &self.members {
            m.synchronize()?;
        }
        if let Transport::Poll(t) = &self.transport {
            if let Some(e) = t.error() {
                return Err(e);
            }
        }
        Ok(())
    }
}

impl Drop for Comm {
    fn drop(&mut self) {
        // Submit every member's pending phase B, let the bridge release what it can, then make
        // sure no GPU stays blocked on a `go` that will never come (a poisoned Comm): signal
        // the last round from the host so the queues drain, and wait for the members.
        for m in &self.members {
            let _ = m.flush();
        }
        match &mut self.transport {
            Transport::TwoPhase(t) => {
                if let Some(b) = t.bridge() {
                    if self.poisoned.is_none() {
                        let _ = b.wait_released(self.round, self.opts.timeout);
                    }
                }
                t.stop();
                t.release_all(self.round);
            }
            // A poisoned communicator's waits end at once; a healthy one's complete as the
            // relay releases them while the members synchronise below.
            Transport::Poll(t) if self.poisoned.is_some() => t.abort(),
            _ => {}
        }
        for m in &self.members {
            if let Err(e) = m.synchronize() {
                log::warn!("dropping the communicator: {e}");
            }
        }
        match &mut self.transport {
            Transport::TwoPhase(t) => t.forget(&self.members),
            Transport::Poll(t) => {
                t.abort();
                for m in &self.members {
                    let _ = m.synchronize();
                }
                t.forget(&self.members);
                t.detach(&self.members);
            }
            Transport::Generic => {}
        }
    }
}
