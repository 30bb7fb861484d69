//! How the work is ordered against the application's work (the contract `crossgpu::embed`
//! documents): every command buffer made here is recorded through
//! `wgpu::CommandEncoder::as_hal_mut` (raw commands only) and submitted with `queue.submit`,
//! so wgpu serialises the VkQueue and the submission lands in queue order between the
//! application's submits. Timeline semaphore waits and signals are attached to that one
//! submission through wgpu-hal's `Queue::add_wait_semaphore`/`add_signal_semaphore`. wgpu-core
//! does not track raw use of a buffer, so every command buffer starts with a global memory
//! barrier (all earlier writes → its reads and writes) and ends with one (its writes → any later
//! access).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use ash::vk;

use super::shared::{Shared, VkApi};
use crate::error::{NativeError, Result};
use crate::semaphore::TimelineSemaphore;

pub(super) fn global_barrier(
    raw: &ash::Device,
    cmd: vk::CommandBuffer,
    src_stage: vk::PipelineStageFlags,
    src: vk::AccessFlags,
    dst_stage: vk::PipelineStageFlags,
    dst: vk::AccessFlags,
) {
    let mb = [vk::MemoryBarrier::default().src_access_mask(src).dst_access_mask(dst)];
    // SAFETY: `cmd` is recording (lent by wgpu's as_hal_mut); a plain memory barrier outside any
    // render pass is valid anywhere in a compute-capable command buffer.
    unsafe {
        raw.cmd_pipeline_barrier(cmd, src_stage, dst_stage, vk::DependencyFlags::empty(), &mb, &[], &[])
    };
}

pub(super) const ALL_ACCESS: vk::AccessFlags = vk::AccessFlags::from_raw(
    vk::AccessFlags::MEMORY_READ.as_raw()
        | vk::AccessFlags::MEMORY_WRITE.as_raw()
        | vk::AccessFlags::HOST_READ.as_raw()
        | vk::AccessFlags::HOST_WRITE.as_raw(),
);

/// Records `f` into a fresh wgpu command encoder (raw commands only) between a leading and
/// a trailing global barrier, attaches `wait` and `signal` (timelines of this device) and
/// submits it after `claim` ([`EmbeddedMember::claim`]) with the application's queue;
/// returns wgpu's index of the submission and the flag wgpu sets when it is done.
///
/// [`EmbeddedMember::claim`]: super::EmbeddedMember::claim
pub(super) fn submit_raw(
    s: &Shared,
    claim: wgpu::CommandBuffer,
    wait: Option<(&TimelineSemaphore, u64)>,
    signal: Option<(&TimelineSemaphore, u64)>,
    f: impl FnOnce(&ash::Device, &mut wgpu_hal::vulkan::CommandEncoder),
) -> Result<(wgpu::SubmissionIndex, Arc<AtomicBool>)> {
    let mut encoder = s
        .device
        .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("crossgpu all-reduce") });
    // SAFETY: the closure records only into the lent encoder, neither ends nor destroys it,
    // and does not touch the wgpu encoder meanwhile; every resource it uses is kept alive in
    // `pending` until wgpu reports the submission done. wgpu-core does not track the raw
    // use, hence the global barriers at both ends.
    let recorded = unsafe {
        encoder.as_hal_mut::<VkApi, _, _>(|enc| {
            let Some(enc) = enc else { return false };
            let cmd = enc.raw_handle();
            global_barrier(
                &s.raw,
                cmd,
                vk::PipelineStageFlags::ALL_COMMANDS | vk::PipelineStageFlags::HOST,
                ALL_ACCESS,
                vk::PipelineStageFlags::ALL_COMMANDS,
                ALL_ACCESS,
            );
            f(&s.raw, enc);
            global_barrier(
                &s.raw,
                cmd,
                vk::PipelineStageFlags::ALL_COMMANDS,
                ALL_ACCESS,
                vk::PipelineStageFlags::ALL_COMMANDS | vk::PipelineStageFlags::HOST,
                ALL_ACCESS,
            );
            true
        })
    };
    if !recorded {
        return Err(NativeError::Unsupported("the wgpu command encoder is not a Vulkan one".into()));
    }
    let cmd_buf = encoder.finish();
    {
        // SAFETY: the guard lends wgpu-hal's queue to stage semaphores for the next submit,
        // which is ours, right below (the ordering contract forbids concurrent submits to
        // this queue from other threads during an all-reduce; one would take these
        // semaphores, making the round's sums wrong but freeing nothing early, since
        // lifetimes follow wgpu's own submission tracking).
        let q = unsafe { s.queue.as_hal::<VkApi>() }
            .ok_or_else(|| NativeError::Unsupported("not a Vulkan queue".into()))?;
        if let Some((sem, v)) = wait {
            q.add_wait_semaphore(sem.raw(), Some(v), vk::PipelineStageFlags::ALL_COMMANDS);
        }
        if let Some((sem, v)) = signal {
            sem.mark_gpu_signalled();
            q.add_signal_semaphore(sem.raw(), Some(v));
        }
    }
    let index = s.queue.submit([claim, cmd_buf]);
    let done = Arc::new(AtomicBool::new(false));
    let flag = done.clone();
    s.queue.on_submitted_work_done(move || flag.store(true, Ordering::Release));
    Ok((index, done))
}
