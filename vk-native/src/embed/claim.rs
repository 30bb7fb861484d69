//! The application's buffer is checked by wgpu before any raw command names it: each submission
//! starts with a command buffer holding a zero-sized `clear_buffer` of it, recorded under an
//! error scope, which wgpu validates (a live buffer of this device, with COPY_DST) and which
//! makes wgpu-core track the buffer as used by the submission, so the application's
//! `Buffer::destroy` waits for it.

use ash::vk;

use super::shared::VkApi;
use super::EmbeddedMember;
use crate::error::{NativeError, Result};

impl EmbeddedMember {
    /// The command buffer that opens every submission naming `buffers`: a zero-sized
    /// `clear_buffer` of each, which wgpu validates (a live buffer of this device, with
    /// COPY_DST: an error here, before any raw command names the buffer) and which makes
    /// wgpu-core track the buffer as used by the submission (so a `destroy()` waits for it).
    /// Returns the buffers' raw handles, valid while the submission is pending.
    pub(super) fn claim(&self, buffers: &[&wgpu::Buffer]) -> Result<(wgpu::CommandBuffer, Vec<vk::Buffer>)> {
        let device = &self.shared.device;
        let scope = device.push_error_scope(wgpu::ErrorFilter::Validation);
        let mut encoder =
            device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("crossgpu claim") });
        for b in buffers {
            encoder.clear_buffer(b, 0, Some(0));
        }
        let claim = encoder.finish();
        if let Some(e) = pollster::block_on(scope.pop()) {
            return Err(NativeError::Unsupported(format!(
                "the buffer is not a live buffer of {} with COPY_DST usage: {e}",
                self.shared.name
            )));
        }
        let mut raw = Vec::with_capacity(buffers.len());
        for b in buffers {
            // SAFETY: the guard lends wgpu-hal's buffer only for reading its handle and is
            // dropped at once (it holds wgpu's snatch lock); the claim above keeps the buffer
            // alive for the submission it opens, and `Pending` keeps a `wgpu::Buffer` clone
            // beside it.
            let guard = unsafe { b.as_hal::<VkApi>() }.ok_or_else(|| {
                NativeError::Unsupported("buffer is destroyed or not a Vulkan buffer".into())
            })?;
            // SAFETY: live buffer (guard held).
            raw.push(unsafe { guard.raw_handle() });
        }
        Ok((claim, raw))
    }
}
