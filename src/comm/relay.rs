//! The DevicePoll relay: one named thread per communicator (`crossgpu-relay-N`) that turns
//! arrivals into releases without a semaphore or a submit.
//!
//! Each member's `poll_wait` kernel stores the round into the member's arrival word in host
//! memory; the relay reads those words with atomic loads and, once every member arrived at a
//! round, stores it into every member's `go` word in that member's mapped device-local memory,
//! which the waiting kernel polls. It releases the highest round every member reached, so a
//! late start catches up in one store. While rounds are outstanding it spins for the spin time,
//! then naps, and checks the members' `expired` words every millisecond (they are in device
//! memory, so the calling thread does not read them per round): a wait that ran out poisons the
//! communicator with an error naming the members that did not arrive, and `abort` ends every
//! other wait at once. With no round outstanding it sleeps on a condition variable.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use vk_native::{HostAllocation, MappedWords};

use crate::error::Error;

/// Word indices in a member's flags (`wgsl/include/poll_round.wgsl` has the same).
pub(crate) mod flag {
    pub(crate) const GO: usize = 0;
    pub(crate) const ABORT: usize = 1;
    pub(crate) const EXPIRED: usize = 3;
    pub(crate) const EXPIRED_ROUND: usize = 4;
    /// Added by the kernels to every recorded round; advanced by the devices after each
    /// replayed recording (`advance_rounds.wgsl`), stored by the host only when they are idle.
    pub(crate) const ROUND_BASE: usize = 5;
    /// Words per member's flags buffer (one 256-byte line: any binding offset alignment).
    pub(crate) const WORDS: usize = 64;
}

/// Bytes between two members' arrival words in host memory (one per 256-byte line, so a
/// device's store never shares a cache line with a peer's).
pub(crate) const ARRIVAL_STRIDE: u64 = 256;

/// What the relay and the completion checks share about the members' words.
pub(crate) struct Words {
    pub(crate) arrivals: Arc<HostAllocation>,
    pub(crate) flags: Vec<MappedWords>,
    pub(crate) labels: Vec<String>,
    /// The bound a wait was calibrated to, for messages.
    pub(crate) bound: Duration,
    /// Set once anyone (the relay, a member's completion check) saw a wait that ran out: the
    /// calling thread checks this per round instead of reading the words across the bus.
    pub(crate) expiry_seen: AtomicBool,
}

impl Words {
    /// Member `j`'s arrival word: the last round it announced (low 32 bits).
    pub(crate) fn arrival(&self, j: usize) -> u32 {
        self.arrivals.word(j as u64 * ARRIVAL_STRIDE).map_or(0, |w| w.load(Ordering::Acquire))
    }

    fn flag(&self, i: usize, word: usize) -> u32 {
        self.flags[i].word(word).map_or(0, |w| w.load(Ordering::Acquire))
    }

    /// Ends every member's wait at once (as expired).
    pub(crate) fn abort(&self) {
        for f in &self.flags {
            f.publish(flag::ABORT, 1);
        }
    }

    /// The error for member `i` if its wait ran out: which members had not arrived at that
    /// round.
    pub(crate) fn expired(&self, i: usize) -> Option<Error> {
        if self.flag(i, flag::EXPIRED) == 0 {
            return None;
        }
        self.expiry_seen.store(true, Ordering::Release);
        let round = self.flag(i, flag::EXPIRED_ROUND);
        let late: Vec<&str> = (0..self.flags.len())
            .filter(|&j| (self.arrival(j).wrapping_sub(round) as i32) < 0)
            .map(|j| self.labels[j].as_str())
            .collect();
        let who = if late.is_empty() {
            // All arrived by now: a peer that could run only after this wait gave up (work on
            // one GPU that does not run beside a polling kernel), or a relay that did not run.
            "every member arrived only after the wait, or the relay did not release it".to_string()
        } else {
            format!("{} did not arrive", late.join(", "))
        };
        Some(Error::Timeout {
            what: format!("all-reduce round {round} (low 32 bits) on {}: {who}", self.labels[i]),
            ms: self.bound.as_millis() as u64,
        })
    }
}

/// What the calling thread and the relay share. The per-round path is lock-free: the caller
/// raises `announced` and takes the mutex only when the relay sleeps (a Dekker-style handshake
/// on `sleeping` and `announced`, both sequentially consistent), so recording a round costs
/// the caller no system call and never waits for the relay.
struct Shared {
    /// Highest round recorded on every member.
    announced: AtomicU64,
    /// The relay is about to sleep or sleeps on `wake`: an announcement must notify it.
    sleeping: AtomicBool,
    stopping: AtomicBool,
    /// `error` holds the reason the relay stopped.
    failed: AtomicBool,
    error: Mutex<Option<Error>>,
    sleep: Mutex<()>,
    wake: Condvar,
}

impl Shared {
    /// Wakes the relay if it sleeps (after the caller stored what it should see).
    fn notify(&self) {
        if self.sleeping.load(Ordering::SeqCst) {
            let _held = self.sleep.lock().unwrap_or_else(|p| p.into_inner());
            self.wake.notify_all();
        }
    }
}

pub(crate) struct Relay {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Relay {
    pub(crate) fn start(name: String, words: Arc<Words>, spin: Duration) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            announced: AtomicU64::new(0),
            sleeping: AtomicBool::new(false),
            stopping: AtomicBool::new(false),
            failed: AtomicBool::new(false),
            error: Mutex::new(None),
            sleep: Mutex::new(()),
            wake: Condvar::new(),
        });
        let s = shared.clone();
        let thread = std::thread::Builder::new().name(name).spawn(move || run(&s, &words, spin))?;
        Ok(Self { shared, thread: Some(thread) })
    }

    /// Announces that every member recorded round `round`.
    pub(crate) fn announce(&self, round: u64) {
        self.shared.announced.fetch_max(round, Ordering::SeqCst);
        self.shared.notify();
    }

    /// Why the relay stopped, if a wait ran out (an atomic load unless one did).
    pub(crate) fn error(&self) -> Option<Error> {
        if !self.shared.failed.load(Ordering::Acquire) {
            return None;
        }
        self.shared.error.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Stops the thread and joins it.
    pub(crate) fn stop(&mut self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        self.shared.notify();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Interval between checks of the `expired` words once the spin time ran out.
const CHECK_EVERY: Duration = Duration::from_millis(1);

fn run(shared: &Shared, words: &Words, spin: Duration) {
    let n = words.flags.len();
    let mut released = 0u64;
    // Kept across wake-ups: when rounds are released faster than CHECK_EVERY, the relay still
    // reads the expired words once per CHECK_EVERY while rounds are outstanding.
    let mut last_check = Instant::now();
    loop {
        // Sleep until a round is outstanding or the relay stops.
        loop {
            if shared.stopping.load(Ordering::SeqCst) {
                return;
            }
            if shared.announced.load(Ordering::SeqCst) > released {
                break;
            }
            let held = shared.sleep.lock().unwrap_or_else(|p| p.into_inner());
            shared.sleeping.store(true, Ordering::SeqCst);
            if shared.announced.load(Ordering::SeqCst) <= released && !shared.stopping.load(Ordering::SeqCst)
            {
                drop(shared.wake.wait(held).unwrap_or_else(|p| p.into_inner()));
            }
            shared.sleeping.store(false, Ordering::SeqCst);
        }
        let mut start = Instant::now();
        loop {
            let announced = shared.announced.load(Ordering::Acquire);
            if announced <= released {
                break;
            }
            // The highest round every member reached, lifted from 32 bits next to `released`.
            let reached = (0..n)
                .map(|j| {
                    let a = words.arrival(j);
                    released.wrapping_add_signed(i64::from(a.wrapping_sub(released as u32) as i32))
                })
                .min()
                .unwrap_or(released)
                .min(announced);
            if reached > released {
                for f in &words.flags {
                    f.publish(flag::GO, reached as u32);
                }
                released = reached;
                start = Instant::now();
                continue;
            }
            if shared.stopping.load(Ordering::Acquire) {
                return;
            }
            let now = Instant::now();
            // The `expired` words live in device memory (a read crosses the bus): checked every
            // CHECK_EVERY, spinning or napping.
            if now - last_check >= CHECK_EVERY {
                last_check = now;
                if let Some(e) = (0..n).find_map(|i| words.expired(i)) {
                    log::error!("all-reduce relay: {e}");
                    words.abort();
                    *shared.error.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                    shared.failed.store(true, Ordering::Release);
                    return;
                }
            }
            if now - start < spin {
                std::hint::spin_loop();
            } else {
                std::thread::sleep(Duration::from_micros(20));
            }
        }
    }
}
