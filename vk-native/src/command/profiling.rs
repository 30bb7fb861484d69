//! The recorder's profiling hooks: while it has a profile ([`crate::profile`]), a timestamp
//! after every dispatch and copy, in windows that each start with a command buffer.

use std::sync::Arc;

use ash::vk;

use super::recorder::{KeepAlive, Recorder};
use crate::error::{NativeError, Result};
use crate::profile::Profile;

impl Recorder {
    /// Starts profiling: from the next command buffer on, a timestamp after every dispatch and
    /// copy, up to `capacity` stamps per window (commands past that are not profiled). Only
    /// between command buffers (nothing recorded and not submitted), so a window starts with
    /// a command buffer.
    pub fn start_profile(&mut self, capacity: u32) -> Result<()> {
        if self.active.is_some() {
            return Err(NativeError::Unsupported(
                "start_profile with commands recorded: submit them first".into(),
            ));
        }
        self.profile = Some(Profile::new(&self.device, capacity)?);
        Ok(())
    }

    /// Stops profiling (the timestamps and their pool go); only between command buffers, as
    /// [`Recorder::start_profile`].
    pub fn stop_profile(&mut self) -> Result<()> {
        if self.active.is_some() {
            return Err(NativeError::Unsupported(
                "stop_profile with commands recorded: submit them first".into(),
            ));
        }
        self.profile = None;
        Ok(())
    }

    /// The GPU time (ns) each command of the window added, in recording order, with its name
    /// (the kernel's entry point, or "copy"); then a new window starts. Call it once the
    /// window's submits completed and nothing is recorded since; empty when not profiling.
    pub fn take_profile(&mut self) -> Result<Vec<(Arc<str>, f64)>> {
        if self.active.is_some() || self.progress.value()? < self.submitted {
            return Err(NativeError::Unsupported(
                "take_profile before the profiled work was submitted and completed".into(),
            ));
        }
        self.profile.as_mut().map_or(Ok(Vec::new()), Profile::take)
    }

    /// While profiling, starts a new profile window in the command buffer `encoder` just began
    /// if the window is empty, keeping the pool alive with it (in `keep`).
    pub(super) fn open_profile_window(
        &mut self,
        encoder: &wgpu_hal::vulkan::CommandEncoder,
        keep: &mut Vec<KeepAlive>,
    ) {
        if let Some(p) = self.profile.as_mut().filter(|p| p.used == 0) {
            // A new profile window: reset the pool and stamp its start.
            // SAFETY: the command buffer is recording, outside any pass; the pool is of
            // this device and kept alive with the command buffer.
            unsafe {
                let cb = encoder.raw_handle();
                let raw = self.device.raw();
                raw.cmd_reset_query_pool(cb, p.pool.raw, 0, p.pool.capacity);
                raw.cmd_write_timestamp(cb, vk::PipelineStageFlags::BOTTOM_OF_PIPE, p.pool.raw, 0);
            }
            p.used = 1;
            keep.push(p.pool.clone());
        }
    }

    /// While profiling, stamps the end of the command just recorded (named `name`) into the
    /// open command buffer.
    pub(super) fn stamp(&mut self, name: impl FnOnce() -> Arc<str>) {
        if self.capture.is_some() {
            // A recording runs many times; a profile window covers one.
            return;
        }
        let (Some(p), Some(a)) = (self.profile.as_mut(), self.active.as_mut()) else { return };
        if p.used == 0 || p.used >= p.pool.capacity {
            // The window began before this command buffer (not profiled), or is full.
            return;
        }
        // SAFETY: the command buffer is recording, outside any pass; the query was reset at the
        // window's start and is written once; the pool is kept alive with the command buffer.
        unsafe {
            self.device.raw().cmd_write_timestamp(
                a.encoder.raw_handle(),
                vk::PipelineStageFlags::BOTTOM_OF_PIPE,
                p.pool.raw,
                p.used,
            )
        };
        p.used += 1;
        p.names.push(name());
        a.keep.push(p.pool.clone());
    }
}
