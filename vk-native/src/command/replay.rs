//! A [`Replay`] is work recorded once into a command buffer of its own
//! ([`Recorder::begin_capture`] .. [`Recorder::end_capture`]) and submitted any number of times
//! ([`SubmitInfo::replay`]): the host pays for recording it once.
//!
//! [`SubmitInfo::replay`]: super::SubmitInfo::replay

use std::sync::Arc;

use ash::vk;

use super::recorder::{Capture, KeepAlive, Recorder};
use crate::buffer::GpuUse;
use crate::device::Device;
use crate::error::{map_vk, NativeError, Result};

/// Work recorded once by a [`Recorder`] ([`Recorder::begin_capture`]), submitted again with
/// every [`SubmitInfo::replay`] that names it. Its commands, their resources and their order
/// are fixed at recording: whatever should change between submissions must be read by the
/// kernels from buffers (a counter the GPU advances, say). Clones share the recording.
///
/// [`SubmitInfo::replay`]: super::SubmitInfo::replay
#[derive(Clone)]
pub struct Replay(pub(super) Arc<ReplayInner>);

pub(super) struct ReplayInner {
    pub(super) device: Device,
    pub(super) queue_index: u32,
    pool: vk::CommandPool,
    pub(super) cmd: vk::CommandBuffer,
    pub(super) dispatches: u64,
    commands: usize,
    /// Host-mapped buffers the recording copies to or from: each submission of it notes them.
    pub(super) uses: Vec<Arc<GpuUse>>,
    _keep: Vec<KeepAlive>,
}

impl Drop for ReplayInner {
    fn drop(&mut self) {
        crate::live::dec(&crate::live::RECORDINGS);
        // SAFETY: every submission of the command buffer holds this value alive until it
        // completed, so nothing pending uses it; destroying the pool frees the buffer.
        unsafe { self.device.raw().destroy_command_pool(self.pool, None) };
    }
}

impl Replay {
    /// Compute dispatches in the recording.
    pub fn dispatches(&self) -> u64 {
        self.0.dispatches
    }

    /// Commands (dispatches, copies, fills) in the recording.
    pub fn commands(&self) -> usize {
        self.0.commands
    }
}

impl std::fmt::Debug for Replay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replay").field("dispatches", &self.0.dispatches).finish()
    }
}

impl Recorder {
    /// Starts a recording: every command from now until [`Recorder::end_capture`] goes into a
    /// command buffer of its own, which runs only when a submit names it
    /// ([`SubmitInfo::replay`]), as many times as it is named. Nothing recorded before stays
    /// in the open command buffer.
    ///
    /// [`SubmitInfo::replay`]: super::SubmitInfo::replay
    pub fn begin_capture(&mut self) -> Result<()> {
        if self.capture.is_some() {
            return Err(NativeError::Unsupported("begin_capture while a recording is in progress".into()));
        }
        self.check_lost()?;
        let d = self.device.raw();
        let info = vk::CommandPoolCreateInfo::default().queue_family_index(0);
        // SAFETY: a new pool of this device, for family 0 (every queue of a Device).
        let pool = unsafe { d.create_command_pool(&info, None) }.map_err(map_vk("vkCreateCommandPool"))?;
        let alloc = vk::CommandBufferAllocateInfo::default()
            .command_pool(pool)
            .level(vk::CommandBufferLevel::PRIMARY)
            .command_buffer_count(1);
        let begin =
            vk::CommandBufferBeginInfo::default().flags(vk::CommandBufferUsageFlags::SIMULTANEOUS_USE);
        // SAFETY: the buffer is allocated from the new pool and begun once; on failure the
        // pool (and the buffer with it) is destroyed unused.
        let cmd = unsafe {
            d.allocate_command_buffers(&alloc)
                .and_then(|c| d.begin_command_buffer(c[0], &begin).map(|()| c[0]))
        };
        match cmd {
            Ok(cmd) => {
                crate::live::inc(&crate::live::RECORDINGS);
                self.capture = Some(Capture {
                    pool,
                    cmd,
                    keep: Vec::new(),
                    uses: Vec::new(),
                    dispatches: 0,
                    commands: 0,
                });
                Ok(())
            }
            Err(e) => {
                // SAFETY: nothing of the pool is in use.
                unsafe { d.destroy_command_pool(pool, None) };
                Err(map_vk("vkAllocateCommandBuffers/vkBeginCommandBuffer")(e))
            }
        }
    }

    /// Ends the recording begun by [`Recorder::begin_capture`].
    pub fn end_capture(&mut self) -> Result<Replay> {
        let Some(c) = self.capture.take() else {
            return Err(NativeError::Unsupported("end_capture without begin_capture".into()));
        };
        let inner = ReplayInner {
            device: self.device.clone(),
            queue_index: self.queue_index,
            pool: c.pool,
            cmd: c.cmd,
            dispatches: c.dispatches,
            commands: c.commands,
            uses: c.uses,
            _keep: c.keep,
        };
        // SAFETY: the buffer is recording (begun in begin_capture); if ending fails, dropping
        // `inner` destroys the pool, and nothing was submitted.
        unsafe { self.device.raw().end_command_buffer(inner.cmd) }.map_err(map_vk("vkEndCommandBuffer"))?;
        Ok(Replay(Arc::new(inner)))
    }

    /// Drops a recording in progress (after an error while recording it), if any.
    pub fn cancel_capture(&mut self) {
        if let Some(c) = self.capture.take() {
            crate::live::dec(&crate::live::RECORDINGS);
            // SAFETY: never submitted; destroying the pool frees the recording buffer.
            unsafe { self.device.raw().destroy_command_pool(c.pool, None) };
        }
    }

    /// Whether a recording is in progress.
    pub fn capturing(&self) -> bool {
        self.capture.is_some()
    }
}
