//! Ranks on one host: the all-reduce's host slots in memory every rank maps (a file in
//! `/dev/shm`, mapped shared) and imports into each of its devices, so the ranks exchange
//! their members' partials the way one process's members do, and only the synchronization
//! goes through MPI (per call the communicator's header all-gather, then one barrier — an
//! all-gather of no data — per exchange, over MPI's shared-memory transport).
//!
//! Per exchange: every member of every rank writes its partial into its region of the shared
//! slots (phase A, as [`crate::comm`] records it), each rank waits for its members and meets
//! the others at an MPI barrier, then every member sums all regions in global member order
//! (phase B's `reduce_slots`): every member of every rank computes the same sum from the same
//! bits, so all hold the same bits, with `N - 1` roundings for `N` members. Exchanges
//! alternate between two slot entries; an entry is written again only after the next
//! barrier, which every rank reaches after its phase A that follows (on each queue) its phase B
//! reading the entry.

use std::borrow::Borrow;
use std::sync::Arc;

use vk_native::{Buffer, HostAllocation};

use crate::comm::phases::{forget_slots, record_phase_a, record_reduce};
use crate::comm::slots::{capacity_within, HostSlots, SlotLayout};
use crate::comm::CommOptions;
use crate::error::{Error, Result};
use crate::group::Member;
use crate::tensor::Tensor;

/// How a rank's MPI thread meets the others: an all-gather of `words` (a barrier when empty).
pub(super) type Meet<'a> = dyn FnMut(Vec<u32>, &str) -> Result<Vec<Vec<u32>>> + 'a;

/// What every rank agreed on at start-up about the shared slots.
#[derive(Debug, Clone, Copy)]
pub(super) struct SharedPlan {
    /// Rank 0's process id: the shared memory is its `/proc/<pid>/fd/<fd>`.
    pub(super) leader_pid: u32,
    /// The largest host-pointer alignment of every member of every rank.
    pub(super) align: u64,
    /// The smallest `maxStorageBufferRange` of every member of every rank.
    pub(super) max_binding: u64,
    /// Members of every rank.
    pub(super) total: usize,
    /// This rank's first member's global index.
    pub(super) first: usize,
    pub(super) rank: usize,
}

/// The shared slots of one communicator across the ranks of one host.
pub(super) struct SharedSlots {
    plan: SharedPlan,
    slots: Option<HostSlots>,
    /// Exchanges so far: the entry of the next one is `exchanges % 2`.
    exchanges: u64,
    /// Per member: device memory for the f16 wire's conversion (made when needed).
    scratch: Vec<Option<Buffer>>,
    /// A smaller bound on the words one exchange carries (tests: large calls in many exchanges).
    limit: Option<u64>,
}

impl SharedSlots {
    pub(super) fn new(plan: SharedPlan, members: usize) -> Self {
        Self { plan, slots: None, exchanges: 0, scratch: (0..members).map(|_| None).collect(), limit: None }
    }

    /// Carries at most `words` words per member in one exchange (rounded down to the slots'
    /// alignment, at least one aligned block).
    #[cfg(feature = "test-hooks")]
    pub(super) fn limit_exchange(&mut self, words: u64) {
        self.limit = Some(words);
    }

    /// The most words per member one exchange carries: every member's region of an entry must
    /// fit one binding.
    fn max_capacity(&self) -> u64 {
        let fits = capacity_within(self.plan.max_binding, self.plan.total, self.plan.align);
        let align_words = self.plan.align / 4;
        match self.limit {
            Some(l) => fits.min((l / align_words).max(1) * align_words),
            None => fits,
        }
    }

    /// Sums `tensors` (one per member of this rank, `n` elements each, checked by the caller)
    /// with every other rank's, in place. A collective call: every rank makes it with the same
    /// `n` and `f16_wire`.
    pub(super) fn all_reduce<T: Borrow<Tensor>>(
        &mut self,
        members: &[Member],
        tensors: &[T],
        opts: &CommOptions,
        n: usize,
        f16_wire: bool,
        sync: &mut Meet<'_>,
    ) -> Result<()> {
        let words = if f16_wire { n.div_ceil(2) } else { n } as u64;
        let max = self.max_capacity();
        if max == 0 {
            return Err(Error::Unsupported(format!(
                "shared slots: {} members' regions do not fit a binding of {} bytes",
                self.plan.total, self.plan.max_binding
            )));
        }
        self.ensure(members, words.min(max), sync)?;
        let cap_words = self.slots.as_ref().expect("made above").capacity;
        // Elements per exchange: the f16 wire packs two in a word.
        let per = if f16_wire { cap_words * 2 } else { cap_words } as usize;
        let mut c0 = 0;
        while c0 < n {
            let len = per.min(n - c0);
            self.exchange(members, tensors, opts, c0, len, f16_wire, sync)?;
            c0 += len;
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn exchange<T: Borrow<Tensor>>(
        &mut self,
        members: &[Member],
        tensors: &[T],
        opts: &CommOptions,
        c0: usize,
        len: usize,
        f16_wire: bool,
        sync: &mut Meet<'_>,
    ) -> Result<()> {
        let slots = self.slots.as_ref().expect("made before an exchange");
        let e = self.exchanges % 2;
        self.exchanges += 1;
        let first = self.plan.first;
        for (i, (m, t)) in members.iter().zip(tensors).enumerate() {
            record_phase_a(
                m,
                first + i,
                t.borrow(),
                slots,
                e,
                &mut self.scratch[i],
                opts,
                c0,
                len,
                f16_wire,
            )?;
            m.shared.barrier_to_host()?;
        }
        for m in members {
            m.synchronize()?;
        }
        sync(Vec::new(), "the ranks' partials in shared memory")?;
        for (i, (m, t)) in members.iter().zip(tensors).enumerate() {
            m.shared.barrier_from_host()?;
            record_reduce(m, first + i, self.plan.total, t.borrow(), slots, e, c0, len, f16_wire, &[])?;
        }
        Ok(())
    }

    /// Slots of at least `words` words per member, made anew (a collective step) when the
    /// present ones are smaller: rank 0 creates the file, every rank maps and imports it, rank
    /// 0 removes its name once every rank has mapped it.
    fn ensure(&mut self, members: &[Member], words: u64, sync: &mut Meet<'_>) -> Result<()> {
        if self.slots.as_ref().is_some_and(|s| s.capacity >= words) {
            return Ok(());
        }
        // Grow geometrically (fewer collective re-allocations), within the binding limit.
        let old = self.slots.as_ref().map_or(0, |s| s.capacity);
        let capacity = words.max(old.saturating_mul(2)).min(self.max_capacity()).max(words);
        if self.slots.is_some() {
            forget_slots(members, &mut self.slots, &mut self.scratch);
            // The previous exchanges' phase B may still read the old slots (the recorded
            // commands keep them alive): the new file's mapping waits for them.
            for m in members {
                m.synchronize()?;
            }
        }
        let layout = SlotLayout::new(self.plan.total, capacity, 2, self.plan.align);
        let bytes = layout.total_bytes();
        let leader = self.plan.rank == 0;
        // Rank 0 makes the memory (a sealed memfd: nobody can truncate it under the mapping)
        // and the others open it by its /proc path while rank 0 holds it open (until the end of
        // this function, when every rank mapped it or gave up).
        let created: Option<std::result::Result<std::fs::File, String>> =
            leader.then(|| HostAllocation::sealed_file(bytes).map_err(|e| format!("creating them: {e}")));
        let fd = match &created {
            Some(Ok(f)) => std::os::fd::AsRawFd::as_raw_fd(f) as u32,
            _ => 0,
        };
        let verdicts = sync(
            vec![u32::from(created.as_ref().is_some_and(|c| c.is_ok())), fd],
            "the shared slots' creation",
        )?;
        if verdicts[0].first() != Some(&1) {
            let why = match created {
                Some(Err(why)) => why,
                _ => "rank 0 could not create them (its error says why)".into(),
            };
            return Err(Error::OutOfHostMemory(format!(" for the shared slots ({bytes} bytes): {why}")));
        }
        let path = format!("/proc/{}/fd/{}", self.plan.leader_pid, verdicts[0].get(1).copied().unwrap_or(0));
        let mapped = match &created {
            Some(Ok(f)) => Ok(f.try_clone().map_err(|e| format!("{path}: {e}"))),
            _ => Ok(std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(&path)
                .map_err(|e| format!("opening {path}: {e}"))),
        }
        .and_then(|f| f)
        .and_then(|f| {
            HostAllocation::shared(&f, bytes, self.plan.align).map_err(|e| format!("mapping {path}: {e}"))
        });
        let made = mapped
            .map_err(|e| Error::OutOfHostMemory(format!(" for the shared slots: {e}")))
            .and_then(|host| HostSlots::shared(members, self.plan.first, &Arc::new(host), layout, capacity));
        let verdicts = sync(vec![u32::from(made.is_ok())], "the shared slots' mapping")?;
        let slots = made?;
        if let Some(r) = verdicts.iter().position(|v| v != &[1]) {
            return Err(Error::OutOfHostMemory(format!(
                " for the shared slots: rank {r} could not map or import them (its error says why)"
            )));
        }
        self.slots = Some(slots);
        Ok(())
    }
}
