//! The embedding's host bridge: one thread that, for each requested round r in order, waits
//! until every member's `done` reached r and then signals every member's `go = r`.

use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use vk_native::EmbeddedTimeline;

#[derive(Default)]
struct State {
    requested: u64,
    released: u64,
    stop: bool,
    error: Option<String>,
}

struct Shared {
    state: Mutex<State>,
    wake: Condvar,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

pub(super) struct Bridge {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Bridge {
    pub(super) fn start(
        done: Vec<EmbeddedTimeline>,
        go: Vec<EmbeddedTimeline>,
        timeout_ns: u64,
    ) -> std::io::Result<Self> {
        let shared = Arc::new(Shared { state: Mutex::new(State::default()), wake: Condvar::new() });
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("crossgpu-embed-bridge".into())
            .spawn(move || run(&s, &done, &go, timeout_ns))?;
        Ok(Self { shared, thread: Some(thread) })
    }

    /// Asks for round `round` (rounds are requested in order).
    pub(super) fn request(&self, round: u64) {
        let mut st = self.shared.lock();
        st.requested = st.requested.max(round);
        self.shared.wake.notify_all();
    }

    pub(super) fn error(&self) -> Option<String> {
        self.shared.lock().error.clone()
    }

    /// Blocks until round `round` is released; `Err` with the bridge's error or on timeout.
    pub(super) fn wait_released(&self, round: u64, timeout_ns: u64) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_nanos(timeout_ns);
        let mut st = self.shared.lock();
        loop {
            if st.released >= round {
                return Ok(());
            }
            if let Some(e) = &st.error {
                return Err(e.clone());
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(format!("round {round} not released after {} ms", timeout_ns / 1_000_000));
            }
            st = self.shared.wake.wait_timeout(st, deadline - now).unwrap_or_else(|p| p.into_inner()).0;
        }
    }

    pub(super) fn stop(&mut self) {
        self.shared.lock().stop = true;
        self.shared.wake.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        self.stop();
    }
}

fn run(s: &Shared, done: &[EmbeddedTimeline], go: &[EmbeddedTimeline], timeout_ns: u64) {
    const SLICE_NS: u64 = 50_000_000;
    loop {
        let round = {
            let mut st = s.lock();
            while st.requested <= st.released && !st.stop {
                st = s.wake.wait(st).unwrap_or_else(|p| p.into_inner());
            }
            if st.requested <= st.released || st.error.is_some() {
                return; // stopped with nothing left to release
            }
            st.released + 1
        };
        let start = Instant::now();
        let mut failed = None;
        'members: for (i, d) in done.iter().enumerate() {
            loop {
                match d.wait(round, SLICE_NS) {
                    Ok(true) => break,
                    Ok(false) => {
                        if start.elapsed() >= Duration::from_nanos(timeout_ns) {
                            failed = Some(format!(
                                "member {i} did not finish phase A of round {round} within {} ms",
                                timeout_ns / 1_000_000
                            ));
                            break 'members;
                        }
                    }
                    Err(e) => {
                        failed = Some(format!("member {i}: {e}"));
                        break 'members;
                    }
                }
            }
        }
        if failed.is_none() {
            for (i, g) in go.iter().enumerate() {
                if let Err(e) = g.signal(round) {
                    failed = Some(format!("member {i}: signalling go: {e}"));
                    break;
                }
            }
        }
        let mut st = s.lock();
        match failed {
            Some(e) => {
                log::error!("crossgpu embed bridge: {e}");
                st.error = Some(e);
                s.wake.notify_all();
                return;
            }
            None => {
                st.released = round;
                s.wake.notify_all();
            }
        }
    }
}
