//! Objects made here (imported slot buffers, semaphores, the pipeline, bind groups) hold a clone
//! of the `wgpu::Device`, so the VkDevice outlives them; they are destroyed only after the
//! submissions that use them completed, as wgpu itself reports it (`SubmissionIndex`,
//! `Queue::on_submitted_work_done`), not as a semaphore of ours says: a submit from another
//! thread between staging our semaphores and our submit would take them (the ordering contract
//! forbids it), and would then make a round's sums wrong, but never free what the GPU uses.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use wgpu_hal::Device as _;

use super::kernel::destroy_kernel;
use super::shared::VkApi;
use super::EmbeddedMember;
use crate::error::{NativeError, Result};

impl EmbeddedMember {
    /// Releases the resources of submissions wgpu reports done (polling the device once).
    pub fn recycle(&mut self) -> Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        self.shared
            .device
            .poll(wgpu::PollType::Poll)
            .map_err(|e| NativeError::Unsupported(format!("wgpu device poll: {e}")))?;
        while self.pending.front().is_some_and(|p| p.done.load(Ordering::Acquire)) {
            let mut p = self.pending.pop_front().expect("checked");
            self.destroy_bind_groups(&mut p.bind_groups);
        }
        Ok(())
    }

    /// Destroys the bind groups of a submission that completed (or never was submitted).
    pub(super) fn destroy_bind_groups(&self, groups: &mut Vec<wgpu_hal::vulkan::BindGroup>) {
        if groups.is_empty() {
            return;
        }
        // SAFETY: as in `make_kernel`.
        if let Some(d) = unsafe { self.shared.device.as_hal::<VkApi>() } {
            for bg in groups.drain(..) {
                // SAFETY: the submission that used it completed (wgpu said so), or never ran.
                unsafe { d.destroy_bind_group(bg) };
            }
        }
    }

    /// Waits until every submission of this member completed, up to `timeout_ns`; `Ok(false)`
    /// when the time ran out.
    pub fn wait_idle(&mut self, timeout_ns: u64) -> Result<bool> {
        let Some(last) = self.pending.back().map(|p| p.index.clone()) else { return Ok(true) };
        let timeout = Some(Duration::from_nanos(timeout_ns));
        match self.shared.device.poll(wgpu::PollType::Wait { submission_index: Some(last), timeout }) {
            Ok(_) => {
                // The callbacks run inside the poll: every flag up to `last` is set now.
                self.recycle()?;
                Ok(self.pending.is_empty())
            }
            Err(wgpu::PollError::Timeout) => Ok(false),
            Err(e) => Err(NativeError::Unsupported(format!("wgpu device poll: {e}"))),
        }
    }
}

impl Drop for EmbeddedMember {
    fn drop(&mut self) {
        // Pending work uses our pipeline and bind groups: wait for it. The caller signalled
        // every timeline it submitted a wait for, so this terminates.
        let start = Instant::now();
        loop {
            match self.wait_idle(1_000_000_000) {
                Ok(true) => break,
                Ok(false) if start.elapsed() < Duration::from_secs(60) => log::warn!(
                    "crossgpu embed: waiting for {} to finish ({} s)",
                    self.shared.name,
                    start.elapsed().as_secs()
                ),
                // Out of time, or wgpu's poll failed (the work's state unknown): the device
                // itself must go idle before its objects go.
                _ => {
                    log::error!("crossgpu embed: waiting for {} to go idle", self.shared.name);
                    // SAFETY: last resort; wgpu does not submit from our thread meanwhile.
                    let _ = unsafe { self.shared.raw.device_wait_idle() };
                    break;
                }
            }
        }
        let mut pending = std::mem::take(&mut self.pending);
        for p in pending.iter_mut() {
            // The work completed (waited above) or the device is idle.
            self.destroy_bind_groups(&mut p.bind_groups);
        }
        for k in &mut self.kernels {
            destroy_kernel(&self.shared, k);
        }
    }
}
