//! How the limits are timed: gated chains of recorded work a host signal releases, batches
//! of submits, the copy kernel's rate.

use std::time::Instant;

use vk_native::{Access, Buffer, BufferUsage, GpuBuffer, Recorder, SubmitInfo, TimelineSemaphore};

use crate::bench::{summarize, Summary};
use crate::error::{Error, Result};
use crate::group::Member;
use crate::kernels::{CopyVec4Params, ImmediateWords, COPY_VEC4};

/// Commands recorded per sample of the recording costs.
pub const RECORDED: usize = 2000;

/// Steps in the gated chains (below the recorder's in-flight limit: nothing may wait for the
/// GPU while the gate is closed).
pub const CHAIN: usize = 64;

/// Signals `gate` to `value` from the host, then spins until `done` reaches `target`; returns
/// the time from the signal, or a timeout naming `what` after `timeout_ms`.
pub(super) fn open_and_spin(
    gate: &TimelineSemaphore,
    value: u64,
    done: &TimelineSemaphore,
    target: u64,
    timeout_ms: u64,
    what: &str,
    err: impl Fn(vk_native::NativeError) -> Error,
) -> Result<std::time::Duration> {
    let t = Instant::now();
    gate.signal(value).map_err(&err)?;
    while done.value().map_err(&err)? < target {
        std::hint::spin_loop();
        if t.elapsed().as_millis() as u64 > timeout_ms {
            return Err(Error::Timeout { what: what.into(), ms: timeout_ms });
        }
    }
    Ok(t.elapsed())
}

/// How a gated chain's steps are submitted.
pub(super) enum Chain<'a> {
    /// A submit per step; waiting on the gate and signalling a timeline each, or only the
    /// first waits and none signals more than the recorder's own progress.
    Own { wait_and_signal_each: bool },
    /// One submit for all steps.
    One,
    /// Steps alternate between two recorders of the queue, a pair per
    /// [`Recorder::submit_together`] batch that waits on the gate and signals a timeline.
    Joint(&'a mut Recorder),
}

/// GPU µs per step of [`CHAIN`] steps queued behind `gate` (closed below `value`), then
/// released by the host, which spins until the last submit completes.
pub(super) fn gated_chain(
    rec: &mut Recorder,
    chain: Chain<'_>,
    gate: &TimelineSemaphore,
    value: u64,
    timeout_ms: u64,
    mut step: impl FnMut(&mut Recorder) -> vk_native::Result<()>,
) -> Result<f64> {
    let e = |e| Error::native("gated chain", e);
    let mark = TimelineSemaphore::new(rec.device(), 0).map_err(e)?;
    let gated = [(gate, value)];
    let mut other = None;
    match chain {
        Chain::Own { wait_and_signal_each } => {
            for k in 0..CHAIN {
                step(rec).map_err(e)?;
                let each = wait_and_signal_each;
                let signal = [(&mark, k as u64 + 1)];
                rec.submit(&SubmitInfo {
                    wait_timeline: if each || k == 0 { &gated } else { &[] },
                    signal_timeline: if each { &signal } else { &[] },
                    ..Default::default()
                })
                .map_err(e)?;
            }
        }
        Chain::One => {
            for _ in 0..CHAIN {
                step(rec).map_err(e)?;
            }
            rec.submit(&SubmitInfo {
                wait_timeline: &gated,
                signal_timeline: &[(&mark, 1)],
                ..Default::default()
            })
            .map_err(e)?;
        }
        Chain::Joint(second) => {
            for k in 0..CHAIN / 2 {
                step(rec).map_err(e)?;
                step(second).map_err(e)?;
                let signal = [(&mark, k as u64 + 1)];
                let info =
                    SubmitInfo { wait_timeline: &gated, signal_timeline: &signal, ..Default::default() };
                Recorder::submit_together(&mut [&mut *rec, &mut *second], &[info, SubmitInfo::default()])
                    .map_err(e)?;
            }
            other = Some(second);
        }
    }
    std::thread::sleep(std::time::Duration::from_millis(2));
    let took =
        open_and_spin(gate, value, rec.progress(), rec.submitted(), timeout_ms, "a gated submit chain", e)?;
    let us = took.as_secs_f64() * 1e6 / CHAIN as f64;
    if let Some(o) = other {
        o.wait(o.submitted(), timeout_ms * 1_000_000).map_err(e)?;
    }
    Ok(us)
}

pub(super) fn err(m: &Member) -> impl Fn(vk_native::NativeError) -> Error + '_ {
    move |e| m.shared.err(e)
}

pub(super) fn timed(rec: &mut Recorder, timeout_ns: u64) -> vk_native::Result<f64> {
    let t = Instant::now();
    let v = rec.submit(&SubmitInfo::default())?;
    if !rec.wait(v, timeout_ns)? {
        return Err(vk_native::NativeError::Timeout(timeout_ns / 1_000_000));
    }
    Ok(t.elapsed().as_secs_f64())
}

/// Steps recorded per timed batch.
pub(super) const STEPS: usize = 4;

/// GB/s of `reps` timed batches, after one untimed: each batch is [`STEPS`] steps recorded by
/// `step`, each followed by the `barrier` (source and destination access), and moves
/// `bytes_per_step` per step.
pub(super) fn batch_rate(
    rec: &mut Recorder,
    reps: usize,
    timeout_ns: u64,
    barrier: (Access, Access),
    bytes_per_step: f64,
    mut step: impl FnMut(&mut Recorder) -> vk_native::Result<()>,
) -> vk_native::Result<Summary> {
    let mut samples = Vec::new();
    for rep in 0..reps + 1 {
        for _ in 0..STEPS {
            step(rec)?;
            rec.barrier(barrier.0, barrier.1)?;
        }
        let s = timed(rec, timeout_ns)?;
        if rep > 0 {
            samples.push(STEPS as f64 * bytes_per_step / s / 1e9);
        }
    }
    Ok(summarize(&samples))
}

/// The device-local copy kernel's rate on `m`'s device, in GB/s of bytes read plus written:
/// `copy_vec4` between two buffers of `bytes` (clamped to what one binding covers), `reps`
/// timed batches after a warm-up. What a kernel that streams weights can reach: the decode
/// reports its weight-streaming ratio against it.
pub fn copy_kernel_gbps(m: &Member, bytes: u64, reps: usize) -> Result<Summary> {
    let e = err(m);
    let dev = m.device();
    let bytes = bytes.min(dev.info().caps.max_storage_buffer_range).max(4096) / 16 * 16;
    let timeout = m.shared.timeout_ms * 1_000_000;
    let usage = BufferUsage { copy_src: true, copy_dst: true };
    let a = Buffer::new(dev, bytes, usage, "copy rate a").map_err(&e)?;
    let b = Buffer::new(dev, bytes, usage, "copy rate b").map_err(&e)?;
    let mut rec = Recorder::new(dev, m.shared.queue_index).map_err(&e)?;
    let kernel = m.shared.pipelines.get(COPY_VEC4.kernel()?).map_err(&e)?;
    copy_kernel_rate(&mut rec, &kernel, (&a, &b), (bytes / 16) as u32, 2.0, reps, timeout).map_err(&e)
}

/// `copy_vec4` of `words` 16-byte words from `src` to `dst`, timed as [`batch_rate`] times a
/// step; `factor` 2 counts bytes read and written (both sides device memory), 1 one side.
pub(super) fn copy_kernel_rate(
    rec: &mut Recorder,
    kernel: &vk_native::Kernel,
    (src, dst): (&dyn GpuBuffer, &dyn GpuBuffer),
    words: u32,
    factor: f64,
    reps: usize,
    timeout_ns: u64,
) -> vk_native::Result<Summary> {
    let group = kernel.bind(&[src, dst])?;
    let groups = [(words as usize).div_ceil(256).clamp(1, 65_535) as u32, 1, 1];
    let compute = (Access::COMPUTE_WRITE, Access::COMPUTE_WRITE | Access::COMPUTE_READ);
    batch_rate(rec, reps, timeout_ns, compute, factor * (words as u64 * 16) as f64, |r| {
        r.dispatch(&group, &CopyVec4Params { n: words }.words(), groups)
    })
}
