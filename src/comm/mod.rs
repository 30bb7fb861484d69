//! The all-reduce communicator: sums one f32 tensor per member, in place, so every member ends
//! with bitwise the same sum.
//!
//! Layering (after NCCL): [`Comm::all_reduce`] validates and plans (mode, wire precision, round,
//! slot half), then one of three transports runs it:
//! - **HostBridge**: two phases through `slots::HostSlots` in imported host memory, members
//!   released by the `bridge::HostBridge` thread through host-signalled timeline semaphores.
//! - **SyncFd**: the same two phases, members released by SYNC_FD payloads exchanged between
//!   devices (`sync_fd::SyncFdExchange`), no host thread on the path.
//! - **Generic**: read back, sum on the CPU, write back; works on any devices.
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

mod bridge;
mod slots;
mod sync_fd;

use std::borrow::Borrow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use vk_native::{BindRange, Buffer, BufferUsage, DeviceType, GpuBuffer, StagingBuffer, TimelineSemaphore};

use crate::config;
use crate::error::{Error, Result};
use crate::group::{DeviceGroup, GroupId, Member};
use crate::kernels::elementwise_groups;
use crate::tensor::{DType, Tensor};

use bridge::{BridgeConfig, HostBridge};
use slots::HostSlots;
use sync_fd::SyncFdExchange;

/// How the members synchronise: chosen by [`Comm::new`] ([`Comm::mode`], with the reason in
/// [`Comm::reason`]) or forced with `CROSSGPU_ALLREDUCE` ([`ModeRequest`]). Every mode sums the
/// wire values in member order in f32 and follows the wire rule of [`Precision`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Two phases through one page-aligned host allocation imported into every member
    /// (VK_EXT_external_memory_host): phase A writes each partial (f32, or converted to f16 on
    /// the f16 wire) into the member's slot and signals `done[i]`; a host thread
    /// (`crossgpu-bridge-N`) signals `go[i]` once every peer is done; phase B sums every
    /// member's wire values on the device, reading the peers' slots from host memory. Needs
    /// VK_EXT_external_memory_host and timeline semaphores on every member.
    HostBridge,
    /// The same two phases, members released by SYNC_FD payloads exchanged between devices
    /// instead of the host thread. Needs at least two members and, on every member, what
    /// HostBridge needs plus VK_KHR_external_semaphore_fd with SYNC_FD export and import.
    SyncFd,
    /// Read every partial back, sum on the CPU in member order in f32 on the same wire values
    /// (on the f16 wire each partial is first rounded to f16 exactly as the device does), and
    /// write the sum back to every member. Works on any devices; used with fewer than two
    /// members, where a member lacks what the other modes need, and as the fallback when host
    /// slots cannot be allocated or imported.
    Generic,
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::HostBridge => "HostBridge",
            Self::SyncFd => "SyncFd",
            Self::Generic => "Generic",
        })
    }
}

/// Which mode to use: `CROSSGPU_ALLREDUCE=auto|bridge|sync_fd|generic`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ModeRequest {
    /// Choose: [`Mode::SyncFd`] when every member is on a Mesa driver with SYNC_FD export and
    /// import, else [`Mode::HostBridge`] when every member has VK_EXT_external_memory_host and
    /// timeline semaphores, else [`Mode::Generic`] (always with fewer than two members).
    #[default]
    Auto,
    /// This mode. [`Comm::new`] fails with [`Error::Unsupported`] when a member lacks what the
    /// mode needs; a host-slot allocation or import failure still falls back to Generic.
    Forced(Mode),
}

impl ModeRequest {
    /// Parses the `CROSSGPU_ALLREDUCE` syntax.
    pub fn parse(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "" | "auto" => Ok(Self::Auto),
            "bridge" | "hostbridge" | "host_bridge" => Ok(Self::Forced(Mode::HostBridge)),
            "sync_fd" | "syncfd" => Ok(Self::Forced(Mode::SyncFd)),
            "generic" => Ok(Self::Forced(Mode::Generic)),
            _ => Err(Error::BadConfig {
                name: "CROSSGPU_ALLREDUCE",
                value: s.to_string(),
                why: "expected auto, bridge, sync_fd or generic".into(),
            }),
        }
    }
}

/// Precision of the values exchanged between members (the wire), in every [`Mode`].
///
/// On the f16 wire each partial is rounded to f16 (round to nearest: relative error ≤ 2^-11 in
/// f16's normal range, |x| ≥ 2^-14; smaller magnitudes keep less precision and below 2^-25
/// round to zero), values beyond ±65504 (infinities too) **saturate to ±65504**, NaN stays NaN;
/// the sum of the rounded partials is accumulated in f32, so it may exceed 65504. It moves half
/// the bytes of the f32 wire. Use [`Precision::F32`] for data that may exceed the f16 range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Precision {
    /// The f32 wire below a payload (4 bytes per element) of
    /// [`AllReduceOptions::f16_threshold_bytes`], else the communicator's threshold
    /// (`CROSSGPU_F16_WIRE_BYTES`, default 1 MiB = 262144 elements); the f16 wire from there.
    #[default]
    Auto,
    /// Always the f32 wire: partials travel unrounded and the sum is the f32 sum in member
    /// order, whatever the magnitude.
    F32,
    /// Always the f16 wire: see the type's docs for its rounding and ±65504 saturation.
    F16,
}

/// Options of one all-reduce.
#[derive(Debug, Clone, Default)]
pub struct AllReduceOptions {
    /// Wire precision. The default, [`Precision::Auto`], uses f32 below 1 MiB of payload and f16
    /// from there, where partials are rounded to f16 and values beyond ±65504 saturate to
    /// ±65504 (NaN stays NaN; the sum is accumulated in f32): set [`Precision::F32`] for data
    /// that may exceed the f16 range.
    pub precision: Precision,
    /// Payload bytes from which `Precision::Auto` uses the f16 wire; `None`: the Comm's
    /// (`CROSSGPU_F16_WIRE_BYTES`, default 1 MiB).
    pub f16_threshold_bytes: Option<u64>,
    /// Members whose part is empty: their tensor is zeroed first, so they contribute zeros
    /// (and receive the sum like everyone else).
    pub zero_contribution: Vec<usize>,
}

/// Options of a communicator, by default from the environment.
#[derive(Debug, Clone)]
pub struct CommOptions {
    /// Which mode to use (`CROSSGPU_ALLREDUCE`, default [`ModeRequest::Auto`]).
    pub mode: ModeRequest,
    /// How long the bridge spins on `done[]` before blocking (`CROSSGPU_ALLREDUCE_SPIN_US`);
    /// `None`: [`SPIN_GPUS`], or [`SPIN_WITH_CPU_DEVICE`] when a member is a CPU device.
    pub spin: Option<Duration>,
    /// Default f16-wire threshold (`CROSSGPU_F16_WIRE_BYTES`).
    pub f16_threshold_bytes: u64,
    /// Bound on every wait (`CROSSGPU_TIMEOUT_MS`).
    pub timeout: Duration,
    /// Wire bytes per member up to which phase A writes the host slot with a kernel (a copy or
    /// the f16 conversion storing straight into host memory) instead of the copy engine
    /// (`CROSSGPU_PHASE_A_KERNEL_BYTES`, default 64 KiB). Meant for small rounds, where launch
    /// latency matters more than bandwidth: on two H200s it took a 32 KiB round from 34 to
    /// 30 µs and the 27B decode from 48.2–49.2 to 50.2–50.3 tokens/s.
    pub phase_a_kernel_bytes: u64,
    /// Members that share one queue submit each phase as one batch
    /// (`vk_native::Recorder::submit_together`; `CROSSGPU_JOINT_SUBMIT`, default on): each
    /// batch costs the GPU ~12 µs on the H200, so they pay it once per phase instead of once
    /// each. Members on separate queues are unaffected.
    pub joint_submit: bool,
}

/// Default spin time of the host bridge when every member is a GPU. A round's `done` usually
/// comes within one decode layer's GPU time (~100–300 µs on the 27B preset), but the host
/// announces rounds up to a token ahead, so a 200 µs spin ran out on 99% of the decode's rounds
/// on the H200 and the bridge then paid a wake-up from the driver on each: 27.9 tokens/s with
/// 200 µs, 29.9 with 2 ms or 50 ms (`0/2`, docs/BENCHMARKS.md). The cost is a host core kept
/// busy while rounds are outstanding; between bursts the bridge sleeps.
pub const SPIN_GPUS: Duration = Duration::from_micros(2000);
/// Default spin time when a member is a CPU device (lavapipe): a spinning bridge takes a core
/// from the device's own threads.
pub const SPIN_WITH_CPU_DEVICE: Duration = Duration::from_micros(200);

impl CommOptions {
    /// Reads `CROSSGPU_ALLREDUCE`, `CROSSGPU_ALLREDUCE_SPIN_US`, `CROSSGPU_F16_WIRE_BYTES`,
    /// `CROSSGPU_TIMEOUT_MS`, `CROSSGPU_PHASE_A_KERNEL_BYTES` and `CROSSGPU_JOINT_SUBMIT`; a bad
    /// value is an error naming the variable.
    pub fn from_env() -> Result<Self> {
        let mode = match config::string_var("CROSSGPU_ALLREDUCE") {
            Some(s) => ModeRequest::parse(&s)?,
            None => ModeRequest::Auto,
        };
        Ok(Self {
            mode,
            spin: config::opt_u64_var("CROSSGPU_ALLREDUCE_SPIN_US", 0, 1_000_000)?.map(Duration::from_micros),
            f16_threshold_bytes: config::u64_var("CROSSGPU_F16_WIRE_BYTES", 1 << 20, 0, u64::MAX / 2)?,
            timeout: Duration::from_millis(config::timeout_ms_from_env()?),
            phase_a_kernel_bytes: config::u64_var("CROSSGPU_PHASE_A_KERNEL_BYTES", 65536, 0, u64::MAX)?,
            joint_submit: config::bool_var("CROSSGPU_JOINT_SUBMIT", true)?,
        })
    }
}

/// How the host bridge released its rounds so far, and what its driver calls cost (see
/// [`Comm::bridge_stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BridgeStats {
    /// Rounds whose last `done` arrived while the bridge was still spinning.
    pub released_spinning: u64,
    /// Rounds for which the spin time ran out and the bridge blocked in the driver.
    pub released_after_blocking: u64,
    /// `done` values read (`vkGetSemaphoreCounterValue` calls).
    pub polls: u64,
    /// Host time spent in those `done` reads.
    pub poll_time: Duration,
    /// `go` values signalled (`vkSignalSemaphore` calls).
    pub signals: u64,
    /// Host time spent in those `go` signals.
    pub signal_time: Duration,
}

impl BridgeStats {
    /// What happened between `earlier` and `self`.
    pub fn since(&self, earlier: &BridgeStats) -> BridgeStats {
        BridgeStats {
            released_spinning: self.released_spinning - earlier.released_spinning,
            released_after_blocking: self.released_after_blocking - earlier.released_after_blocking,
            polls: self.polls - earlier.polls,
            poll_time: self.poll_time.saturating_sub(earlier.poll_time),
            signals: self.signals - earlier.signals,
            signal_time: self.signal_time.saturating_sub(earlier.signal_time),
        }
    }

    /// Adds `other`'s counts and times to these.
    pub(crate) fn add(&mut self, other: &BridgeStats) {
        self.released_spinning += other.released_spinning;
        self.released_after_blocking += other.released_after_blocking;
        self.polls += other.polls;
        self.poll_time += other.poll_time;
        self.signals += other.signals;
        self.signal_time += other.signal_time;
    }

    /// Share of rounds released only after blocking, percent (0 with no rounds).
    pub fn blocked_pct(&self) -> f64 {
        let total = self.released_spinning + self.released_after_blocking;
        if total == 0 {
            0.0
        } else {
            100.0 * self.released_after_blocking as f64 / total as f64
        }
    }

    /// Mean host time of one `done` read and of one `go` signal, µs.
    pub fn mean_call_us(&self) -> (f64, f64) {
        let mean = |t: Duration, n: u64| if n == 0 { 0.0 } else { t.as_secs_f64() * 1e6 / n as f64 };
        (mean(self.poll_time, self.polls), mean(self.signal_time, self.signals))
    }
}

/// Test-only fault injection (used by the reliability tests; no effect unless armed).
#[doc(hidden)]
#[derive(Debug, Default)]
pub struct FaultHooks {
    alloc: AtomicBool,
    import: AtomicBool,
}

impl FaultHooks {
    fn take_alloc_failure(&self) -> bool {
        self.alloc.swap(false, Ordering::Relaxed)
    }
    fn take_import_failure(&self) -> bool {
        self.import.swap(false, Ordering::Relaxed)
    }
}

/// Per-member semaphores of the fast modes.
struct Fast {
    slots: Option<HostSlots>,
    /// Per member, device memory the f16-wire conversion writes before the copy engine moves it
    /// to the host slot (shader stores to host memory ran at half the copy engine's rate on the
    /// H200). Made at first use, replaced when the slots grow.
    scratch: Vec<Option<Buffer>>,
    done: Vec<TimelineSemaphore>,
    go: Vec<TimelineSemaphore>,
    bridge: Option<HostBridge>,
    exchange: Option<SyncFdExchange>,
}

impl Fast {
    /// Drops the slots and scratch buffers and every cached bind group over them.
    fn forget(&mut self, members: &[Member]) {
        if let Some(old) = self.slots.take() {
            for (m, b) in members.iter().zip(&old.imports) {
                m.shared.forget_buffer(b.id());
            }
        }
        for (m, b) in members.iter().zip(self.scratch.iter_mut()) {
            if let Some(b) = b.take() {
                m.shared.forget_buffer(b.id());
            }
        }
    }
}

/// An all-reduce communicator over a group's members.
pub struct Comm {
    group: GroupId,
    members: Vec<Member>,
    mode: Mode,
    reason: String,
    opts: CommOptions,
    fast: Option<Fast>,
    round: u64,
    poisoned: Option<String>,
    hooks: Arc<FaultHooks>,
    all_reduces: u64,
    /// Generic mode: per member, a read-back and an upload staging buffer, and the CPU sum.
    staging: Vec<(StagingBuffer, StagingBuffer)>,
    sum: Vec<f32>,
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
            .field("mode", &self.mode)
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

    /// Like [`Comm::with_options`], with fault hooks armed before creation (tests).
    #[doc(hidden)]
    pub fn with_faults(
        group: &DeviceGroup,
        opts: CommOptions,
        fail_alloc: bool,
        fail_import: bool,
    ) -> Result<Self> {
        let hooks = Arc::new(FaultHooks::default());
        hooks.alloc.store(fail_alloc, Ordering::Relaxed);
        hooks.import.store(fail_import, Ordering::Relaxed);
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
            mode,
            reason,
            opts,
            fast: None,
            round: 0,
            poisoned: None,
            hooks,
            all_reduces: 0,
            staging: Vec::new(),
            sum: Vec::new(),
        };
        if mode != Mode::Generic {
            if let Err(why) = comm.start_fast(4096) {
                comm.fall_back(why);
            }
        }
        log::info!("all-reduce over {} members: {} ({})", comm.members.len(), comm.mode, comm.reason);
        Ok(comm)
    }

    /// Semaphores, slots and the bridge thread or SYNC_FD exchange for the fast modes.
    fn start_fast(&mut self, capacity: u64) -> Result<(), String> {
        let sem =
            |m: &Member| TimelineSemaphore::new(m.device(), 0).map_err(|e| format!("{}: {e}", m.label()));
        let done = self.members.iter().map(sem).collect::<Result<Vec<_>, _>>()?;
        let go = self.members.iter().map(sem).collect::<Result<Vec<_>, _>>()?;
        let slots = HostSlots::new(&self.members, capacity, &self.hooks)?;
        let (bridge, exchange) = match self.mode {
            Mode::HostBridge => {
                let cfg = BridgeConfig {
                    done: done.clone(),
                    go: go.clone(),
                    labels: self.members.iter().map(|m| m.label().to_string()).collect(),
                    spin: self.opts.spin.unwrap_or_else(|| {
                        let cpu = self.members.iter().any(|m| m.adapter().device_type == DeviceType::Cpu);
                        if cpu {
                            SPIN_WITH_CPU_DEVICE
                        } else {
                            SPIN_GPUS
                        }
                    }),
                    timeout: self.opts.timeout,
                };
                let name = format!("crossgpu-bridge-{}", self.group.0);
                (
                    Some(
                        HostBridge::start(name, cfg)
                            .map_err(|e| format!("starting the bridge thread: {e}"))?,
                    ),
                    None,
                )
            }
            Mode::SyncFd => (None, Some(SyncFdExchange::new(&self.members).map_err(|e| e.to_string())?)),
            Mode::Generic => (None, None),
        };
        let scratch = vec![None; self.members.len()];
        self.fast = Some(Fast { slots: Some(slots), scratch, done, go, bridge, exchange });
        Ok(())
    }

    fn fall_back(&mut self, why: String) {
        log::warn!("all-reduce falls back to Generic: {why}");
        if let Some(mut f) = self.fast.take() {
            if let Some(b) = f.bridge.as_mut() {
                b.stop();
            }
            f.forget(&self.members);
        }
        self.mode = Mode::Generic;
        self.reason = format!("fallback: {why}");
    }

    /// The mode in use.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Why this mode was chosen.
    pub fn reason(&self) -> &str {
        &self.reason
    }

    /// Members in the communicator: [`Comm::all_reduce`] takes one tensor for each.
    pub fn len(&self) -> usize {
        self.members.len()
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
        self.fast.as_ref().and_then(|f| f.slots.as_ref()).map_or(0, |s| s.capacity)
    }

    /// How the host bridge released its rounds so far; `None` unless the mode is HostBridge.
    pub fn bridge_stats(&self) -> Option<BridgeStats> {
        let b = self.fast.as_ref()?.bridge.as_ref()?;
        Some(b.shared.lock().stats)
    }

    /// Test hook: the bridge never releases `member` again (simulates a lost signal).
    #[doc(hidden)]
    pub fn withhold_release(&self, member: usize) {
        if let Some(b) = self.fast.as_ref().and_then(|f| f.bridge.as_ref()) {
            b.shared.lock().withhold = Some(member);
        }
    }

    /// Test hook: the next slot growth fails to allocate (`alloc`) or to import (`import`).
    #[doc(hidden)]
    pub fn inject_growth_failure(&self, alloc: bool, import: bool) {
        self.hooks.alloc.store(alloc, Ordering::Relaxed);
        self.hooks.import.store(import, Ordering::Relaxed);
    }

    fn validate<T: Borrow<Tensor>>(&self, tensors: &[T], opts: &AllReduceOptions) -> Result<usize> {
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
        for (i, t) in tensors.iter().enumerate() {
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
        for &z in &opts.zero_contribution {
            self.members[z].fill(tensors[z].borrow(), 0.0)?;
        }
        let threshold = opts.f16_threshold_bytes.unwrap_or(self.opts.f16_threshold_bytes);
        let f16_wire = match opts.precision {
            Precision::F32 => false,
            Precision::F16 => true,
            Precision::Auto => n as u64 * 4 >= threshold,
        };
        let words = if f16_wire { n.div_ceil(2) } else { n } as u64;
        if self.mode != Mode::Generic {
            // Slots hold at most what one binding may cover; larger all-reduces run in chunks.
            let max_cap = HostSlots::max_capacity(&self.members);
            let grow = if max_cap == 0 {
                Ok(Err("the devices' maxStorageBufferRange leaves no room for host slots".to_string()))
            } else {
                self.ensure_capacity(words.min(max_cap), max_cap)
            };
            match grow {
                Ok(Ok(())) => {}
                // The new slots could not be made; nothing was recorded for this call, and the
                // old slots were drained first: fall back and lose no data.
                Ok(Err(why)) => self.fall_back(why),
                Err(e) => {
                    self.poison(&e);
                    return Err(e);
                }
            }
        }
        let result = match self.mode {
            Mode::Generic => self.generic(tensors, n, f16_wire),
            _ => {
                let cap = self.slot_capacity() as usize;
                let chunk = if f16_wire { 2 * cap } else { cap };
                (0..n)
                    .step_by(chunk)
                    .try_for_each(|c0| self.two_phase(tensors, c0, chunk.min(n - c0), f16_wire))
            }
        };
        match result {
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

    /// Marks the communicator unusable after `e`, and releases every member's pending phase B
    /// from the host so no queue stays blocked on a `go` that will never come (those tensors'
    /// contents are then unspecified; later calls return [`Error::Poisoned`]).
    fn poison(&mut self, e: &Error) {
        log::error!("all-reduce communicator poisoned: {e}");
        self.poisoned = Some(e.to_string());
        if let Some(f) = self.fast.as_mut() {
            if let Some(b) = f.bridge.as_mut() {
                b.stop();
            }
            for g in &f.go {
                if g.value().is_ok_and(|v| v < self.round) {
                    let _ = g.signal(self.round);
                }
            }
        }
    }

    /// Grows the slots to `words` per half; first waits for every member so no slot is in use.
    /// The inner error says why new slots could not be made (the caller falls back).
    fn ensure_capacity(&mut self, words: u64, max_cap: u64) -> Result<Result<(), String>> {
        let cap = self.slot_capacity();
        if words <= cap {
            return Ok(Ok(()));
        }
        let new_cap = words.max(cap * 2).next_multiple_of(1024).min(max_cap);
        self.quiesce()?;
        let fast = self.fast.as_mut().expect("fast mode has state");
        fast.forget(&self.members);
        match HostSlots::new(&self.members, new_cap, &self.hooks) {
            Ok(slots) => {
                log::debug!("all-reduce slots grown to {new_cap} words per half");
                self.fast.as_mut().expect("checked").slots = Some(slots);
                Ok(Ok(()))
            }
            Err(why) => Ok(Err(why)),
        }
    }

    /// Submits every member's pending work and waits for all of it, and for the bridge to have
    /// released every round.
    fn quiesce(&mut self) -> Result<()> {
        if let Some(b) = self.fast.as_ref().and_then(|f| f.bridge.as_ref()) {
            // A margin past the bridge's own bound, so its error (naming the member) comes first.
            b.wait_released(self.round, self.opts.timeout + Duration::from_secs(1))
                .map_err(|e| Error::Timeout { what: e, ms: self.opts.timeout.as_millis() as u64 })?;
        }
        for m in &self.members {
            m.synchronize()?;
        }
        Ok(())
    }

    fn generic<T: Borrow<Tensor>>(&mut self, tensors: &mut [T], n: usize, f16_wire: bool) -> Result<()> {
        // Read every partial back (all members' copies submitted first, then one wait each),
        // sum in member order in f32 — the additions the GPU does, on the same wire values
        // (rounded to f16 first on the f16 wire) — and write the sum back to every member.
        // Staging buffers are kept and grown, not made per call.
        let bytes = n as u64 * 4;
        if self.staging.iter().any(|s| s.0.size() < bytes) || self.staging.len() != self.members.len() {
            self.staging = self
                .members
                .iter()
                .map(|m| {
                    let cap = bytes.next_power_of_two().max(4096);
                    let err = |e| m.shared.err(e);
                    Ok((
                        StagingBuffer::new(m.device(), cap, false).map_err(err)?,
                        StagingBuffer::new(m.device(), cap, true).map_err(err)?,
                    ))
                })
                .collect::<Result<Vec<_>>>()?;
        }
        let mut marks = Vec::with_capacity(self.members.len());
        for ((m, t), (down, _)) in self.members.iter().zip(tensors.iter()).zip(&self.staging) {
            let (t, sh) = (t.borrow(), &m.shared);
            let mut s = sh.stream();
            s.access(&[t.id()], &[down.id()]).map_err(|e| sh.err(e))?;
            s.rec.copy(&t.buffer, 0, down, 0, bytes).map_err(|e| sh.err(e))?;
            s.barrier_to_host().map_err(|e| sh.err(e))?;
            marks.push(s.flush().map_err(|e| sh.err(e))?);
        }
        let mut raw = vec![0u8; bytes as usize];
        self.sum.resize(n, 0.0);
        for (j, ((m, (down, _)), mark)) in self.members.iter().zip(&self.staging).zip(marks).enumerate() {
            let sh = &m.shared;
            sh.wait_value(&mut sh.stream(), mark, "an all-reduce read-back")?;
            down.read(0, &mut raw).map_err(|e| sh.err(e))?;
            let part = raw.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]));
            let part = part.map(|v| if f16_wire { crate::tensor::f16_saturating(v).to_f32() } else { v });
            if j == 0 {
                self.sum.iter_mut().zip(part).for_each(|(s, v)| *s = v);
            } else {
                self.sum.iter_mut().zip(part).for_each(|(s, v)| *s += v);
            }
        }
        let sum_bytes: &[u8] = bytemuck::cast_slice(&self.sum);
        for ((m, t), (_, up)) in self.members.iter().zip(tensors.iter()).zip(self.staging.iter_mut()) {
            let (t, sh) = (t.borrow(), &m.shared);
            // The previous round's copy out of `up` completed: the read-back above waited for
            // everything this member had submitted.
            up.write(0, sum_bytes).map_err(|e| sh.err(e))?;
            let mut s = sh.stream();
            s.access(&[up.id()], &[t.id()]).map_err(|e| sh.err(e))?;
            s.rec.copy(up, 0, &t.buffer, 0, bytes).map_err(|e| sh.err(e))?;
        }
        Ok(())
    }

    /// One round over elements `c0..c0 + n` of every tensor.
    fn two_phase<T: Borrow<Tensor>>(
        &mut self,
        tensors: &mut [T],
        c0: usize,
        n: usize,
        f16_wire: bool,
    ) -> Result<()> {
        let round = self.round + 1;
        let half = round % 2;
        let fast = self.fast.as_mut().expect("fast mode has state");
        let slots = fast.slots.as_ref().expect("slots exist in fast mode");
        let words = if f16_wire { n.div_ceil(2) } else { n } as u64;
        let nm = self.members.len();

        // Phase A on every member: its partial into its own region of this round's half.
        for (i, (m, t)) in self.members.iter().zip(tensors.iter()).enumerate() {
            let t = t.borrow();
            let sh = &m.shared;
            let slot = &slots.imports[i];
            let by_kernel = words * 4 <= self.opts.phase_a_kernel_bytes;
            if by_kernel {
                // A kernel stores straight into this member's region of the half.
                let region =
                    BindRange { buffer: slot, offset: slots.region_bytes(i, half), size: slots.stride * 4 };
                let entry = if f16_wire { "f32_to_f16" } else { "copy_u32" };
                let g = sh.bind_ranges(entry, &[BindRange::whole(&t.buffer), region])?;
                let mut s = sh.stream();
                s.access(&[t.id()], &[slot.id()]).map_err(|e| sh.err(e))?;
                s.rec
                    .dispatch(&g, &[n as u32, c0 as u32, 0, 0], elementwise_groups(words as usize))
                    .map_err(|e| sh.err(e))?;
            } else if f16_wire {
                // Convert into device memory, then let the copy engine write the host slot.
                let need = slots.capacity * 4;
                if fast.scratch[i].as_ref().is_none_or(|b| b.size() < need) {
                    if let Some(old) = fast.scratch[i].take() {
                        sh.forget_buffer(old.id());
                    }
                    let usage = BufferUsage { copy_src: true, copy_dst: false };
                    let b =
                        Buffer::new(&sh.device, need, usage, "crossgpu f16 wire").map_err(|e| sh.err(e))?;
                    fast.scratch[i] = Some(b);
                }
                let scratch = fast.scratch[i].as_ref().expect("made above");
                let g = sh.bind("f32_to_f16", &[&t.buffer, scratch])?;
                let mut s = sh.stream();
                s.access(&[t.id()], &[scratch.id()]).map_err(|e| sh.err(e))?;
                s.rec
                    .dispatch(&g, &[n as u32, c0 as u32, 0, 0], elementwise_groups(words as usize))
                    .map_err(|e| sh.err(e))?;
                s.access(&[scratch.id()], &[slot.id()]).map_err(|e| sh.err(e))?;
                s.rec
                    .copy(scratch, 0, slot, slots.region_bytes(i, half), words * 4)
                    .map_err(|e| sh.err(e))?;
            } else {
                let mut s = sh.stream();
                s.access(&[t.id()], &[slot.id()]).map_err(|e| sh.err(e))?;
                s.rec
                    .copy(&t.buffer, c0 as u64 * 4, slot, slots.region_bytes(i, half), words * 4)
                    .map_err(|e| sh.err(e))?;
            }
            let mut s = sh.stream();
            s.barrier_to_host().map_err(|e| sh.err(e))?;
            let batch = &self.submit_batches[i];
            match fast.exchange.as_mut() {
                Some(x) => {
                    let sig = x.phase_a_signal(i, m, &s)?;
                    s.submit(&[(&fast.done[i], round)], &[&sig]).map_err(|e| sh.err(e))?;
                }
                // The batch's last member submits it, each member signalling its `done`.
                None if batch.last() == Some(&i) => {
                    drop(s);
                    let signals: Vec<[(&TimelineSemaphore, u64); 1]> =
                        batch.iter().map(|&j| [(&fast.done[j], round)]).collect();
                    submit_batch(&self.members, batch, &signals)?;
                }
                None => {}
            }
        }
        self.round = round;
        match (fast.bridge.as_ref(), fast.exchange.as_mut()) {
            (Some(b), _) => b.submitted(round),
            (None, Some(x)) => x.exchange(&self.members)?,
            (None, None) => unreachable!("a fast mode has a bridge or an exchange"),
        }

        // Phase B on every member, at the start of its next command buffer.
        for (i, (m, t)) in self.members.iter().zip(tensors.iter()).enumerate() {
            let t = t.borrow();
            let sh = &m.shared;
            let slot = &slots.imports[i];
            let entry = if f16_wire { "reduce_slots_f16" } else { "reduce_slots_f32" };
            // The kernel reads the peers' slots straight from host memory with 16-byte loads.
            // (Copying them into device memory with the copy engine first was measured too: it
            // was slower once the kernel read vec4s and skipped its own slot; docs/BENCHMARKS.md.)
            let g = sh.bind_ranges(entry, &[slots.half(i, half), BindRange::whole(&t.buffer)])?;
            let mut s = sh.stream();
            match fast.exchange.as_mut() {
                Some(x) => x.phase_b_waits(i, &mut s),
                None => s.wait_next_submit(&fast.go[i], round),
            }
            s.barrier_from_host().map_err(|e| sh.err(e))?;
            s.access(&[slot.id(), t.id()], &[t.id()]).map_err(|e| sh.err(e))?;
            let imm = [n as u32, nm as u32, slots.stride as u32, 0, c0 as u32, i as u32, 0, 0];
            // reduce_slots reads 4 words per thread and step (vec4 loads).
            let groups = elementwise_groups((words as usize).div_ceil(4));
            s.rec.dispatch(&g, &imm, groups).map_err(|e| sh.err(e))?;
            if f16_wire {
                // Large rounds go out at once, so the GPU starts as soon as it is released.
                let batch = &self.submit_batches[i];
                if fast.exchange.is_some() {
                    s.submit(&[], &[]).map_err(|e| sh.err(e))?;
                } else if batch.last() == Some(&i) {
                    drop(s);
                    submit_batch(&self.members, batch, &vec![[]; batch.len()])?;
                }
            }
        }
        if let Some(b) = fast.bridge.as_ref() {
            if let Some(e) = b.error() {
                return Err(Error::Timeout { what: e, ms: self.opts.timeout.as_millis() as u64 });
            }
        }
        Ok(())
    }
}

/// Submits the open command buffers of `batch` (members sharing one queue, or one member) as
/// one batch, member `batch[k]` signalling `signals[k]`.
fn submit_batch<const S: usize>(
    members: &[Member],
    batch: &[usize],
    signals: &[[(&TimelineSemaphore, u64); S]],
) -> Result<()> {
    let mut guards: Vec<_> = batch.iter().map(|&j| members[j].shared.stream()).collect();
    let mut streams: Vec<&mut crate::stream::Stream> = guards.iter_mut().map(|g| &mut **g).collect();
    let signals: Vec<&[(&TimelineSemaphore, u64)]> = signals.iter().map(|a| &a[..]).collect();
    crate::stream::Stream::submit_together(&mut streams, &signals, &vec![&[][..]; batch.len()])
        .map(|_| ())
        .map_err(|e| members[batch[0]].shared.err(e))
}

impl Drop for Comm {
    fn drop(&mut self) {
        // Submit every member's pending phase B, let the bridge release what it can, then make
        // sure no GPU stays blocked on a `go` that will never come (a poisoned Comm): signal
        // the last round from the host so the queues drain, and wait for the members.
        for m in &self.members {
            let _ = m.flush();
        }
        if let Some(f) = self.fast.as_mut() {
            if let Some(b) = f.bridge.as_ref() {
                if self.poisoned.is_none() {
                    let _ = b.wait_released(self.round, self.opts.timeout);
                }
            }
            if let Some(b) = f.bridge.as_mut() {
                b.stop();
            }
            for g in &f.go {
                if g.value().is_ok_and(|v| v < self.round) {
                    let _ = g.signal(self.round);
                }
            }
        }
        for m in &self.members {
            if let Err(e) = m.synchronize() {
                log::warn!("dropping the communicator: {e}");
            }
        }
        if let Some(mut f) = self.fast.take() {
            f.forget(&self.members);
        }
    }
}
