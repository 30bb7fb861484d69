//! DevicePoll's wake and the relay's step: chains of `poll_wait` steps on one device and
//! across members.

use std::sync::Arc;
use std::time::Instant;

use vk_native::{
    Access, BindRange, DeviceType, HostAllocation, ImportedBuffer, MappedWords, Recorder, SubmitInfo,
};

use super::timing::{err, CHAIN};
use crate::bench::{summarize, Summary};
use crate::error::{Error, Result};
use crate::group::Member;
use crate::kernels::{ImmediateWords, PollWaitParams, POLL_WAIT, POLL_WAIT_CPU};

/// One device's side of a chain of `poll_wait` steps: its `go`/`abort`/`expired` words in mapped
/// device-local memory, its arrival word in imported host memory, the bound kernel.
pub(super) struct PollChain {
    flags: MappedWords,
    host: Arc<HostAllocation>,
    // Kept alive for `bind`.
    _arrival: ImportedBuffer,
    bind: vk_native::BindGroup,
    trips: u32,
    label: String,
}

impl PollChain {
    fn new(m: &Member) -> Result<Self> {
        let e = err(m);
        let dev = m.device();
        let align = dev.info().caps.min_imported_host_pointer_alignment.max(4096);
        // llvmpipe ends loops after 65,535 trips: its 256-wide variant polls longer per dispatch.
        let cpu = dev.info().device_type == DeviceType::Cpu && dev.info().is_mesa();
        let (entry, trips) = if cpu { (POLL_WAIT_CPU, 60_000) } else { (POLL_WAIT, u32::MAX) };
        let flags = MappedWords::new(dev, 64).map_err(&e)?;
        let host = Arc::new(HostAllocation::new(align, align).map_err(&e)?);
        let arrival = ImportedBuffer::new(dev, &host).map_err(&e)?;
        let kernel = m.shared.pipelines.get(entry.kernel()?).map_err(&e)?;
        let bind = kernel
            .bind_ranges(&[BindRange::whole(&flags), BindRange { buffer: &arrival, offset: 0, size: 256 }])
            .map_err(&e)?;
        Ok(Self { flags, host, _arrival: arrival, bind, trips, label: m.label().to_string() })
    }

    /// Records the step of `round`: store it as the arrival, wait for `go` to reach it.
    fn record(&self, rec: &mut Recorder, round: u32) -> vk_native::Result<()> {
        let imm = PollWaitParams { round, trips: self.trips, arrive: 1, last: 1 };
        rec.dispatch(&self.bind, &imm.words(), [1, 1, 1])?;
        rec.barrier(Access::COMPUTE_WRITE, Access::COMPUTE_WRITE | Access::COMPUTE_READ)
    }

    /// Whether the step of `round` arrived (modulo 2^32).
    fn arrived(&self, round: u32) -> bool {
        let word = self.host.word(0).expect("the allocation holds a word");
        (word.load(std::sync::atomic::Ordering::Acquire).wrapping_sub(round) as i32) >= 0
    }

    fn release(&self, round: u32) {
        self.flags.publish(0, round);
    }

    /// Ends every wait (so the queue drains before an error is returned).
    fn abort(&self) {
        self.flags.publish(1, 1);
    }

    /// Whether a wait ran out since the last call (and clears it).
    fn expired(&self) -> bool {
        let expired = self.flags.word(3).expect("64 words");
        expired.swap(0, std::sync::atomic::Ordering::AcqRel) != 0
    }
}

/// Chains of [`CHAIN`] `poll_wait` steps on every device of `members` at once, `reps` times
/// after a warm-up: the host waits until every device arrived at a step, then releases all of
/// them (one device: [`Limits::poll_wake_step_us`]; several: a DevicePoll round's relay
/// without its copies). µs per step, timed from the first step's last arrival to the last.
pub(super) fn poll_steps(
    members: &[&Member],
    recs: &mut [&mut Recorder],
    reps: usize,
    timeout_ns: u64,
) -> Result<Summary> {
    let chains = members.iter().map(|m| PollChain::new(m)).collect::<Result<Vec<_>>>()?;
    let mut samples = Vec::new();
    let mut round = 0u32;
    for rep in 0..=reps {
        let first = round + 1;
        let mut values = Vec::new();
        for ((m, c), rec) in members.iter().zip(&chains).zip(recs.iter_mut()) {
            for r in first..first + CHAIN as u32 {
                c.record(rec, r).map_err(err(m))?;
            }
            values.push(rec.submit(&SubmitInfo::default()).map_err(err(m))?);
        }
        round = first + CHAIN as u32 - 1;
        let deadline = Instant::now() + std::time::Duration::from_nanos(timeout_ns);
        let mut t = Instant::now();
        for r in first..=round {
            for c in &chains {
                // A wait that ran out (the host was too slow: a busy CPU device) lets the chain
                // run past this step; that repetition is then dropped.
                while !c.arrived(r) {
                    if Instant::now() > deadline {
                        chains.iter().for_each(PollChain::abort);
                        for ((m, rec), v) in members.iter().zip(recs.iter_mut()).zip(&values) {
                            let _ = rec.wait(*v, timeout_ns).map_err(err(m));
                        }
                        return Err(Error::Timeout {
                            what: format!("DevicePoll step {r} on {}", c.label),
                            ms: timeout_ns / 1_000_000,
                        });
                    }
                    std::hint::spin_loop();
                }
            }
            if r == first {
                // Timing starts at the first release: the submits' own latency is not a step.
                t = Instant::now();
            }
            chains.iter().for_each(|c| c.release(r));
        }
        let took = t.elapsed();
        let mut expired = false;
        for (((m, rec), v), c) in members.iter().zip(recs.iter_mut()).zip(&values).zip(&chains) {
            rec.wait(*v, timeout_ns).map_err(err(m))?;
            expired |= c.expired();
        }
        if expired {
            log::warn!("DevicePoll steps: a wait ran out; repetition {rep} dropped");
        } else if rep > 0 {
            samples.push(took.as_secs_f64() * 1e6 / (CHAIN - 1) as f64);
        }
    }
    Ok(summarize(&samples))
}

/// The relay across the members of a group, each on its own device (where DevicePoll may run):
/// chains of `poll_wait` steps on all of them, the host releasing a step once all arrived, as
/// DevicePoll's relay does. µs per step: a DevicePoll round's cost without its copies.
pub fn relay_step(members: &[Member], reps: usize) -> Result<Summary> {
    if let Some(why) = crate::comm::poll_blocker(members) {
        return Err(Error::Unsupported(format!("relay step: {why}")));
    }
    let timeout = members.iter().map(|m| m.shared.timeout_ms).max().unwrap_or(0) * 1_000_000;
    let mut recs = members
        .iter()
        .map(|m| Recorder::new(m.device(), m.shared.queue_index).map_err(err(m)))
        .collect::<Result<Vec<_>>>()?;
    let refs: Vec<&Member> = members.iter().collect();
    poll_steps(&refs, &mut recs.iter_mut().collect::<Vec<_>>(), reps, timeout)
}
