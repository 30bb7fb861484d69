//! How the limits are timed: gated chains of recorded work a host signal releases, batches
//! of submits, the copy kernel's rate.

use std::time::Instant;

use vk_native::{Access, Buffer, BufferUsage, GpuBuffer, Recorder, SubmitInfo, TimelineSemaphore};

use crate::bench::{summarize, Summary};
use crate::error::{Error, Result};
use crate::group::Member;
use crate::kernels::{
    CopyVec4Params, ImmediateWords, COPY_VEC4, COPY_VEC4_WG1024, COPY_VEC4_WG64, COPY_VEC4_X4,
};

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

/// Steps per batch timed on the GPU ([`gpu_batch_rate`]).
const GPU_STEPS: usize = 20;

/// GB/s of `reps` batches of [`GPU_STEPS`] steps (each followed by the `barrier`) timed on the
/// GPU, after one untimed: the sum of what each command added between timestamps written after
/// every command (the recorder's profile), as CUDA events around a batch time it. Unlike
/// [`batch_rate`], no submit and no host wake-up is inside the time. `None` where the device
/// has no timestamps (then [`batch_rate`] is the measure).
pub(super) fn gpu_batch_rate(
    rec: &mut Recorder,
    reps: usize,
    timeout_ns: u64,
    barrier: (Access, Access),
    bytes_per_step: f64,
    mut step: impl FnMut(&mut Recorder) -> vk_native::Result<()>,
) -> vk_native::Result<Option<Summary>> {
    if rec.start_profile(2 * GPU_STEPS as u32 + 4).is_err() {
        return Ok(None);
    }
    let mut samples = Vec::new();
    for rep in 0..reps + 1 {
        for _ in 0..GPU_STEPS {
            step(rec)?;
            rec.barrier(barrier.0, barrier.1)?;
        }
        timed(rec, timeout_ns)?;
        let ns: f64 = rec.take_profile()?.iter().map(|(_, t)| t).sum();
        if rep > 0 && ns > 0.0 {
            samples.push(GPU_STEPS as f64 * bytes_per_step / ns);
        }
    }
    Ok(Some(summarize(&samples)))
}

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
/// batches of 20 copies timed on the GPU (timestamps; host time around four where the device
/// has none) after a warm-up. What a kernel that streams weights can reach: the decode
/// reports its weight-streaming ratio against it.
pub fn copy_kernel_gbps(m: &Member, bytes: u64, reps: usize) -> Result<Summary> {
    let e = err(m);
    let (bytes, a, b, mut rec) = copy_buffers(m, bytes, "copy rate")?;
    let timeout = m.shared.timeout_ms * 1_000_000;
    let kernel = m.shared.pipelines.get(COPY_VEC4.kernel()?).map_err(&e)?;
    let words = (bytes / 16) as u32;
    copy_kernel_rate(&mut rec, &kernel, (&a, &b), words, one_per_thread(words), 2.0, reps, timeout, true)
        .map_err(&e)
}

/// The two device-local buffers a copy rate is measured between (`bytes` clamped to what one
/// binding covers, at least 4 KiB, whole 16-byte words; named `label a` and `label b`), and a
/// recorder of its own on `m`'s queue.
fn copy_buffers(m: &Member, bytes: u64, label: &str) -> Result<(u64, Buffer, Buffer, Recorder)> {
    let e = err(m);
    let dev = m.device();
    let bytes = bytes.min(dev.info().caps.max_storage_buffer_range).max(4096) / 16 * 16;
    let usage = BufferUsage { copy_src: true, copy_dst: true };
    let a = Buffer::new(dev, bytes, usage, &format!("{label} a")).map_err(&e)?;
    let b = Buffer::new(dev, bytes, usage, &format!("{label} b")).map_err(&e)?;
    let rec = Recorder::new(dev, m.shared.queue_index).map_err(&e)?;
    Ok((bytes, a, b, rec))
}

/// Workgroups of 256 threads for one 16-byte word per thread (at most 65535; the kernels
/// stride over the rest).
pub(super) fn one_per_thread(words: u32) -> u32 {
    (words as usize).div_ceil(256).clamp(1, 65_535) as u32
}

/// One way of copying device memory to device memory and its rate.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CopyVariant {
    /// The kernel (or command) and its launch.
    pub name: String,
    /// Bytes read + written per second, GB/s.
    pub gbps: Summary,
}

/// The device-local copy bound searched on `m`'s device (issue 33): `copy_vec4` (one 16-byte
/// load and store per thread and step) with as many workgroups as words / 256 and with fixed
/// "persistent" counts, `copy_vec4_x4` (four loads in flight per thread before its stores),
/// `copy_vec4` with workgroups of 64 and 1024 threads, and vkCmdCopyBuffer, between two buffers
/// of `bytes` (clamped to one binding), `reps` timed batches each after a warm-up.
pub fn copy_variants(m: &Member, bytes: u64, reps: usize) -> Result<Vec<CopyVariant>> {
    let e = err(m);
    let (bytes, a, b, mut rec) = copy_buffers(m, bytes, "copy variants")?;
    let timeout = m.shared.timeout_ms * 1_000_000;
    let words = (bytes / 16) as u32;
    let mut out = Vec::new();
    for (handle, per_thread, name) in [(COPY_VEC4, 1u32, "copy_vec4"), (COPY_VEC4_X4, 4, "copy_vec4_x4")] {
        let kernel = m.shared.pipelines.get(handle.kernel()?).map_err(&e)?;
        let natural = one_per_thread(words.div_ceil(per_thread));
        let mut launches = vec![(natural, format!("{name}, {natural} groups (one pass)"))];
        for g in [264u32, 528, 1056, 2112, 4224, 8448, 16_896] {
            if g < natural {
                launches.push((g, format!("{name}, {g} groups (persistent)")));
            }
        }
        for (groups, name) in launches {
            let gbps = copy_kernel_rate(&mut rec, &kernel, (&a, &b), words, groups, 2.0, reps, timeout, true)
                .map_err(&e)?;
            out.push(CopyVariant { name, gbps });
        }
    }
    // Other workgroup sizes, one word per thread and step, as many groups as that needs.
    let sizes = [(COPY_VEC4_WG64, 64u32, "copy_vec4_wg64"), (COPY_VEC4_WG1024, 1024, "copy_vec4_wg1024")];
    for (handle, threads, name) in sizes {
        let kernel = m.shared.pipelines.get(handle.kernel()?).map_err(&e)?;
        let groups = words.div_ceil(threads).clamp(1, 65_535);
        let gbps = copy_kernel_rate(&mut rec, &kernel, (&a, &b), words, groups, 2.0, reps, timeout, true)
            .map_err(&e)?;
        out.push(CopyVariant { name: format!("{name}, {groups} groups of {threads}"), gbps });
    }
    let transfer = (Access::TRANSFER_WRITE, Access::TRANSFER_WRITE | Access::TRANSFER_READ);
    let copy = |r: &mut Recorder| r.copy(&a, 0, &b, 0, bytes);
    let gbps =
        match gpu_batch_rate(&mut rec, reps, timeout, transfer, 2.0 * bytes as f64, copy).map_err(&e)? {
            Some(rate) => rate,
            None => batch_rate(&mut rec, reps, timeout, transfer, 2.0 * bytes as f64, copy).map_err(&e)?,
        };
    out.push(CopyVariant { name: "vkCmdCopyBuffer".into(), gbps });
    Ok(out)
}

/// A copy kernel (`copy_vec4` or a variant of its interface) of `words` 16-byte words from
/// `src` to `dst` in `groups` workgroups, timed as [`gpu_batch_rate`] times a step where
/// `gpu_timed` and the device has timestamps (the recorder must be one that is not otherwise
/// profiled), else as [`batch_rate`] does (host time around a submit of four steps); `factor`
/// 2 counts bytes read and written (both sides device memory), 1 one side.
#[allow(clippy::too_many_arguments)]
pub(super) fn copy_kernel_rate(
    rec: &mut Recorder,
    kernel: &vk_native::Kernel,
    (src, dst): (&dyn GpuBuffer, &dyn GpuBuffer),
    words: u32,
    groups: u32,
    factor: f64,
    reps: usize,
    timeout_ns: u64,
    gpu_timed: bool,
) -> vk_native::Result<Summary> {
    let group = kernel.bind(&[src, dst])?;
    let groups = [groups, 1, 1];
    if gpu_timed {
        let compute = (Access::COMPUTE_WRITE, Access::COMPUTE_WRITE | Access::COMPUTE_READ);
        let bytes = factor * (words as u64 * 16) as f64;
        let rate = gpu_batch_rate(rec, reps, timeout_ns, compute, bytes, |r| {
            r.dispatch(&group, &CopyVec4Params { n: words }.words(), groups)
        })?;
        if let Some(rate) = rate {
            return Ok(rate);
        }
    }
    let compute = (Access::COMPUTE_WRITE, Access::COMPUTE_WRITE | Access::COMPUTE_READ);
    batch_rate(rec, reps, timeout_ns, compute, factor * (words as u64 * 16) as f64, |r| {
        r.dispatch(&group, &CopyVec4Params { n: words }.words(), groups)
    })
}
