//! The DevicePoll relay: one named thread per communicator (`crossgpu-relay-N`) that turns
//! arrivals into releases without a semaphore or a submit.
//!
//! Each member's `poll_wait` kernel stores the round into the member's arrival word in host
//! memory; the relay reads those words with atomic loads and, once every member arrived at a
//! round, stores it into every member's `go` word in that member's mapped device-local memory,
//! which the waiting kernel polls. It releases the highest round every member reached, so a
//! late start catches up in one store. While rounds are outstanding it spins for the spin time,
//! then naps, checking the members' `expired` words: a wait that ran out poisons the
//! communicator with an error naming the members that did not arrive, and `abort` ends every
//! other wait at once. With no round outstanding it sleeps on a condition variable.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use vk_native::{HostAllocation, MappedWords};

use crate::error::Error;

/// Word indices in a member's flags (`wgsl/poll_wait.wgsl` has the same).
pub(crate) mod flag {
    pub(crate) const GO: usize = 0;
    pub(crate) const ABORT: usize = 1;
    pub(crate) const EXPIRED: usize = 3;
    pub(crate) const EXPIRED_ROUND: usize = 4;
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

#[derive(Default)]
struct State {
    /// Highest round recorded on every member.
    announced: u64,
    /// Highest round stored into every `go`.
    released: u64,
    stop: bool,
    error: Option<Error>,
}

struct Shared {
    state: Mutex<State>,
    wake: Condvar,
    stopping: AtomicBool,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

pub(crate) struct Relay {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Relay {
    pub(crate) fn start(name: String, words: Arc<Words>, spin: Duration) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            wake: Condvar::new(),
            stopping: AtomicBool::new(false),
        });
        let s = shared.clone();
        let thread = std::thread::Builder::new().name(name).spawn(move || run(&s, &words, spin))?;
        Ok(Self { shared, thread: Some(thread) })
    }

    /// Announces that every member recorded round `round`.
    pub(crate) fn announce(&self, round: u64) {
        let mut st = self.shared.lock();
        st.announced = st.announced.max(round);
        self.shared.wake.notify_all();
    }

    /// Why the relay stopped, if a wait ran out.
    pub(crate) fn error(&self) -> Option<Error> {
        self.shared.lock().error.clone()
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

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Interval between checks of the `expired` words once the spin time ran out.
const CHECK_EVERY: Duration = Duration::from_millis(1);

fn run(shared: &Shared, words: &Words, spin: Duration) {
    let n = words.flags.len();
    loop {
        let (released, announced) = {
            let mut st = shared.lock();
            while !st.stop && st.announced <= st.released {
                st = shared.wake.wait(st).unwrap_or_else(|p| p.into_inner());
            }
            if st.stop {
                return;
            }
            (st.released, st.announced)
        };
        let start = Instant::now();
        let mut last_check = start;
        loop {
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
                shared.lock().released = reached;
                break;
            }
            if shared.stopping.load(Ordering::Acquire) {
                return;
            }
            let now = Instant::now();
            if now - start < spin {
                std::hint::spin_loop();
                continue;
            }
            if now - last_check >= CHECK_EVERY {
                last_check = now;
                if let Some(e) = (0..n).find_map(|i| words.expired(i)) {
                    log::error!("all-reduce relay: {e}");
                    words.abort();
                    shared.lock().error = Some(e);
                    return;
                }
            }
            std::thread::sleep(Duration::from_micros(20));
        }
    }
}
