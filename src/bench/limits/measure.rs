//! [`measure`]: every limit of one member's device, as [`Limits`].

use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;
use vk_native::{
    Access, BindRange, Buffer, BufferUsage, GpuBuffer, HostAllocation, ImportedBuffer, Recorder, SubmitInfo,
    TimelineSemaphore,
};

use super::poll::poll_steps;
use super::timing::{
    batch_rate, copy_kernel_rate, err, gated_chain, one_per_thread, open_and_spin, Chain, RECORDED,
};
use crate::bench::{summarize, Summary};
use crate::error::{Error, Result};
use crate::group::Member;
use crate::kernels::{CopyVec4Params, ImmediateWords, COPY_VEC4};

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
        copy_kernel_rate(
            &mut rec,
            &kernel,
            (src, dst),
            words,
            one_per_thread(words),
            factor,
            reps,
            timeout,
            false,
        )
        .map_err(&e)
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
