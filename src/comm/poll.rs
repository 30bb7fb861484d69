//! The DevicePoll transport: the two phases of a round recorded into each member's stream like
//! any other work, with no semaphore and no submit of their own; many rounds ride in one
//! command buffer.
//!
//! ## A round k on member i
//! 1. Phase A writes the member's wire value into its region of slot entry `k mod E` in host
//!    memory (as HostBridge does).
//! 2. A barrier from every earlier compute and transfer command to host reads: the data are
//!    available to the host before anything after it runs, and so is the end of phase B(k-1),
//!    the last reader of entry `k-1 mod E` (an execution dependency on all earlier work).
//! 3. `poll_wait` (one invocation) stores k into i's arrival word in host memory, then polls
//!    i's `go` word in its mapped device-local memory, bounded ([`WaitPlan`]).
//! 4. Phase B (`reduce_slots`), after a barrier on the wait, sums every member's wire values in
//!    member order: bitwise the same as HostBridge for the same wire.
//!
//! On a GPU, rounds of the f32 wire up to [`FUSED_WAIT_MAX_WORDS`] elements do 3 and 4 in one
//! dispatch (`reduce_slots_f32_poll`: thread 0 of every workgroup stores the arrival and waits,
//! then the workgroup sums), which saves each member a dispatch and a barrier per round, on the
//! GPU and in the host's recording. The decoder's fused rounds do the same in their norm.
//!
//! The relay thread (`relay.rs`) stores k into every `go` once every member's arrival reached
//! k. Nothing is submitted: the rounds go out with the member's next submit, and submitting a
//! member that holds rounds submits its peers too (`PollHook`, a hook on their streams), since a
//! submitted wait needs the peers' phase A on their GPUs, not on the host.
//!
//! ## Why a ring of entries, and a submit every E rounds
//! On NVIDIA 580, once a dispatch has read lines of imported host memory, nothing later in the
//! same submission makes a dispatch see host (or peer) writes to those lines — no barrier, no
//! event; the next submission sees them (docs/BENCHMARKS.md#waking-a-running-kernel). So no
//! line of host memory may be read twice in one submission expecting new contents: round k
//! uses entry `k mod E`, and a member's stream is submitted once it holds E rounds since its
//! last submit, so every entry is read at most once per submission. A reader never reads its
//! own region (phase B takes its own term from its tensor), nor lines a peer is writing.
//!
//! ## Why no member overwrites an entry a peer still reads
//! Member i writes entry e again in round k+E ≥ k+2, after its own wait for round k+1, which
//! the relay releases only once every peer j stored arrival k+1. That store runs after j's
//! barrier (2) of round k+1, whose first scope holds j's phase B(k), the last reader of entry
//! e in round k. So every read of round k completes before any write of round k+E.
//!
//! ## Never a hang
//! A wait polls a bounded number of times, calibrated at start to 90% of the communicator's
//! timeout (so the device's error comes before a host wait on the same stream gives up).
//! Where it runs out it sets `expired`; the relay sees it within a millisecond, aborts every
//! other wait, and the communicator is poisoned; a member's next successful synchronisation
//! also reports it. llvmpipe ends every loop of an invocation after 65,535 trips, so there a
//! wait is a chain of dispatches, each resuming the last ([`WaitPlan`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use vk_native::{BindRange, Buffer, DeviceType, GpuBuffer, HostAllocation, ImportedBuffer, MappedWords};

use super::faults::FaultHooks;
use super::options::{CommOptions, Mode, SPIN_GPUS, SPIN_WITH_CPU_DEVICE};
use super::phases::{forget_slots, record_phase_a, record_reduce};
use super::relay::{flag, Relay, Words, ARRIVAL_STRIDE};
use super::slots::{HostSlots, SlotLayout};
use super::transport::{DeviceRounds, FusedWait, RoundContext, Transport};
use crate::error::{Error, Result};
use crate::group::{GroupId, Member, MemberShared, StreamHook};
use crate::kernels::{
    AdvanceParams, Entry, PollWaitParams, ReduceSlotsPollParams, ADVANCE_ROUNDS, POLL_WAIT, POLL_WAIT_CPU,
    REDUCE_SLOTS_F32_POLL,
};
use crate::tensor::Tensor;

/// Host memory the slot ring may take: entries are as many as fit, 2 to [`MAX_ENTRIES`].
const RING_BYTES: u64 = 16 << 20;
/// Most entries in the ring (rounds per submission).
const MAX_ENTRIES: u64 = 256;
/// Loop trips per dispatch on llvmpipe (which ends loops after 65,535).
const LLVMPIPE_TRIPS: u32 = 60_000;
/// Most dispatches in one wait's chain on a driver that cuts loops short.
const MAX_CHAIN: u32 = 8;
/// How many times the bound a CPU device's wait polls for at full speed (see `calibrate`).
const CPU_MARGIN: f64 = 4.0;
/// Largest round (f32 elements) whose wait the phase-B kernel does itself: up to 64 workgroups
/// poll the `go` word; above, the round's bytes dominate and the separate one-invocation wait
/// costs little.
const FUSED_WAIT_MAX_WORDS: usize = 64 * 256 * 4;

/// How one member's wait is recorded: `dispatches` of `poll_wait`, each polling up to `trips`
/// loop trips; together they last about `bound`.
#[derive(Debug, Clone, Copy)]
pub(super) struct WaitPlan {
    trips: u32,
    dispatches: u32,
    bound: Duration,
}

/// The transport's hook on its members' streams ([`StreamHook`]): a submit of a member that
/// holds this transport's rounds submits every peer that holds some too (a submitted wait
/// needs its peers' phase A on their GPUs, not on the host), and a successful wait reports a
/// wait of this transport's that ran out, once (the communicator is poisoned from then on; the
/// member's other work is unaffected). Each communicator has its own, so a second one on the
/// same group neither clears nor overwrites this one's.
struct PollHook {
    members: Vec<Weak<MemberShared>>,
    /// Per member: its open command buffer holds rounds of this transport (set after each
    /// round is recorded, cleared when the member submits).
    unsubmitted: Vec<AtomicBool>,
    words: Arc<Words>,
    reported: Vec<AtomicBool>,
}

impl PollHook {
    /// Notes that member `i` recorded a round of this transport.
    fn recorded(&self, i: usize) {
        self.unsubmitted[i].store(true, Ordering::Release);
    }
}

impl StreamHook for PollHook {
    fn submitted(&self, index: usize) -> Result<()> {
        if !self.unsubmitted.get(index).is_some_and(|u| u.swap(false, Ordering::AcqRel)) {
            return Ok(());
        }
        for (j, peer) in self.members.iter().enumerate() {
            if j != index && self.unsubmitted[j].swap(false, Ordering::AcqRel) {
                if let Some(peer) = peer.upgrade() {
                    peer.flush()?;
                }
            }
        }
        Ok(())
    }

    fn waited(&self, index: usize) -> Result<()> {
        match self.words.expired(index) {
            Some(e) if !self.reported[index].swap(true, Ordering::AcqRel) => Err(e),
            _ => Ok(()),
        }
    }
}

/// Why DevicePoll cannot run on `members`, or `None` if it can.
pub(crate) fn blocker(members: &[Member]) -> Option<String> {
    if members.len() < 2 {
        return Some("DevicePoll needs at least two members".into());
    }
    for (i, m) in members.iter().enumerate() {
        if !m.device().has_host_import() {
            return Some(format!("{} lacks VK_EXT_external_memory_host", m.label()));
        }
        if !MappedWords::supported(m.device()) {
            return Some(format!(
                "{} has no memory that is device-local, host-visible and host-coherent for the go words",
                m.label()
            ));
        }
        for p in &members[..i] {
            let same_gpu = p.adapter().index == m.adapter().index;
            if p.device().id() == m.device().id() {
                return Some(format!(
                    "{} and {} share a VkDevice: a polling kernel could wait for work queued behind it",
                    p.label(),
                    m.label()
                ));
            }
            if same_gpu && m.adapter().device_type != DeviceType::Cpu {
                return Some(format!(
                    "{} and {} are VkDevices of one GPU, which runs them time-sliced: a polling kernel \
                     could hold the GPU from the work it waits for",
                    p.label(),
                    m.label()
                ));
            }
        }
    }
    // llvmpipe runs the kernels of all its VkDevices on one pool of threads; a polling kernel
    // holds a thread, so with more polling members than threads the phase A they wait for
    // could only run once a wait's dispatch ends.
    let threads = llvmpipe_threads();
    for m in members.iter().filter(|m| cuts_loops(m)) {
        let on_it = members.iter().filter(|p| p.adapter().index == m.adapter().index).count();
        if on_it > threads {
            return Some(format!(
                "{on_it} members on {} (llvmpipe), which runs kernels on {threads} threads \
                 (LP_NUM_THREADS, else the CPU count): a polling kernel holds a thread, so at most \
                 {threads} members may poll there",
                m.adapter().name
            ));
        }
    }
    None
}

/// Threads llvmpipe runs compute kernels on: `LP_NUM_THREADS` (Mesa's variable), else the
/// number of CPUs (0 on one CPU: kernels then run on the submitting thread).
fn llvmpipe_threads() -> usize {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let default = if cpus > 1 { cpus } else { 0 };
    std::env::var("LP_NUM_THREADS").ok().and_then(|v| v.trim().parse().ok()).unwrap_or(default).min(32)
}

/// Whether loops of `m`'s driver end early (llvmpipe's 65,535 trips per invocation).
fn cuts_loops(m: &Member) -> bool {
    m.adapter().device_type == DeviceType::Cpu && m.adapter().is_mesa()
}

/// The wait kernel for `m`: one invocation, or on llvmpipe 256 that poll one after another.
fn wait_kernel(m: &Member) -> Entry<PollWaitParams> {
    if cuts_loops(m) {
        POLL_WAIT_CPU
    } else {
        POLL_WAIT
    }
}

/// The state of a DevicePoll transport.
pub(super) struct DevicePoll {
    pub(super) slots: Option<HostSlots>,
    scratch: Vec<Option<Buffer>>,
    arrival_imports: Vec<ImportedBuffer>,
    words: Arc<Words>,
    plans: Vec<WaitPlan>,
    relay: Relay,
    /// Per member: its submit count when it last recorded a round, and rounds recorded since.
    open: Vec<(u64, u64)>,
    hook: Arc<PollHook>,
    /// `hook` as the members hold it.
    stream_hook: Arc<dyn StreamHook>,
    /// Test hook: this member's rounds store no arrival.
    withheld: Option<usize>,
    /// What every member's `round_base` word holds: recorded rounds carry `round - round_base`
    /// and the kernels add the word back, so a recording replayed after the device advanced
    /// the word runs as new rounds.
    round_base: u64,
    /// Rounds ran from replayed recordings since the last round recorded here.
    replayed: bool,
    /// Rounds were recorded here since the last recording of rounds was sealed
    /// ([`DevicePoll::record_advance`]).
    recorded: bool,
    /// The last sealed recording's first round, less one, less the base it was recorded at:
    /// a submission of it runs rounds `base + offset + 1 ..= base + offset + by`.
    replay_offset: u64,
}

impl DevicePoll {
    pub(super) fn start(
        members: &[Member],
        opts: &CommOptions,
        group: GroupId,
        hooks: &FaultHooks,
        capacity: u64,
    ) -> Result<Self> {
        let nm = members.len();
        let align = HostSlots::alignment(members);
        let arrivals = Arc::new(
            HostAllocation::new(nm as u64 * ARRIVAL_STRIDE, align)
                .map_err(|e| Error::OutOfHostMemory(format!(" for the arrival words: {e}")))?,
        );
        let arrival_imports = members
            .iter()
            .map(|m| {
                ImportedBuffer::new(m.device(), &arrivals)
                    .map_err(|e| Error::native(&format!("arrival words import into {}", m.label()), e))
            })
            .collect::<Result<Vec<_>>>()?;
        let flags = members
            .iter()
            .map(|m| MappedWords::new(m.device(), flag::WORDS).map_err(|e| m.shared.err(e)))
            .collect::<Result<Vec<_>>>()?;
        let bound = opts.timeout.mul_f64(0.9);
        let plans = members
            .iter()
            .enumerate()
            .map(|(i, m)| calibrate(m, &flags[i], &arrival_imports[i], i, bound))
            .collect::<Result<Vec<_>>>()?;
        for (m, p) in members.iter().zip(&plans) {
            log::debug!(
                "{}: a DevicePoll wait is {} dispatch(es) of {} trips, about {:?}",
                m.label(),
                p.dispatches,
                p.trips,
                p.bound
            );
        }
        let words = Arc::new(Words {
            arrivals,
            flags,
            labels: members.iter().map(|m| m.label().to_string()).collect(),
            bound: plans.iter().map(|p| p.bound).min().unwrap_or(bound),
            expiry_seen: AtomicBool::new(false),
        });
        let spin = opts.spin.unwrap_or_else(|| {
            if members.iter().any(|m| m.adapter().device_type == DeviceType::Cpu) {
                SPIN_WITH_CPU_DEVICE
            } else {
                SPIN_GPUS
            }
        });
        let relay = Relay::start(format!("crossgpu-relay-{}", group.0), words.clone(), spin)
            .map_err(|e| Error::OutOfHostMemory(format!(": cannot start the relay thread: {e}")))?;
        let slots = HostSlots::new(members, capacity, Self::entries(members, capacity), hooks)?;
        let hook = Arc::new(PollHook {
            members: members.iter().map(|m| Arc::downgrade(&m.shared)).collect(),
            unsubmitted: (0..nm).map(|_| AtomicBool::new(false)).collect(),
            words: words.clone(),
            reported: (0..nm).map(|_| AtomicBool::new(false)).collect(),
        });
        let stream_hook: Arc<dyn StreamHook> = hook.clone();
        for m in members {
            m.shared.add_hook(&stream_hook);
        }
        Ok(Self {
            slots: Some(slots),
            scratch: vec![None; nm],
            arrival_imports,
            words,
            plans,
            relay,
            open: members.iter().map(|m| (m.stats().submits, 0)).collect(),
            hook,
            stream_hook,
            withheld: None,
            round_base: 0,
            replayed: false,
            recorded: false,
            replay_offset: 0,
        })
    }

    /// Ring entries for slots of `capacity` words.
    pub(super) fn entries(members: &[Member], capacity: u64) -> u64 {
        let entry = SlotLayout::new(members.len(), capacity, 1, HostSlots::alignment(members)).entry_bytes();
        (RING_BYTES / entry.max(1)).clamp(2, MAX_ENTRIES)
    }

    /// The shortest wait bound of any member.
    pub(super) fn bound(&self) -> Duration {
        self.words.bound
    }

    /// What to add to the communicator's reason where a member's wait gives up well before
    /// `timeout` says (llvmpipe: a wait is at most [`MAX_CHAIN`] dispatches of
    /// [`LLVMPIPE_TRIPS`] trips, since its loops end after 65,535 trips).
    pub(super) fn short_bound_note(&self, members: &[Member], timeout: Duration) -> Option<String> {
        let (i, plan) = self.plans.iter().enumerate().min_by_key(|(_, p)| p.bound)?;
        (plan.bound < timeout.mul_f64(0.5)).then(|| {
            format!(
                "; a DevicePoll wait on {} gives up after about {:.1} s whatever CROSSGPU_TIMEOUT_MS ({} ms) says: llvmpipe ends every loop of a kernel after 65,535 trips, and a wait is at most {MAX_CHAIN} dispatches",
                members[i].label(),
                plan.bound.as_secs_f64(),
                timeout.as_millis()
            )
        })
    }

    /// Why the transport failed, if a wait ran out (seen by the relay or a member's check).
    pub(super) fn error(&self) -> Option<Error> {
        self.relay.error().or_else(|| (0..self.plans.len()).find_map(|i| self.words.expired(i)))
    }

    /// Stops the relay and ends every wait at once (after a failure, or when dropped).
    fn abort(&mut self) {
        self.relay.stop();
        self.words.abort();
    }

    /// Removes this transport's hook from its members' streams (when dropped); other
    /// communicators' hooks stay.
    fn detach(&mut self, members: &[Member]) {
        for m in members {
            m.shared.remove_hook(&self.stream_hook);
        }
        for m in members {
            m.shared.forget_buffer(self.words.flags[m.index()].id());
        }
        for (m, b) in members.iter().zip(&self.arrival_imports) {
            m.shared.forget_buffer(b.id());
        }
    }

    /// What a recorded command carries for `round` (the kernels add the `round_base` word).
    /// Rounds are u64 on the host and wrap at 2^32 on the devices.
    fn recorded_round(&self, round: u64) -> u32 {
        round.wrapping_sub(self.round_base) as u32
    }

    /// Records member `i`'s arrival and wait for `round`.
    fn record_wait(&self, m: &Member, i: usize, round: u64) -> Result<()> {
        let flags = &self.words.flags[i];
        let arrival = BindRange {
            buffer: &self.arrival_imports[i],
            offset: i as u64 * ARRIVAL_STRIDE,
            size: ARRIVAL_STRIDE,
        };
        let plan = self.plans[i];
        for d in 0..plan.dispatches {
            let arrive = d == 0 && self.withheld != Some(i);
            m.shared.dispatch_ranges(
                wait_kernel(m),
                &[BindRange::whole(flags), arrival],
                &[],
                &PollWaitParams {
                    round: self.recorded_round(round),
                    trips: plan.trips,
                    arrive: u32::from(arrive),
                    last: u32::from(d + 1 == plan.dispatches),
                },
                [1, 1, 1],
            )?;
        }
        Ok(())
    }

    /// Records member `i`'s arrival, wait and phase B of `round` as one dispatch
    /// (`reduce_slots_f32_poll`): f32 wire, a GPU, at most [`FUSED_WAIT_MAX_WORDS`] elements.
    #[allow(clippy::too_many_arguments)]
    fn record_wait_and_reduce(
        &self,
        m: &Member,
        i: usize,
        nm: usize,
        t: &Tensor,
        e: u64,
        c0: usize,
        n: usize,
        round: u64,
    ) -> Result<()> {
        let slots = self.slots.as_ref().expect("slots exist while the transport runs");
        let (flags, arrival) = (&self.words.flags[i], &self.arrival_imports[i]);
        let (binding, at) = slots.entry(i, e);
        let arrive = u32::from(self.withheld != Some(i));
        let stride = slots.layout.stride as u32;
        m.shared.dispatch_ranges(
            REDUCE_SLOTS_F32_POLL,
            &[
                binding,
                BindRange::whole(&t.buffer),
                BindRange::whole(flags),
                BindRange { buffer: arrival, offset: i as u64 * ARRIVAL_STRIDE, size: ARRIVAL_STRIDE },
            ],
            &[],
            &ReduceSlotsPollParams {
                n: n as u32,
                members: nm as u32,
                stride,
                offset: at as u32,
                dst_offset: c0 as u32,
                self_index: i as u32,
                round: self.recorded_round(round),
                trips: self.plans[i].trips,
                arrive,
            },
            crate::kernels::elementwise_groups(n.div_ceil(4)),
        )
    }

    /// Submits every member once one holds a ring's worth of rounds since its last submit, so
    /// no entry is read twice in one submission.
    fn flush_if_ring_full(&mut self, members: &[Member]) -> Result<()> {
        // A recording for replay is one submission of its own, of at most a ring of rounds
        // (`Comm::replay_fits`): nothing is submitted while it is made.
        if members.iter().any(Member::capturing) {
            return Ok(());
        }
        let entries = self.slots.as_ref().map_or(2, |s| s.layout.entries);
        if self.open.iter().any(|&(_, k)| k >= entries) {
            for m in members {
                m.flush()?;
            }
            for (o, m) in self.open.iter_mut().zip(members) {
                *o = (m.stats().submits, 0);
            }
        }
        Ok(())
    }
}

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

    /// Records round `*round + 1` over elements `c0..c0 + n` of every tensor on every member;
    /// `*round` advances once every member recorded it.
    fn run_round(
        &mut self,
        cx: &RoundContext<'_>,
        round_counter: &mut u64,
        tensors: &[&Tensor],
        c0: usize,
        n: usize,
        f16_wire: bool,
    ) -> Result<()> {
        let (members, opts) = (cx.members, cx.opts);
        if let Some(e) = self.relay_error() {
            return Err(e);
        }
        let round = *round_counter + 1;
        let slots = self.slots.as_ref().expect("slots exist while the transport runs");
        let e = round % slots.layout.entries;
        let nm = members.len();
        for (i, (m, t)) in members.iter().zip(tensors.iter()).enumerate() {
            let sh = &m.shared;
            let t: &Tensor = t;
            restart_if_submitted(&mut self.open[i], m);
            record_phase_a(m, i, t, slots, e, &mut self.scratch[i], opts, c0, n, f16_wire)?;
            sh.barrier_to_host()?;
            if !cuts_loops(m) && !f16_wire && n <= FUSED_WAIT_MAX_WORDS {
                self.record_wait_and_reduce(m, i, nm, t, e, c0, n, round)?;
            } else {
                self.record_wait(m, i, round)?;
                record_reduce(m, i, nm, t, slots, e, c0, n, f16_wire, &[self.words.flags[i].id()])?;
            }
            self.hook.recorded(i);
            self.open[i].1 += 1;
        }
        *round_counter = round;
        self.recorded = true;
        self.relay.announce(round);
        // Every entry at most once per submission; large rounds go out at once, so the GPUs
        // start as soon as they are released.
        if f16_wire {
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

/// Restarts a member's count of rounds since its last submit (`open`: its submit count then,
/// and the rounds) if it submitted since.
fn restart_if_submitted(open: &mut (u64, u64), m: &Member) {
    let submits = m.stats().submits;
    if open.0 != submits {
        *open = (submits, 0);
    }
}

/// Measures how fast `m` runs `poll_wait`'s loop on a `go` that never comes, and plans a wait
/// of about `bound`.
fn calibrate(
    m: &Member,
    flags: &MappedWords,
    arrival: &ImportedBuffer,
    i: usize,
    bound: Duration,
) -> Result<WaitPlan> {
    let cut = cuts_loops(m);
    let max_trips = if cut { LLVMPIPE_TRIPS } else { u32::MAX };
    let range = BindRange { buffer: arrival, offset: i as u64 * ARRIVAL_STRIDE, size: ARRIVAL_STRIDE };
    let run = |trips: u32| -> Result<Duration> {
        let t0 = Instant::now();
        // Round 1 against `go` = 0: the loop runs every trip; no arrival, no expiry recorded.
        m.shared.dispatch_ranges(
            wait_kernel(m),
            &[BindRange::whole(flags), range],
            &[],
            &PollWaitParams { round: 1, trips, arrive: 0, last: 0 },
            [1, 1, 1],
        )?;
        m.synchronize()?;
        Ok(t0.elapsed())
    };
    // The fixed cost of a submit (and the pipeline's creation, at first use) measured apart.
    // Every time is the best of three: a trip count from a slowed-down run (a busy CPU) would
    // make the wait end early once the device runs at full speed; from the fastest run it can
    // only last longer.
    let best = |trips: u32| -> Result<Duration> {
        Ok((0..3).map(|_| run(trips)).collect::<Result<Vec<_>>>()?.into_iter().min().unwrap_or_default())
    };
    run(1)?;
    let base = best(1)?;
    let mut trips = 1024u32.min(max_trips);
    let trips_measured = loop {
        if run(trips)?.saturating_sub(base) >= Duration::from_millis(2) || trips == max_trips {
            break trips;
        }
        trips = trips.saturating_mul(8).min(max_trips);
    };
    let took = best(trips_measured)?.saturating_sub(base);
    let per_sec = f64::from(trips_measured) / took.as_secs_f64().max(1e-9);
    // A CPU device shares its cores with the host's threads and the other devices: its trips
    // run at any speed up to the calibrated one, so it polls for a multiple of the bound.
    let margin = if m.adapter().device_type == DeviceType::Cpu { CPU_MARGIN } else { 1.0 };
    let total = (per_sec * bound.as_secs_f64() * margin).max(1.0);
    let plan = if cut {
        let dispatches = (total / f64::from(max_trips)).ceil().clamp(1.0, f64::from(MAX_CHAIN)) as u32;
        let trips = (total / f64::from(dispatches)).ceil().min(f64::from(max_trips));
        let bound = Duration::from_secs_f64(f64::from(dispatches) * trips / per_sec / margin).min(bound);
        WaitPlan { trips: trips as u32, dispatches, bound }
    } else {
        let trips = total.min(f64::from(u32::MAX));
        WaitPlan {
            trips: trips as u32,
            dispatches: 1,
            bound: Duration::from_secs_f64(trips / per_sec).min(bound),
        }
    };
    Ok(plan)
}
