//! A communicator across MPI ranks (feature `mpi`): every member of every rank of
//! `MPI_COMM_WORLD` in one all-reduce, each process opening its own members as a
//! [`DeviceGroup`], the way NCCL and torchrun run one process per GPU and hosts side by side.
//!
//! Two paths between ranks ([`RankPath`]); both leave every member of every rank bitwise
//! identical, with `N - 1` roundings for `N` members, so the one-process error bound holds
//! (`(N-1)·u·Σ|x|`). Member order across ranks is rank, then the member's index in its group
//! ([`RankComm::global_members`]).
//!
//! - **Shared memory**, when every rank runs on one host (module `shared`): the host slots lie
//!   in memory the ranks map together, imported into every member of every rank, so the ranks'
//!   members exchange partials as one process's members do (phase A into the slots, phase B
//!   summing every member's slot in global order on every member); MPI only synchronizes.
//! - **Gather**, on any number of hosts — the hierarchical shape Horovod, Gloo and NCCL use:
//!   inside a rank the host-slot protocol sums the rank's members as [`Comm`] always does;
//!   between ranks, MPI gathers every rank's sum (read back from its first member) and each
//!   rank adds them **in rank order** in f32 on the host, then writes that total into each of
//!   its members. The cost over a one-process group: a read-back and a write of the tensor per
//!   rank, and an all-gather of `ranks × n` elements, where an MPI all-reduce would move about
//!   `2n`: for the sizes tensor parallelism all-reduces (tens of KiB) the latency dominates; for
//!   large tensors it pays for its exact, order-fixed sum with bandwidth. The wire between
//!   ranks is f32.
//!
//! MPI runs on a thread of the communicator's own (`crossgpu-mpi`), on a duplicate of
//! `MPI_COMM_WORLD` so its messages never meet the application's; the caller waits for it at
//! most the communicator's timeout (`CROSSGPU_TIMEOUT_MS`), so a rank that stops calling
//! `all_reduce` gives the others [`Error::Timeout`] instead of a hang, and poisons the
//! communicator. The thread runs each collective non-blocking and polls it, so after a timeout
//! it stops calling MPI at once (it parks with the collective's request still pending, which
//! MPI owns until the process ends): the application may then make its own MPI calls and
//! finalize — unless a rank died, when Open MPI's `MPI_Finalize` waits for it: end the
//! process without finalizing (or with `MPI_Abort`). MPI must be initialized by the application with `Threading::Serialized` or
//! `Multiple`; with `Serialized`, make no MPI calls from other threads while an `all_reduce`
//! runs.

use std::borrow::Borrow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use mpi::datatype::PartitionMut;
use mpi::request::{Request, Scope};
use mpi::traits::{Communicator, CommunicatorCollectives};

use crate::comm::collectives::all_reduce_beside_the_sum;
use crate::comm::slots::HostSlots;
use crate::comm::{AllReduceOptions, Comm, CommOptions, Mode, ModeRequest, Precision};
use crate::error::{Error, Result};
use crate::group::DeviceGroup;
use crate::tensor::Tensor;

mod shared;
use shared::{SharedPlan, SharedSlots};

mod collectives;

/// The least time [`RankComm::new`] waits for the other ranks.
const STARTUP_WAIT: Duration = Duration::from_secs(60);

/// The version of the ranks' exchange, compared at start-up: ranks of different crossgpu
/// builds must not pair their collectives.
const PROTOCOL: u32 = 2;

/// This process's rank among the ranks of its host, from the launcher's environment:
/// `LOCAL_RANK` (torchrun), `OMPI_COMM_WORLD_LOCAL_RANK` (Open MPI), `MPI_LOCALRANKID` (MPICH's
/// Hydra) or `SLURM_LOCALID`; `None` when none is set. A program that gives each rank one GPU
/// opens the adapter of this index (e.g. `CROSSGPU_DEVICES` set per rank).
pub fn local_rank() -> Option<usize> {
    ["LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"]
        .iter()
        .find_map(|v| std::env::var(v).ok()?.trim().parse().ok())
}

/// A member of the communicator across ranks, as every rank sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GlobalMember {
    /// The MPI rank (of `MPI_COMM_WORLD`) whose group holds the member.
    pub rank: usize,
    /// Its index in that rank's group.
    pub index: usize,
    /// Its label there (adapter and queue).
    pub label: String,
}

/// How the ranks exchange their members' partials.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RankPath {
    /// [`RankPath::SharedMemory`] when every rank runs on one host, else
    /// [`RankPath::Gather`].
    #[default]
    Auto,
    /// Every rank on one host: the slots in host memory the ranks share, imported into every
    /// member (module `shared`); only the synchronization goes through MPI.
    SharedMemory,
    /// Each rank sums its members, reads that sum back, and MPI all-gathers the ranks' sums;
    /// any number of hosts.
    Gather,
}

/// An all-reduce over every member of every rank (see the module docs). Drop it before MPI
/// is finalized (before the `mpi::environment::Universe`).
pub struct RankComm {
    /// The communicator over this rank's members: the sum inside the rank on the gather path;
    /// on the shared path its members, options and argument checks.
    local: Comm,
    members: Vec<GlobalMember>,
    mpi: MpiThread,
    /// The slots the ranks of one host share, on [`RankPath::SharedMemory`].
    shared: Option<SharedSlots>,
    timeout: Duration,
    calls: u64,
    poisoned: Option<String>,
}

impl RankComm {
    /// The communicator over `group` on this rank and the groups of every other rank of
    /// `MPI_COMM_WORLD` (a collective call: every rank makes it). Errors: MPI not initialized,
    /// or initialized without thread support; an empty group; another rank not answering
    /// within `opts.timeout` (at least a minute here, as ranks start at their own pace).
    pub fn new(group: &DeviceGroup, opts: CommOptions) -> Result<Self> {
        Self::with_path(group, opts, RankPath::Auto)
    }

    /// [`RankComm::new`] with the path between ranks chosen: [`RankPath::SharedMemory`] is an
    /// error ([`Error::Unsupported`], on every rank) unless every rank runs on one host.
    pub fn with_path(group: &DeviceGroup, opts: CommOptions, path: RankPath) -> Result<Self> {
        if !mpi::environment::is_initialized() || mpi::environment::is_finalized() {
            return Err(Error::InvalidArgument(
                "RankComm: initialize MPI first (mpi::initialize_with_threading) and keep it until the RankComm is dropped".into(),
            ));
        }
        let threading = mpi::environment::threading_support();
        if threading < mpi::Threading::Serialized {
            return Err(Error::Unsupported(format!(
                "RankComm: MPI was initialized with {threading:?}; its collectives run on a thread of \
                 their own, which needs Threading::Serialized or Multiple"
            )));
        }
        if group.is_empty() {
            return Err(Error::InvalidArgument("RankComm: this rank's group has no members".into()));
        }
        let timeout = opts.timeout;
        // Ranks start at their own pace (process launch, device creation): start-up waits at
        // least a minute.
        let startup = timeout.max(STARTUP_WAIT);
        let mut mpi = MpiThread::start(startup)?;
        let sharing = match (path, mpi.one_host) {
            (RankPath::SharedMemory, false) => return Err(Error::Unsupported(
                "RankComm: RankPath::SharedMemory needs every rank on one host; these ranks run on several"
                    .into(),
            )),
            (RankPath::Gather, _) | (RankPath::Auto, false) => false,
            (_, true) => true,
        };
        // On the shared path the rank's own communicator only checks calls: Generic starts no
        // bridge thread, slots or polling kernels.
        let local_opts = if sharing {
            CommOptions { mode: ModeRequest::Forced(Mode::Generic), ..opts.clone() }
        } else {
            opts.clone()
        };
        let local = Comm::with_options(group, local_opts)?;
        // Every rank must take the same path (and speak the same protocol): a rank that asked
        // for another would pair its collectives with the wrong ones.
        let mine = [PROTOCOL, u32::from(sharing)];
        let choices = mpi.gather(mine.to_vec(), startup, "the ranks' paths")?;
        if let Some(r) = choices.iter().position(|c| c[..] != mine[..]) {
            return Err(Error::InvalidArgument(format!(
                "RankComm: rank {r} takes {} (protocol {}), rank {} {} (protocol {PROTOCOL}): give every rank the same RankPath",
                if choices[r].get(1) == Some(&1) { "the shared-memory path" } else { "the gather path" },
                choices[r].first().copied().unwrap_or(0),
                mpi.rank,
                if sharing { "the shared-memory path" } else { "the gather path" },
            )));
        }
        // Every rank's members and labels: "label\n" per member, one UTF-8 byte per word.
        let labels: String =
            group.members().iter().map(|m| format!("{}\n", m.label().replace('\n', " "))).collect();
        let words: Vec<u32> = labels.bytes().map(u32::from).collect();
        let gathered = mpi.gather(words, startup, "the ranks' member lists")?;
        let mut members = Vec::new();
        for (rank, words) in gathered.iter().enumerate() {
            let bytes: Vec<u8> = words.iter().map(|&w| w as u8).collect();
            for (index, label) in String::from_utf8_lossy(&bytes).lines().enumerate() {
                members.push(GlobalMember { rank, index, label: label.to_string() });
            }
        }
        let first = members.iter().take_while(|m| m.rank < mpi.rank).count();
        let shared = match sharing {
            false => None,
            true => {
                // What every rank needs to agree on: rank 0's name for the file, the largest
                // alignment and the smallest binding of every member.
                let align = HostSlots::alignment(group.members());
                let binding = HostSlots::max_binding(group.members());
                let mine = [
                    std::process::id(),
                    align as u32,
                    (align >> 32) as u32,
                    binding as u32,
                    (binding >> 32) as u32,
                ];
                let all = mpi.gather(mine.to_vec(), timeout, "the ranks' shared-slot limits")?;
                let word = |r: &Vec<u32>, i: usize| u64::from(r[i]) | u64::from(r[i + 1]) << 32;
                let plan = SharedPlan {
                    leader_pid: all[0][0],
                    align: all.iter().map(|r| word(r, 1)).max().unwrap_or(4096),
                    max_binding: all.iter().map(|r| word(r, 3)).min().unwrap_or(0),
                    total: members.len(),
                    first,
                    rank: mpi.rank,
                };
                Some(SharedSlots::new(plan, group.len()))
            }
        };
        Ok(Self { local, members, mpi, shared, timeout, calls: 0, poisoned: None })
    }

    /// Test hook: on [`RankPath::SharedMemory`], carries at most `words` words per member in
    /// one exchange, so that large calls take many; a no-op on [`RankPath::Gather`].
    #[cfg(feature = "test-hooks")]
    pub fn limit_shared_exchange(&mut self, words: u64) {
        if let Some(s) = self.shared.as_mut() {
            s.limit_exchange(words);
        }
    }

    /// The path between ranks this communicator takes ([`RankPath::SharedMemory`] or
    /// [`RankPath::Gather`]).
    pub fn path(&self) -> RankPath {
        if self.shared.is_some() {
            RankPath::SharedMemory
        } else {
            RankPath::Gather
        }
    }

    /// This process's rank.
    pub fn rank(&self) -> usize {
        self.mpi.rank
    }

    /// The number of ranks.
    pub fn ranks(&self) -> usize {
        self.mpi.size
    }

    /// Every member of every rank, in the order the sum adds them: rank, then index.
    pub fn global_members(&self) -> &[GlobalMember] {
        &self.members
    }

    /// The global indices ([`RankComm::global_members`]) of this rank's members.
    pub fn own_members(&self) -> std::ops::Range<usize> {
        let first = self.members.iter().take_while(|m| m.rank < self.mpi.rank).count();
        let mine = self.members[first..].iter().take_while(|m| m.rank == self.mpi.rank).count();
        first..first + mine
    }

    /// The communicator over this rank's members.
    pub fn local(&self) -> &Comm {
        &self.local
    }

    /// One line per member of every rank, in sum order, e.g. `member 3 = rank 1: member 1:
    /// llvmpipe (…)` (the rank's own label of the member follows the colon).
    pub fn describe(&self) -> String {
        self.members
            .iter()
            .enumerate()
            .map(|(g, m)| format!("member {g} = rank {}: {}\n", m.rank, m.label))
            .collect()
    }

    /// Sums one f32 tensor per member of this rank (in member order) with every other rank's,
    /// in place: afterwards every member of every rank holds the same bits. Every rank calls it
    /// with tensors of one length and the same `opts.precision`; a rank that calls with another
    /// length or precision gets, with every other rank, [`Error::InvalidArgument`], and nothing
    /// is written. On [`RankPath::SharedMemory`] `opts` apply as in one process (every member's
    /// partial crosses the chosen wire); on [`RankPath::Gather`] they apply to the sum inside
    /// each rank, and the wire between ranks is f32. With another [`AllReduceOptions::op`] or
    /// dtype it reduces as [`crate::ReduceOp`] says, through the members' words gathered by MPI
    /// on either path (as [`RankComm::all_gather`] and the other collectives do).
    pub fn all_reduce<T: Borrow<Tensor>>(
        &mut self,
        tensors: &mut [T],
        opts: &AllReduceOptions,
    ) -> Result<()> {
        let dtype = tensors.first().map_or(crate::tensor::DType::F32, |t| t.borrow().dtype());
        if let Some(c) = all_reduce_beside_the_sum(opts, dtype, "RankComm::all_reduce")? {
            let t: Vec<&Tensor> = tensors.iter().map(Borrow::borrow).collect();
            return self.collective(c, &t, &t);
        }
        if let Some(p) = &self.poisoned {
            return Err(Error::Poisoned("the communicator across ranks".into(), p.clone()));
        }
        // This rank's arguments, checked before anything is exchanged; the verdict travels with
        // the call's header, so a bad call on one rank fails on every rank and leaves every
        // tensor as it was.
        let gathering = self.shared.is_none();
        let local = self.local.validate(tensors, opts).and_then(|n| {
            if gathering && (n as u64).saturating_mul(self.mpi.size as u64) > i32::MAX as u64 {
                return Err(Error::Unsupported(format!(
                    "RankComm::all_reduce of {n} elements over {} ranks: the gather holds at most 2^31 - 1 words; split the tensor",
                    self.mpi.size
                )));
            }
            Ok(n)
        });
        let n = local.as_ref().map_or(0, |&n| n);
        self.calls += 1;
        let precision = match opts.precision {
            Precision::Auto => 0,
            Precision::F32 => 1,
            Precision::F16 => 2,
        };
        // The wire as the one-process communicator picks it; ranks whose options pick another
        // disagree below.
        let f16_wire = self.local.f16_wire(opts, n);
        let n64 = n as u64;
        let call = [
            self.calls as u32,
            (self.calls >> 32) as u32,
            n64 as u32,
            (n64 >> 32) as u32,
            precision,
            u32::from(f16_wire),
        ];
        let header = [&call[..], &[u32::from(local.is_ok())]].concat();
        let headers = self.run(|mpi, t| mpi.gather(header, t, "the ranks' all-reduce calls"))?;
        local?;
        if let Some(r) = headers.iter().position(|h| h.get(6) != Some(&1)) {
            return Err(Error::InvalidArgument(format!(
                "RankComm::all_reduce: rank {r} refused the call (its arguments were invalid; its error says why)"
            )));
        }
        if let Some(r) = headers.iter().position(|h| h[..6] != call) {
            let e = Error::InvalidArgument(format!(
                "RankComm::all_reduce: rank {} made call {} with {n} elements, precision {precision} and f16 wire {f16_wire}, \
                 rank {r} call {} with {} elements, precision {} and f16 wire {}: every rank must make the same calls",
                self.mpi.rank,
                self.calls,
                u64::from(headers[r][0]) | u64::from(headers[r][1]) << 32,
                u64::from(headers[r][2]) | u64::from(headers[r][3]) << 32,
                headers[r][4],
                headers[r][5] == 1
            ));
            // The calls no longer pair up across ranks.
            self.poisoned = Some(e.to_string());
            return Err(e);
        }
        if n == 0 {
            return Ok(());
        }
        if let Some(shared) = self.shared.as_mut() {
            let (mpi, timeout) = (&mut self.mpi, self.timeout);
            let mut sync = |words: Vec<u32>, what: &str| mpi.gather(words, timeout, what);
            let mut run = || {
                let members = self.local.members();
                for &z in &opts.zero_contribution {
                    members[z].fill(tensors[z].borrow(), 0.0)?;
                }
                shared.all_reduce(members, tensors, self.local.options(), n, f16_wire, &mut sync)
            };
            let r = run();
            if let Err(e) = &r {
                // The ranks may have stopped at different steps of the exchange.
                self.poisoned = Some(e.to_string());
            }
            return r;
        }
        self.local.all_reduce(tensors, opts)?;
        let sum = tensors[0].borrow().read()?;
        let words: Vec<u32> = sum.iter().map(|v| v.to_bits()).collect();
        let all = self.run(|mpi, t| mpi.gather(words, t, "the ranks' sums"))?;
        if let Some(r) = all.iter().position(|s| s.len() != n) {
            let e = Error::InvalidArgument(format!(
                "RankComm::all_reduce: rank {r} sent {} elements, not {n}",
                all[r].len()
            ));
            self.poisoned = Some(e.to_string());
            return Err(e);
        }
        // The ranks' sums added in rank order, the same on every rank.
        let mut total: Vec<f32> = all[0].iter().map(|&w| f32::from_bits(w)).collect();
        for rank_sum in &all[1..] {
            for (t, &w) in total.iter_mut().zip(rank_sum) {
                *t += f32::from_bits(w);
            }
        }
        for (m, t) in self.local.members().iter().zip(tensors.iter()) {
            m.write(t.borrow(), &total)?;
        }
        Ok(())
    }

    /// Runs an MPI step, poisoning the communicator when it fails.
    fn run<T>(&mut self, step: impl FnOnce(&mut MpiThread, Duration) -> Result<T>) -> Result<T> {
        let r = step(&mut self.mpi, self.timeout);
        if let Err(e) = &r {
            self.poisoned = Some(e.to_string());
        }
        r
    }
}

/// A gather the MPI thread runs: every rank's words, in rank order.
struct Gather {
    words: Vec<u32>,
    reply: Sender<Vec<Vec<u32>>>,
}

/// The thread that makes every MPI call of a [`RankComm`], on its duplicate of
/// `MPI_COMM_WORLD` (communicators cannot move between threads).
///
/// It starts each collective non-blocking and polls it, so that it can stop making MPI calls
/// when the communicator is dropped while a collective waits for a rank that never joins: the
/// thread then parks for good, holding that request, and the application can finalize MPI
/// without another thread inside the library (a blocked `MPI_Allgather` there aborted Open MPI
/// in `MPI_Finalize`).
struct MpiThread {
    jobs: Option<Sender<Gather>>,
    thread: Option<JoinHandle<()>>,
    /// Set by `drop`: stop polling, end or park.
    stop: Arc<AtomicBool>,
    /// Answered once the thread makes no more MPI calls (it ended or parked).
    quiet: Receiver<()>,
    rank: usize,
    size: usize,
    /// Every rank runs on this rank's host.
    one_host: bool,
}

impl MpiThread {
    /// Starts the thread, which duplicates `MPI_COMM_WORLD` (a collective); waits for that at
    /// most `wait`. After a timeout the thread stays blocked in MPI: end the job.
    fn start(wait: Duration) -> Result<Self> {
        let (jobs, inbox) = channel::<Gather>();
        let (ready_tx, ready) = channel();
        let (quiet_tx, quiet) = channel();
        let stop = Arc::new(AtomicBool::new(false));
        let control = Control { stop: stop.clone(), quiet: quiet_tx };
        let thread = std::thread::Builder::new()
            .name("crossgpu-mpi".into())
            .spawn(move || {
                serve(inbox, ready_tx, &control);
                let _ = control.quiet.send(());
            })
            .map_err(|e| Error::OutOfHostMemory(format!(": cannot start the MPI thread: {e}")))?;
        let (rank, size, one_host) = ready.recv_timeout(wait).map_err(|e| match e {
            RecvTimeoutError::Timeout => Error::Timeout {
                what: "MPI start-up (duplicating MPI_COMM_WORLD): a rank did not create its RankComm; end the job"
                    .into(),
                ms: wait.as_millis() as u64,
            },
            RecvTimeoutError::Disconnected => {
                Error::Unsupported("RankComm: the MPI thread ended before it started".into())
            }
        })?;
        Ok(Self { jobs: Some(jobs), thread: Some(thread), stop, quiet, rank, size, one_host })
    }

    /// Every rank's `words`, in rank order; [`Error::Timeout`] when the gather does not finish
    /// within `timeout` (a rank that does not take part).
    fn gather(&mut self, words: Vec<u32>, timeout: Duration, what: &str) -> Result<Vec<Vec<u32>>> {
        let (reply, answer) = channel();
        let ended = || Error::Unsupported("RankComm: the MPI thread has ended".into());
        let jobs = self.jobs.as_ref().ok_or_else(ended)?;
        jobs.send(Gather { words, reply }).map_err(|_| ended())?;
        match answer.recv_timeout(timeout) {
            Ok(all) => Ok(all),
            Err(RecvTimeoutError::Timeout) => {
                // The communicator is poisoned from here on: the thread stops polling at once,
                // so the application may make MPI calls of its own again.
                self.silence();
                Err(Error::Timeout {
                    what: format!("MPI all-gather of {what} (a rank did not take part)"),
                    ms: timeout.as_millis() as u64,
                })
            }
            Err(RecvTimeoutError::Disconnected) => Err(Error::Unsupported(format!(
                "RankComm: the MPI thread ended during the all-gather of {what}"
            ))),
        }
    }

    /// Ends the thread's MPI calls and returns once it makes none: an idle thread ends when
    /// its job channel closes, one polling a collective that a gone rank never joins parks.
    fn silence(&mut self) {
        if self.jobs.is_none() {
            return;
        }
        self.stop.store(true, Ordering::Release);
        drop(self.jobs.take());
        // At most one poll of a pending collective away.
        let _ = self.quiet.recv_timeout(QUIET_WAIT);
    }
}

/// How long [`MpiThread::silence`] waits for the thread to leave MPI.
const QUIET_WAIT: Duration = Duration::from_secs(10);

impl Drop for MpiThread {
    fn drop(&mut self) {
        self.silence();
        // Only an ended thread is joined; a parked one stays until the process ends.
        if let Some(t) = self.thread.take() {
            if t.is_finished() {
                let _ = t.join();
            }
        }
    }
}

/// What the MPI thread is told and tells back outside its jobs.
struct Control {
    /// Set when the communicator is dropped.
    stop: Arc<AtomicBool>,
    /// Sent once the thread makes no more MPI calls.
    quiet: Sender<()>,
}

fn serve(inbox: Receiver<Gather>, ready: Sender<(usize, usize, bool)>, control: &Control) {
    let world = mpi::topology::SimpleCommunicator::world().duplicate();
    let (rank, size) = (world.rank() as usize, world.size() as usize);
    // The ranks that can share memory with this one (MPI_COMM_TYPE_SHARED): all of them, or not.
    let one_host = world.split_shared(0).size() == world.size();
    if ready.send((rank, size, one_host)).is_err() {
        return;
    }
    while let Ok(job) = inbox.recv() {
        let count = [job.words.len() as u64];
        let mut counts = vec![0u64; size];
        mpi::request::scope(|scope| {
            let request = world.immediate_all_gather_into(scope, &count[..], &mut counts[..]);
            finish(request, control);
        });
        let counts: Vec<i32> = counts.iter().map(|&c| c as i32).collect();
        let displs: Vec<i32> = counts
            .iter()
            .scan(0i32, |at, &c| {
                let d = *at;
                *at += c;
                Some(d)
            })
            .collect();
        let mut all = vec![0u32; counts.iter().map(|&c| c as usize).sum()];
        {
            let mut partition = PartitionMut::new(&mut all[..], &counts[..], &displs[..]);
            mpi::request::scope(|scope| {
                let request = world.immediate_all_gather_varcount_into(scope, &job.words[..], &mut partition);
                finish(request, control);
            });
        }
        let mut per_rank = Vec::with_capacity(size);
        let mut at = 0;
        for &c in &counts {
            per_rank.push(all[at..at + c as usize].to_vec());
            at += c as usize;
        }
        // The caller may have given up (timeout); then nobody reads the reply.
        let _ = job.reply.send(per_rank);
    }
    // Freeing the duplicate after MPI_Finalize would be an MPI error: an application that
    // finalized first leaves it to the process's end.
    if mpi::environment::is_finalized() {
        std::mem::forget(world);
    }
}

/// Polls `request` until it completes. When the communicator is dropped first (`stop`), the
/// collective waits for a rank that will not come: MPI still owns the request's buffers, so
/// the thread neither completes nor drops it (rsmpi aborts on a dropped request) but says it
/// is out of MPI and parks until the process ends.
fn finish<'a, D: ?Sized, S: Scope<'a>>(mut request: Request<'a, D, S>, control: &Control) {
    loop {
        match request.test() {
            Ok(_) => return,
            Err(pending) => request = pending,
        }
        if control.stop.load(Ordering::Acquire) {
            let _ = control.quiet.send(());
            park_forever(request);
        }
        // Ranks may outnumber cores (oversubscribed hosts): give the core away between polls,
        // as Open MPI's own blocking collectives do there.
        std::thread::yield_now();
    }
}

/// Keeps `request` (and the buffers MPI writes into) alive and untouched until the process
/// ends.
fn park_forever<T>(request: T) -> ! {
    let _pending = request;
    loop {
        std::thread::park();
    }
}
