//! The all-reduce communicator: sums one f32 tensor per member, in place, so every member ends
//! with bitwise the same sum.
//!
//! Layering (after NCCL): [`Comm::all_reduce`] validates and plans (wire precision, slot size,
//! chunks), then the communicator's transport runs each round; one trait (`transport.rs`) is
//! the seam between the two, and `choice.rs` picks the transport:
//! - **HostBridge** (`two_phase.rs`): two phases through `slots::HostSlots` in imported host
//!   memory, members released by the `bridge::HostBridge` thread through host-signalled
//!   timeline semaphores.
//! - **SyncFd** (`two_phase.rs`): the same two phases, members released by SYNC_FD payloads
//!   exchanged between devices (`sync_fd::SyncFdExchange`), no host thread on the path.
//! - **DevicePoll** (`poll/`): the same two phases recorded into each member's stream with
//!   no semaphore and no submit of their own; a kernel polls a `go` word in mapped device
//!   memory that the `relay::Relay` thread stores once every member's arrival word says so.
//! - **Generic** (`generic.rs`): read back, sum on the CPU, write back; works on any devices.
//!
//! `phases.rs` holds the phase primitives the slot-based transports share, `fused.rs` the
//! rounds the tensor-parallel layers fuse into their kernels and replay, `options.rs` what a
//! caller chooses, `faults.rs` the reliability tests' fault hooks.
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
mod choice;
pub(crate) mod collectives;
pub(crate) mod exchange;
mod faults;
pub mod fused;
mod generic;
mod options;
pub(crate) mod phases;
mod poll;
mod relay;
pub(crate) mod slots;
mod sync_fd;
mod transport;
mod two_phase;

use std::borrow::Borrow;
use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::group::{DeviceGroup, GroupId, Member};
use crate::tensor::{DType, Tensor};

pub use bridge::BridgeStats;
pub use collectives::ReduceOp;
use faults::FaultHooks;
pub use options::{
    AllReduceOptions, CommOptions, Mode, ModeRequest, Precision, SPIN_GPUS, SPIN_WITH_CPU_DEVICE,
};

use generic::Generic;
#[cfg(feature = "bench")]
pub(crate) use poll::blocker as poll_blocker;
use poll::DevicePoll;
use slots::HostSlots;
use transport::{RoundContext, RoundWork, Transport};
use two_phase::TwoPhase;

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
    transport: Box<dyn Transport>,
    round: u64,
    poisoned: Option<String>,
    hooks: Arc<FaultHooks>,
    all_reduces: u64,
    log: RoundLog,
    /// For each member, the members whose phase submits go out as one batch with its own, in
    /// member order: those sharing its queue (VkDevice and queue index) with `joint_submit`,
    /// else the member alone. The batch's last member submits it.
    submit_batches: Vec<Vec<usize>>,
}

/// [`Comm::submit_batches`] of `members`.
fn submit_batches(members: &[Member], joint: bool) -> Vec<Vec<usize>> {
    let queue = |m: &Member| (m.device().id(), m.queue_index());
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
        let (mode, reason) = choice::choose(&members, opts.mode)?;
        let mut comm = Self {
            submit_batches: submit_batches(&members, opts.joint_submit),
            group: group.id(),
            members,
            reason,
            opts,
            transport: Box::new(Generic::default()),
            round: 0,
            poisoned: None,
            hooks,
            all_reduces: 0,
            log: RoundLog::default(),
        };
        let started: Option<Result<Box<dyn Transport>>> = match mode {
            Mode::DevicePoll => {
                Some(DevicePoll::start(&comm.members, &comm.opts, comm.group, &comm.hooks, 4096).map(|t| {
                    if let Some(note) = t.short_bound_note(&comm.members, comm.opts.timeout) {
                        comm.reason.push_str(&note);
                    }
                    Box::new(t) as Box<dyn Transport>
                }))
            }
            Mode::HostBridge | Mode::SyncFd => Some(
                TwoPhase::start(&comm.members, mode, &comm.opts, comm.group, &comm.hooks, 4096)
                    .map(|t| Box::new(t) as Box<dyn Transport>),
            ),
            Mode::Generic => None,
        };
        match started {
            Some(Ok(t)) => comm.transport = t,
            Some(Err(why)) => comm.fall_back(why),
            None => {}
        }
        log::info!("all-reduce over {} members: {} ({})", comm.members.len(), comm.mode(), comm.reason);
        Ok(comm)
    }

    /// Retires the transport after `why` (its slots could not be made) and continues in Generic
    /// mode, which loses no data: nothing of the failed call was recorded.
    fn fall_back(&mut self, why: Error) {
        log::warn!("all-reduce falls back to Generic: {why}");
        let mut old = std::mem::replace(&mut self.transport, Box::new(Generic::default()));
        old.retire(&self.members);
        self.reason = format!("fallback: {why}");
    }

    /// The mode in use.
    pub fn mode(&self) -> Mode {
        self.transport.mode()
    }

    /// In DevicePoll mode, how long a member's wait for its peers polls before it gives up
    /// (calibrated to 90% of the timeout; on llvmpipe, whose loops end after 65,535 trips,
    /// about a second whatever the timeout says, and [`Comm::reason`] says so).
    pub fn poll_bound(&self) -> Option<Duration> {
        self.transport.poll_bound()
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
        self.transport.slots().map_or(0, |s| s.capacity)
    }

    /// How the host bridge released its rounds so far; `None` unless the mode is HostBridge.
    pub fn bridge_stats(&self) -> Option<BridgeStats> {
        self.transport.bridge_stats()
    }

    /// Test hook (feature `test-hooks`): the bridge never releases `member` again (simulates a lost signal); in
    /// DevicePoll mode `member` never stores its arrival again (a member that never arrives).
    #[cfg(feature = "test-hooks")]
    pub fn withhold_release(&mut self, member: usize) {
        self.transport.withhold(member);
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

    /// `Err(Poisoned)` once a failure after submit left the members out of step.
    fn check_healthy(&self) -> Result<()> {
        match &self.poisoned {
            Some(p) => Err(Error::Poisoned("the communicator".into(), p.clone())),
            None => Ok(()),
        }
    }

    /// Checks an f32 sum's tensors and options (any other op is refused here: `RankComm`'s
    /// sum paths call this).
    pub(crate) fn validate<T: Borrow<Tensor>>(
        &self,
        tensors: &[T],
        opts: &AllReduceOptions,
    ) -> Result<usize> {
        self.check_healthy()?;
        if opts.op != ReduceOp::Sum {
            return Err(Error::InvalidArgument(format!("this all_reduce sums only; {} was asked", opts.op)));
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
                && t.member.index == m.index()
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
    /// member ends with bitwise the same sum. With another [`AllReduceOptions::op`] or dtype
    /// (f16, bf16, i32, u32) it reduces as [`ReduceOp`] says, the tensors' words on the wire
    /// (the rounds of [`Comm::all_gather`] and the others, which `Precision::F16` and
    /// `zero_contribution` do not apply to). The work is recorded into each member's stream in
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
        let dtype = tensors.first().map_or(DType::F32, |t| t.borrow().dtype());
        if let Some(c) = collectives::all_reduce_beside_the_sum(opts, dtype, "all_reduce")? {
            let t: Vec<&Tensor> = tensors.iter().map(Borrow::borrow).collect();
            return self.collective(c, &t, &t);
        }
        let n = self.validate(tensors, opts)?;
        if n == 0 {
            return Ok(());
        }
        if let Err(e) = self.transport.begin_call(&self.members) {
            self.poison(&e);
            return Err(e);
        }
        for &z in &opts.zero_contribution {
            self.members[z].fill(tensors[z].borrow(), 0.0)?;
        }
        let f16_wire = self.f16_wire(opts, n);
        let words = if f16_wire { n.div_ceil(2) } else { n } as u64;
        self.prepare_slots(words)?;
        // Rounds of at most one slot each (a slot holds two f16 values a word); Generic, which
        // has no slots, runs a call as one round.
        let cap = self.slot_capacity() as usize;
        let chunk = match cap {
            0 => n,
            _ if f16_wire => 2 * cap,
            _ => cap,
        };
        let parts: Vec<&Tensor> = tensors.iter().map(|t| t.borrow()).collect();
        let cx =
            RoundContext { members: &self.members, submit_batches: &self.submit_batches, opts: &self.opts };
        let result = (0..n).step_by(chunk).try_for_each(|c0| {
            let work = RoundWork::Sum { tensors: &parts, c0, n: chunk.min(n - c0), f16_wire };
            self.transport.run_round(&cx, &mut self.round, &work)
        });
        match result {
            Ok(()) => {
                self.all_reduces += 1;
                let replayable = self.mode() == Mode::DevicePoll && !f16_wire && n <= cap;
                self.log.note(replayable, n);
                Ok(())
            }
            Err(e) => {
                self.poison(&e);
                Err(e)
            }
        }
    }

    /// The log of the rounds since the last call, and a new log from here (for a step that
    /// learns whether its rounds can be replayed: [`crate::step::Step`]).
    pub(crate) fn take_round_log(&mut self) -> RoundLog {
        std::mem::take(&mut self.log)
    }

    /// Rounds recorded or replayed so far.
    pub(crate) fn rounds(&self) -> u64 {
        self.round
    }

    /// Grows the slots to `n` words now (growing waits for the members: never inside a
    /// recording), and settles replayed rounds, before a recording of rounds of `n` elements.
    pub(crate) fn prepare_recording(&mut self, n: usize) -> Result<()> {
        self.prepare_slots(n as u64)?;
        self.transport.begin_call(&self.members)
    }

    /// Poisons the communicator after `e` left its members out of step (a recording of rounds
    /// that will never run, a replay submitted on some members only).
    pub(crate) fn abandon(&mut self, e: &Error) {
        if self.poisoned.is_none() {
            self.poison(e);
        }
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

    /// Marks the communicator unusable after `e`, and releases every member's pending phase B
    /// from the host so no queue stays blocked on a `go` that will never come (those tensors'
    /// contents are then unspecified; later calls return [`Error::Poisoned`]).
    fn poison(&mut self, e: &Error) {
        log::error!("all-reduce communicator poisoned: {e}");
        self.poisoned = Some(e.to_string());
        self.transport.release_waiters(self.round);
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
        let made = self.transport.regrow(&self.members, new_cap, &self.hooks);
        if made.is_ok() {
            log::debug!("all-reduce slots grown to {new_cap} words per member and entry");
        }
        Ok(made)
    }

    /// Submits every member's pending work and waits for all of it, and for the transport to
    /// have released every round.
    fn quiesce(&mut self) -> Result<()> {
        self.transport.released(self.round, self.opts.timeout)?;
        for m in &self.members {
            m.synchronize()?;
        }
        match self.transport.failure() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

impl Drop for Comm {
    fn drop(&mut self) {
        // Submit every member's pending phase B, let the transport release what it can (or,
        // poisoned, release every waiter at once), wait for the members, then tear it down.
        for m in &self.members {
            let _ = m.flush();
        }
        self.transport.wind_down(self.round, self.poisoned.is_none(), self.opts.timeout);
        for m in &self.members {
            if let Err(e) = m.synchronize() {
                log::warn!("dropping the communicator: {e}");
            }
        }
        self.transport.retire(&self.members);
    }
}
