//! The host bridge: one named thread per communicator (a [`Comm`](super::Comm), or the wgpu embedding's
//! `WgpuComm`) that releases each member's phase B once its peers' phase A has completed.
//!
//! For round r it polls every `done[j]` (a timeline semaphore the member's GPU signals at the
//! end of phase A) with `vkGetSemaphoreCounterValue`, spinning up to the spin time, then blocks
//! in `vkWaitSemaphores` in short slices that check for stop and for the timeout; as soon as
//! every peer of member i is done it signals `go[i] = r` from the host. Rounds are released in
//! order. Between bursts it sleeps on a condition variable, burning no CPU.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use vk_native::TimelineSemaphore;

use crate::error::Error;

#[derive(Default)]
pub(crate) struct BridgeState {
    /// Highest round whose phase A every member has submitted.
    pub(crate) submitted: u64,
    /// Highest round released to every member.
    pub(crate) released: u64,
    pub(crate) stop: bool,
    /// Set when the bridge failed; the communicator is poisoned with it.
    pub(crate) error: Option<Error>,
    /// Test hook: never release this member (simulates a withheld signal).
    pub(crate) withhold: Option<usize>,
    /// How rounds were released (spinning, or after blocking in `vkWaitSemaphores`: the slow
    /// path, where the thread sleeps in the driver and pays a wake-up when the GPU signals) and
    /// what the driver calls cost.
    pub(crate) stats: BridgeStats,
}

pub(crate) struct Shared {
    pub(crate) state: Mutex<BridgeState>,
    pub(crate) wake: Condvar,
    /// `state.stop`, readable without the lock: the spin loop checks it on every pass, and
    /// taking the mutex there contended with the main thread announcing rounds.
    stopping: AtomicBool,
}

impl Shared {
    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, BridgeState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

pub(crate) struct HostBridge {
    pub(crate) shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

pub(crate) struct BridgeConfig {
    pub(crate) done: Vec<TimelineSemaphore>,
    pub(crate) go: Vec<TimelineSemaphore>,
    pub(crate) labels: Vec<String>,
    pub(crate) spin: Duration,
    pub(crate) timeout: Duration,
}

impl HostBridge {
    pub(crate) fn start(name: String, cfg: BridgeConfig) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            state: Mutex::new(BridgeState::default()),
            wake: Condvar::new(),
            stopping: AtomicBool::new(false),
        });
        let s = shared.clone();
        let thread = std::thread::Builder::new().name(name).spawn(move || run(&s, &cfg))?;
        Ok(Self { shared, thread: Some(thread) })
    }

    /// Announces that every member submitted phase A of `round`.
    pub(crate) fn submitted(&self, round: u64) {
        let mut st = self.shared.lock();
        st.submitted = st.submitted.max(round);
        self.shared.wake.notify_all();
    }

    /// The highest round [`HostBridge::submitted`] was told of.
    pub(crate) fn last_submitted(&self) -> u64 {
        self.shared.lock().submitted
    }

    /// Why the bridge stopped releasing rounds, if it failed.
    pub(crate) fn error(&self) -> Option<Error> {
        self.shared.lock().error.clone()
    }

    /// Waits until `round` is released, the bridge failed, or `timeout` passed.
    pub(crate) fn wait_released(&self, round: u64, timeout: Duration) -> Result<(), Error> {
        let deadline = Instant::now() + timeout;
        let mut st = self.shared.lock();
        loop {
            if let Some(e) = &st.error {
                return Err(e.clone());
            }
            if st.released >= round {
                return Ok(());
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(Error::Timeout {
                    what: format!("the host bridge to release round {round}"),
                    ms: timeout.as_millis() as u64,
                });
            }
            st = self.shared.wake.wait_timeout(st, deadline - now).unwrap_or_else(|p| p.into_inner()).0;
        }
    }

    /// Stops the thread and joins it.
    pub(crate) fn stop(&mut self) {
        self.shared.lock().stop = true;
        self.shared.stopping.store(true, Ordering::Release);
        self.shared.wake.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for HostBridge {
    fn drop(&mut self) {
        self.stop();
    }
}

fn run(shared: &Shared, cfg: &BridgeConfig) {
    let n = cfg.done.len();
    loop {
        // Sleep until there is a round to release.
        let (round, withhold) = {
            let mut st = shared.lock();
            while !st.stop && st.submitted <= st.released {
                st = shared.wake.wait(st).unwrap_or_else(|p| p.into_inner());
            }
            if st.stop {
                return;
            }
            (st.released + 1, st.withhold)
        };
        let mut calls = BridgeStats::default();
        match release_round(shared, cfg, round, n, withhold, &mut calls) {
            Ok(blocked) => {
                if blocked {
                    calls.released_after_blocking = 1;
                } else {
                    calls.released_spinning = 1;
                }
                let mut st = shared.lock();
                st.released = round;
                st.stats.add(&calls);
                shared.wake.notify_all();
            }
            Err(Stop) => return,
        }
    }
}

struct Stop;

/// Releases every member for `round`; returns whether it had to block, or Err(Stop) when asked
/// to stop or on failure (recorded in the shared error).
fn release_round(
    shared: &Shared,
    cfg: &BridgeConfig,
    round: u64,
    n: usize,
    withhold: Option<usize>,
    calls: &mut BridgeStats,
) -> Result<bool, Stop> {
    let start = Instant::now();
    let mut blocked = false;
    let mut is_done = vec![false; n];
    let mut released = vec![false; n];
    let fail = |e: Error| {
        log::error!("host bridge: {e}");
        let mut st = shared.lock();
        st.error = Some(e);
        shared.wake.notify_all();
        Stop
    };
    loop {
        let mut progressed = false;
        for (j, done) in is_done.iter_mut().enumerate().filter(|(_, d)| !**d) {
            let t = Instant::now();
            let value = cfg.done[j].value();
            calls.poll_time += t.elapsed();
            calls.polls += 1;
            match value {
                Ok(v) if v >= round => {
                    *done = true;
                    progressed = true;
                }
                Ok(_) => {}
                Err(e) => {
                    return Err(fail(Error::native(
                        &format!("host bridge reading done of {}", cfg.labels[j]),
                        e,
                    )))
                }
            }
        }
        if progressed {
            // Release every member whose peers are all done.
            for (i, rel) in released.iter_mut().enumerate() {
                if !*rel && Some(i) != withhold && is_done.iter().enumerate().all(|(j, &d)| j == i || d) {
                    let t = Instant::now();
                    let signalled = cfg.go[i].signal(round);
                    calls.signal_time += t.elapsed();
                    calls.signals += 1;
                    if let Err(e) = signalled {
                        let on = format!("host bridge signalling go = {round} on {}", cfg.labels[i]);
                        return Err(fail(Error::native(&on, e)));
                    }
                    *rel = true;
                }
            }
        }
        if (0..n).all(|i| released[i] || Some(i) == withhold) && withhold.is_none() {
            return Ok(blocked);
        }
        let elapsed = start.elapsed();
        if elapsed >= cfg.timeout {
            let waiting: Vec<String> = (0..n)
                .filter(|&j| !is_done[j])
                .map(|j| cfg.labels[j].clone())
                .chain(withhold.map(|w| format!("{} (signal withheld by test hook)", cfg.labels[w])))
                .collect();
            return Err(fail(Error::Timeout {
                what: format!("all-reduce round {round}: {} did not finish phase A", waiting.join(", ")),
                ms: cfg.timeout.as_millis() as u64,
            }));
        }
        if shared.stopping.load(Ordering::Acquire) {
            return Err(Stop);
        }
        if elapsed < cfg.spin {
            std::hint::spin_loop();
            continue;
        }
        // Past the spin time: block on the first member not done, in short slices.
        match (0..n).find(|&j| !is_done[j]) {
            Some(j) => {
                blocked = true;
                if let Err(e) = cfg.done[j].wait(round, 2_000_000) {
                    let on = format!("host bridge waiting on done of {}", cfg.labels[j]);
                    return Err(fail(Error::native(&on, e)));
                }
            }
            None => std::thread::sleep(Duration::from_millis(2)),
        }
    }
}

/// How the host bridge released its rounds so far, and what its driver calls cost (see
/// [`Comm::bridge_stats`](super::Comm::bridge_stats)).
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
