//! The limits the all-reduce and the kernels are measured against, on one member's device:
//! copy bandwidth between device memory and imported host memory (both ways), device-local
//! bandwidth through a WGSL copy kernel and through vkCmdCopyBuffer, the round trip of a
//! host-signalled timeline semaphore, DevicePoll's wake (a kernel polling mapped device memory
//! that the host stores to), the CPU cost of one empty submit, and the GPU cost of a submit
//! boundary.

use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;
use vk_native::{
    Access, BindRange, Buffer, BufferUsage, DeviceType, GpuBuffer, HostAllocation, ImportedBuffer,
    MappedWords, Recorder, SubmitInfo, TimelineSemaphore,
};

use super::{summarize, Summary};
use crate::error::{Error, Result};
use crate::group::Member;
use crate::kernels::{CopyVec4Params, ImmediateWords, PollWaitParams, COPY_VEC4, POLL_WAIT, POLL_WAIT_CPU};

/// What [`measure`] found.
#[derive(Debug, Clone, Serialize)]
pub struct Limits {
    /// The member measured (its label).
    pub device: String,
    /// Size of each buffer copied, bytes.
    pub bytes: u64,
    /// Device memory → imported host memory, vkCmdCopyBuffer, GB/s.
    pub device_to_host_gbps: Summary,
    /// Imported host memory → device memory, GB/s.
    pub host_to_device_gbps: Summary,
    /// Both directions at once: in each step one vkCmdCopyBuffer device → host and one host →
    /// device (half the buffer each), with no barrier between the two; bytes of both per second,
    /// GB/s. Near the sum of the two one-way rates means the link's directions overlap.
    pub duplex_copy_gbps: Summary,
    /// Imported host memory → device memory read by the WGSL `copy_vec4` kernel (what phase B
    /// does when it reads the peers' slots straight from host memory), GB/s.
    pub host_read_kernel_gbps: Summary,
    /// Device memory → imported host memory written by the `copy_vec4` kernel, GB/s.
    pub host_write_kernel_gbps: Summary,
    /// Both directions at once through kernels: one `copy_vec4` dispatch reading half the
    /// imported buffer into device memory and one writing the other half from device memory,
    /// no barrier between them; bytes of both per second, GB/s.
    pub duplex_kernel_gbps: Summary,
    /// Device-local copy with the WGSL `copy_vec4` kernel, bytes read + written per second, GB/s.
    pub device_copy_kernel_gbps: Summary,
    /// Device-local copy with vkCmdCopyBuffer, read + written, GB/s.
    pub device_copy_command_gbps: Summary,
    /// Host signals, the GPU waits and signals back, the host spins: µs.
    pub timeline_round_trip_us: Summary,
    /// DevicePoll's wake, per step of a chain of `poll_wait` kernels in one submit: each
    /// stores its round into an arrival word in host memory and polls a `go` word in mapped
    /// device-local memory; the host spins on the arrival and stores `go`. A step is one
    /// host ↔ GPU round trip plus a barrier and a dispatch: what a DevicePoll round pays on
    /// top of its copies (with the relay hop to a second GPU instead of back to this one): µs.
    /// NaN where the device has no device-local host-visible memory.
    pub poll_wake_step_us: Summary,
    /// CPU time of one vkQueueSubmit with one signal and no command buffer: µs.
    pub empty_submit_us: Summary,
    /// CPU time to record one dispatch (pipeline, bind group, immediates, dispatch) of a
    /// bound kernel through the recorder, over [`RECORDED`] in one command buffer: µs.
    pub record_dispatch_us: Summary,
    /// CPU time to record one global memory barrier, the same way: µs.
    pub record_barrier_us: Summary,
    /// CPU time to record one dispatch through the member (bind group looked up in its cache,
    /// hazard tracking, then the recorder), as the all-reduce and the kernels do, each
    /// dependent on the one before (so with the barrier hazard tracking places): µs.
    pub record_member_dispatch_us: Summary,
    /// GPU time per step of [`CHAIN`] steps queued behind a gate the host then opens, each step
    /// in its own submit that waits on the gate and signals a timeline semaphore (as a
    /// member's all-reduce submit does); a step is a 32 KiB `copy_vec4` from device memory into
    /// imported host memory and a barrier to the host: µs.
    pub gpu_submit_step_us: Summary,
    /// The same steps all in one submit: µs per step. The difference to
    /// `gpu_submit_step_us` is what a submit boundary costs the GPU.
    pub gpu_dispatch_step_us: Summary,
    /// A submit per step, but only the first waits on the gate and none signals a timeline
    /// besides the recorder's own progress: µs per step.
    pub gpu_submit_plain_step_us: Summary,
    /// Steps alternating between two recorders of the queue, each pair one
    /// `Recorder::submit_together` batch (waiting on the gate, signalling a timeline), as
    /// members sharing a queue submit: µs per step.
    pub gpu_joint_step_us: Summary,
}

impl Limits {
    /// Every figure with what it measures and its unit (`GB/s` or `us`), in a readable order:
    /// what `crossgpu bench limits` prints as a table.
    pub fn rows(&self) -> [(&'static str, &Summary, &'static str); 18] {
        [
            ("device -> host memory, vkCmdCopyBuffer", &self.device_to_host_gbps, "GB/s"),
            ("host memory -> device, vkCmdCopyBuffer", &self.host_to_device_gbps, "GB/s"),
            ("both directions at once, vkCmdCopyBuffer", &self.duplex_copy_gbps, "GB/s"),
            ("host memory -> device, copy kernel", &self.host_read_kernel_gbps, "GB/s"),
            ("device -> host memory, copy kernel", &self.host_write_kernel_gbps, "GB/s"),
            ("both directions at once, copy kernels", &self.duplex_kernel_gbps, "GB/s"),
            ("device-local copy, kernel (read + written)", &self.device_copy_kernel_gbps, "GB/s"),
            ("device-local copy, vkCmdCopyBuffer (read + written)", &self.device_copy_command_gbps, "GB/s"),
            ("host-signalled timeline round trip", &self.timeline_round_trip_us, "us"),
            ("DevicePoll wake: host -> polling kernel -> host, a step", &self.poll_wake_step_us, "us"),
            ("CPU time of an empty vkQueueSubmit", &self.empty_submit_us, "us"),
            ("CPU time to record a dispatch", &self.record_dispatch_us, "us"),
            ("CPU time to record a barrier", &self.record_barrier_us, "us"),
            (
                "CPU time to record a dependent dispatch through a member",
                &self.record_member_dispatch_us,
                "us",
            ),
            ("GPU time per step, a submit each", &self.gpu_submit_step_us, "us"),
            ("GPU time per step, all in one submit", &self.gpu_dispatch_step_us, "us"),
            ("GPU time per step, plain submits", &self.gpu_submit_plain_step_us, "us"),
            ("GPU time per step, joint submits of two recorders", &self.gpu_joint_step_us, "us"),
        ]
    }
}

/// Commands recorded per sample of the recording costs.
pub const RECORDED: usize = 2000;

/// Steps in the gated chains (below the recorder's in-flight limit: nothing may wait for the
/// GPU while the gate is closed).
pub const CHAIN: usize = 64;

/// Signals `gate` to `value` from the host, then spins until `done` reaches `target`; returns
/// the time from the signal, or a timeout naming `what` after `timeout_ms`.
fn open_and_spin(
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
enum Chain<'a> {
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
fn gated_chain(
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

fn err(m: &Member) -> impl Fn(vk_native::NativeError) -> Error + '_ {
    move |e| m.shared.err(e)
}

fn timed(rec: &mut Recorder, timeout_ns: u64) -> vk_native::Result<f64> {
    let t = Instant::now();
    let v = rec.submit(&SubmitInfo::default())?;
    if !rec.wait(v, timeout_ns)? {
        return Err(vk_native::NativeError::Timeout(timeout_ns / 1_000_000));
    }
    Ok(t.elapsed().as_secs_f64())
}

/// Steps recorded per timed batch.
const STEPS: usize = 4;

/// GB/s of `reps` timed batches, after one untimed: each batch is [`STEPS`] steps recorded by
/// `step`, each followed by the `barrier` (source and destination access), and moves
/// `bytes_per_step` per step.
fn batch_rate(
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
fn copy_kernel_rate(
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

/// The smallest buffer [`measure`] takes: the gated chains' steps are 32 KiB of it.
pub const MIN_BYTES: u64 = 64 << 10;

/// Measures the limits on `m`'s device with buffers of `bytes` (e.g. 256 MiB), `reps`
/// repetitions of each. `bytes` must be a multiple of 4096 (and of the device's
/// `minImportedHostPointerAlignment`) from [`MIN_BYTES`] up to the device's
/// `maxStorageBufferRange` (the copy kernel binds whole buffers).
pub fn measure(m: &Member, bytes: u64, reps: usize) -> Result<Limits> {
    let e = err(m);
    let dev = m.device();
    let caps = &dev.info().caps;
    let align = caps.min_imported_host_pointer_alignment.max(4096);
    if bytes < MIN_BYTES || !bytes.is_multiple_of(align) {
        return Err(Error::InvalidArgument(format!(
            "limits: buffers of {bytes} bytes; they must be a multiple of {align} bytes and at least {MIN_BYTES}"
        )));
    }
    if bytes > caps.max_storage_buffer_range {
        return Err(Error::InvalidArgument(format!(
            "limits: buffers of {bytes} bytes, more than {} binds in one buffer (maxStorageBufferRange {} bytes)",
            m.label(),
            caps.max_storage_buffer_range
        )));
    }
    let timeout = m.shared.timeout_ms * 1_000_000;
    let usage = BufferUsage { copy_src: true, copy_dst: true };
    let a = Buffer::new(dev, bytes, usage, "bench a").map_err(&e)?;
    let b = Buffer::new(dev, bytes, usage, "bench b").map_err(&e)?;
    let host = Arc::new(HostAllocation::new(bytes, align).map_err(&e)?);
    let imported = ImportedBuffer::new(dev, &host).map_err(&e)?;
    let mut rec = Recorder::new(dev, m.shared.queue_index).map_err(&e)?;

    // Copies through the copy engine. `factor`: 2 when both sides are device memory (read +
    // written), 1 across the bus.
    let transfer = (Access::TRANSFER_WRITE, Access::TRANSFER_WRITE | Access::TRANSFER_READ);
    let compute = (Access::COMPUTE_WRITE, Access::COMPUTE_WRITE | Access::COMPUTE_READ);
    let mut copy_rate = |src: &dyn GpuBuffer, dst: &dyn GpuBuffer, factor: f64| {
        batch_rate(&mut rec, reps, timeout, transfer, factor * bytes as f64, |r| {
            r.copy(src, 0, dst, 0, bytes)
        })
        .map_err(&e)
    };
    let device_to_host_gbps = copy_rate(&a, &imported, 1.0)?;
    let host_to_device_gbps = copy_rate(&imported, &a, 1.0)?;
    let device_copy_command_gbps = copy_rate(&a, &b, 2.0)?;
    let half = bytes / 2;
    let duplex_copy_gbps = batch_rate(&mut rec, reps, timeout, transfer, (2 * half) as f64, |r| {
        r.copy(&a, 0, &imported, 0, half)?;
        r.copy(&imported, half, &b, 0, half)
    })
    .map_err(&e)?;

    // The same through the WGSL `copy_vec4` kernel.
    let words = (bytes / 16).min(dev.info().caps.max_storage_buffer_range / 16) as u32;
    let kernel = m.shared.pipelines.get(COPY_VEC4.kernel()?).map_err(&e)?;
    let groups = |words: u32| [(words as usize).div_ceil(256).clamp(1, 65_535) as u32, 1, 1];
    let mut kernel_rate = |src: &dyn GpuBuffer, dst: &dyn GpuBuffer, factor: f64| -> Result<Summary> {
        copy_kernel_rate(&mut rec, &kernel, (src, dst), words, factor, reps, timeout).map_err(&e)
    };
    let device_copy_kernel_gbps = kernel_rate(&a, &b, 2.0)?;
    let host_read_kernel_gbps = kernel_rate(&imported, &b, 1.0)?;
    let host_write_kernel_gbps = kernel_rate(&a, &imported, 1.0)?;
    let half_words = ((half / 16).min(dev.info().caps.max_storage_buffer_range / 16)) as u32;
    fn range(buffer: &dyn GpuBuffer, offset: u64, words: u32) -> BindRange<'_> {
        BindRange { buffer, offset, size: words as u64 * 16 }
    }
    let read_host =
        kernel.bind_ranges(&[range(&imported, half, half_words), range(&b, 0, half_words)]).map_err(&e)?;
    let write_host =
        kernel.bind_ranges(&[range(&a, 0, half_words), range(&imported, 0, half_words)]).map_err(&e)?;
    let duplex_kernel_gbps =
        batch_rate(&mut rec, reps, timeout, compute, (2 * half_words as u64 * 16) as f64, |r| {
            let imm = CopyVec4Params { n: half_words }.words();
            r.dispatch(&read_host, &imm, groups(half_words))?;
            r.dispatch(&write_host, &imm, groups(half_words))
        })
        .map_err(&e)?;

    // Host-signalled timeline round trip: the GPU's wait is submitted first, then the host
    // signals and spins until the GPU's signal arrives.
    let go = TimelineSemaphore::new(dev, 0).map_err(&e)?;
    let back = TimelineSemaphore::new(dev, 0).map_err(&e)?;
    let mut samples = Vec::new();
    for k in 1..=(reps * 100).max(200) as u64 {
        rec.submit(&SubmitInfo {
            wait_timeline: &[(&go, k)],
            signal_timeline: &[(&back, k)],
            ..Default::default()
        })
        .map_err(&e)?;
        std::thread::sleep(std::time::Duration::from_micros(200));
        let took = open_and_spin(&go, k, &back, k, m.shared.timeout_ms, "timeline round trip", &e)?;
        if k > 10 {
            samples.push(took.as_secs_f64() * 1e6);
        }
    }
    let timeline_round_trip_us = summarize(&samples);
    let poll_wake_step_us = if caps.device_local_host_visible {
        poll_steps(&[m], &mut [&mut rec], reps, timeout)?
    } else {
        summarize(&[])
    };

    let mut samples = Vec::new();
    for _ in 0..1000 {
        let t = Instant::now();
        rec.submit(&SubmitInfo::default()).map_err(&e)?;
        samples.push(t.elapsed().as_secs_f64() * 1e6);
    }
    let last = rec.submitted();
    rec.wait(last, timeout).map_err(&e)?;
    let empty_submit_us = summarize(&samples);

    // Recording costs: RECORDED commands into one command buffer, then submitted and waited
    // for (outside the timing). A 4-word copy, so the GPU's part is negligible.
    let tiny = kernel.bind_ranges(&[range(&a, 0, 1), range(&b, 0, 1)]).map_err(&e)?;
    let mut recording = |what: &mut dyn FnMut(&mut Recorder) -> Result<()>| -> Result<Summary> {
        let mut samples = Vec::new();
        for rep in 0..=reps.max(3) {
            let t = Instant::now();
            for _ in 0..RECORDED {
                what(&mut rec)?;
            }
            let took = t.elapsed();
            let v = rec.submit(&SubmitInfo::default()).map_err(&e)?;
            rec.wait(v, timeout).map_err(&e)?;
            if rep > 0 {
                samples.push(took.as_secs_f64() * 1e6 / RECORDED as f64);
            }
        }
        Ok(summarize(&samples))
    };
    let record_dispatch_us =
        recording(&mut |r| r.dispatch(&tiny, &CopyVec4Params { n: 4 }.words(), [1, 1, 1]).map_err(&e))?;
    let record_barrier_us = recording(&mut |r| {
        r.barrier(Access::COMPUTE_WRITE, Access::COMPUTE_WRITE | Access::COMPUTE_READ).map_err(&e)
    })?;
    let mut samples = Vec::new();
    let ranges = [range(&a, 0, 1), range(&b, 0, 1)];
    for rep in 0..=reps.max(3) {
        let t = Instant::now();
        for _ in 0..RECORDED {
            // Every dispatch writes what the one before wrote, as in a chain of dependent
            // kernels, so hazard tracking places a barrier each time.
            m.shared.dispatch_ranges(COPY_VEC4, &ranges, &[], &CopyVec4Params { n: 4 }, [1, 1, 1])?;
        }
        let took = t.elapsed();
        m.flush()?;
        m.synchronize()?;
        if rep > 0 {
            samples.push(took.as_secs_f64() * 1e6 / RECORDED as f64);
        }
    }
    let record_member_dispatch_us = summarize(&samples);

    // Submit boundaries on the GPU: 32 KiB steps into host memory, a submit each or one in all.
    let step_words = 32768 / 16;
    let small =
        kernel.bind_ranges(&[range(&a, 0, step_words), range(&imported, 0, step_words)]).map_err(&e)?;
    let gate = TimelineSemaphore::new(dev, 0).map_err(&e)?;
    let mut second = Recorder::new(dev, m.shared.queue_index).map_err(&e)?;
    let mut chains: [Vec<f64>; 4] = Default::default();
    let mut value = 0;
    for rep in 0..reps.max(3) + 1 {
        for (k, samples) in chains.iter_mut().enumerate() {
            let chain = match k {
                0 => Chain::Own { wait_and_signal_each: true },
                1 => Chain::One,
                2 => Chain::Own { wait_and_signal_each: false },
                _ => Chain::Joint(&mut second),
            };
            value += 1;
            let us = gated_chain(&mut rec, chain, &gate, value, m.shared.timeout_ms, |r| {
                r.dispatch(&small, &CopyVec4Params { n: step_words }.words(), groups(step_words))?;
                r.barrier(Access::COMPUTE_WRITE, Access::HOST_READ | Access::DEVICE_ALL)
            })?;
            if rep > 0 {
                samples.push(us);
            }
        }
    }
    let [per_submit, one_submit, plain, joint] = chains;
    rec.wait(rec.submitted(), timeout).map_err(&e)?;
    Ok(Limits {
        device: m.label().to_string(),
        bytes,
        device_to_host_gbps,
        duplex_copy_gbps,
        host_read_kernel_gbps,
        host_write_kernel_gbps,
        duplex_kernel_gbps,
        host_to_device_gbps,
        device_copy_kernel_gbps,
        device_copy_command_gbps,
        timeline_round_trip_us,
        poll_wake_step_us,
        empty_submit_us,
        record_dispatch_us,
        record_barrier_us,
        record_member_dispatch_us,
        gpu_submit_step_us: summarize(&per_submit),
        gpu_dispatch_step_us: summarize(&one_submit),
        gpu_submit_plain_step_us: summarize(&plain),
        gpu_joint_step_us: summarize(&joint),
    })
}

/// One device's side of a chain of `poll_wait` steps: its `go`/`abort`/`expired` words in mapped
/// device-local memory, its arrival word in imported host memory, the bound kernel.
struct PollChain {
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
fn poll_steps(
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
