//! [`DevicePoll`]'s state and its rounds as recorded: the slot ring, the arrival words, the
//! relay, and each member's wait and reduction.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use vk_native::{BindRange, Buffer, DeviceType, GpuBuffer, HostAllocation, ImportedBuffer, MappedWords};

use super::hook::PollHook;
use super::wait::{calibrate, wait_kernel, WaitPlan, MAX_CHAIN};
use crate::comm::faults::FaultHooks;
use crate::comm::options::{CommOptions, SPIN_GPUS, SPIN_WITH_CPU_DEVICE};
use crate::comm::relay::{flag, Relay, Words, ARRIVAL_STRIDE};
use crate::comm::slots::{HostSlots, SlotLayout};
use crate::error::{Error, Result};
use crate::group::{GroupId, Member, StreamHook};
use crate::kernels::{PollWaitParams, ReduceSlotsPollParams, REDUCE_SLOTS_F32_POLL};
use crate::tensor::Tensor;

/// Host memory the slot ring may take: entries are as many as fit, 2 to [`MAX_ENTRIES`].
pub(super) const RING_BYTES: u64 = 16 << 20;
/// Most entries in the ring (rounds per submission).
pub(super) const MAX_ENTRIES: u64 = 256;
/// poll the `go` word; above, the round's bytes dominate and the separate one-invocation wait
/// costs little.
pub(super) const FUSED_WAIT_MAX_WORDS: usize = 64 * 256 * 4;

/// The state of a DevicePoll transport.
pub(in crate::comm) struct DevicePoll {
    pub(super) slots: Option<HostSlots>,
    pub(super) scratch: Vec<Option<Buffer>>,
    pub(super) arrival_imports: Vec<ImportedBuffer>,
    pub(super) words: Arc<Words>,
    pub(super) plans: Vec<WaitPlan>,
    pub(super) relay: Relay,
    /// Per member: its submit count when it last recorded a round, and rounds recorded since.
    pub(super) open: Vec<(u64, u64)>,
    pub(super) hook: Arc<PollHook>,
    /// `hook` as the members hold it.
    pub(super) stream_hook: Arc<dyn StreamHook>,
    /// Test hook: this member's rounds store no arrival.
    pub(super) withheld: Option<usize>,
    /// What every member's `round_base` word holds: recorded rounds carry `round - round_base`
    /// and the kernels add the word back, so a recording replayed after the device advanced
    /// the word runs as new rounds.
    pub(super) round_base: u64,
    /// Rounds ran from replayed recordings since the last round recorded here.
    pub(super) replayed: bool,
    /// Rounds were recorded here since the last recording of rounds was sealed
    /// ([`DevicePoll::record_advance`]).
    pub(super) recorded: bool,
    /// The last sealed recording's first round, less one, less the base it was recorded at:
    /// a submission of it runs rounds `base + offset + 1 ..= base + offset + by`.
    pub(super) replay_offset: u64,
}

impl DevicePoll {
    pub(in crate::comm) fn start(
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
    pub(in crate::comm) fn entries(members: &[Member], capacity: u64) -> u64 {
        let entry = SlotLayout::new(members.len(), capacity, 1, HostSlots::alignment(members)).entry_bytes();
        (RING_BYTES / entry.max(1)).clamp(2, MAX_ENTRIES)
    }

    /// The shortest wait bound of any member.
    pub(in crate::comm) fn bound(&self) -> Duration {
        self.words.bound
    }

    /// What to add to the communicator's reason where a member's wait gives up well before
    /// `timeout` says (llvmpipe: a wait is at most [`MAX_CHAIN`] dispatches of
    /// [`LLVMPIPE_TRIPS`] trips, since its loops end after 65,535 trips).
    pub(in crate::comm) fn short_bound_note(&self, members: &[Member], timeout: Duration) -> Option<String> {
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
    pub(in crate::comm) fn error(&self) -> Option<Error> {
        self.relay.error().or_else(|| (0..self.plans.len()).find_map(|i| self.words.expired(i)))
    }

    /// Stops the relay and ends every wait at once (after a failure, or when dropped).
    pub(super) fn abort(&mut self) {
        self.relay.stop();
        self.words.abort();
    }

    /// Removes this transport's hook from its members' streams (when dropped); other
    /// communicators' hooks stay.
    pub(super) fn detach(&mut self, members: &[Member]) {
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
    pub(super) fn recorded_round(&self, round: u64) -> u32 {
        round.wrapping_sub(self.round_base) as u32
    }

    /// Records member `i`'s arrival and wait for `round`.
    pub(super) fn record_wait(&self, m: &Member, i: usize, round: u64) -> Result<()> {
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
    pub(super) fn record_wait_and_reduce(
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
    pub(super) fn flush_if_ring_full(&mut self, members: &[Member]) -> Result<()> {
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

/// Restarts a member's count of rounds since its last submit (`open`: its submit count then,
/// and the rounds) if it submitted since.
pub(super) fn restart_if_submitted(open: &mut (u64, u64), m: &Member) {
    let submits = m.stats().submits;
    if open.0 != submits {
        *open = (submits, 0);
    }
}
