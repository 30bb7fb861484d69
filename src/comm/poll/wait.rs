//! A member's wait for its peers' arrivals: whether DevicePoll can run on a group at all
//! ([`blocker`]), which kernel polls, and how long it polls (calibrated per member).

use std::time::{Duration, Instant};

use vk_native::{BindRange, DeviceType, ImportedBuffer, MappedWords};

use crate::comm::relay::ARRIVAL_STRIDE;
use crate::error::Result;
use crate::group::Member;
use crate::kernels::{Entry, PollWaitParams, POLL_WAIT, POLL_WAIT_CPU};

/// Loop trips per dispatch on llvmpipe (which ends loops after 65,535).
pub(super) const LLVMPIPE_TRIPS: u32 = 60_000;
/// Most dispatches in one wait's chain on a driver that cuts loops short.
pub(super) const MAX_CHAIN: u32 = 8;
/// How many times the bound a CPU device's wait polls for at full speed (see `calibrate`).
pub(super) const CPU_MARGIN: f64 = 4.0;

/// How one member's wait is recorded: `dispatches` of `poll_wait`, each polling up to `trips`
/// loop trips; together they last about `bound`.
#[derive(Debug, Clone, Copy)]
pub(super) struct WaitPlan {
    pub(super) trips: u32,
    pub(super) dispatches: u32,
    pub(super) bound: Duration,
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
pub(super) fn llvmpipe_threads() -> usize {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let default = if cpus > 1 { cpus } else { 0 };
    std::env::var("LP_NUM_THREADS").ok().and_then(|v| v.trim().parse().ok()).unwrap_or(default).min(32)
}

/// Whether loops of `m`'s driver end early (llvmpipe's 65,535 trips per invocation).
pub(super) fn cuts_loops(m: &Member) -> bool {
    m.adapter().device_type == DeviceType::Cpu && m.adapter().is_mesa()
}

/// The wait kernel for `m`: one invocation, or on llvmpipe 256 that poll one after another.
pub(super) fn wait_kernel(m: &Member) -> Entry<PollWaitParams> {
    if cuts_loops(m) {
        POLL_WAIT_CPU
    } else {
        POLL_WAIT
    }
}

/// Measures how fast `m` runs `poll_wait`'s loop on a `go` that never comes, and plans a wait
/// of about `bound`.
pub(super) fn calibrate(
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
