//! [`HostAllocation`] imported into one embedded member's device as a storage buffer
//! ([`EmbeddedSlots`]), destroyed when the last submission that uses it let go of it.

use std::sync::Arc;

use ash::vk;

use super::shared::Shared;
use crate::error::Result;
use crate::host::HostAllocation;

struct SlotsInner {
    hal: Option<wgpu_hal::vulkan::Buffer>,
    buffer: vk::Buffer,
    memory: vk::DeviceMemory,
    size: u64,
    shared: Arc<Shared>,
    // Last: dropped after the buffer and memory over it are destroyed.
    _host: Arc<HostAllocation>,
}

impl Drop for SlotsInner {
    fn drop(&mut self) {
        self.hal.take();
        // SAFETY: pending submissions that use the buffer hold this value alive, so none is
        // pending; the buffer is destroyed before its memory.
        unsafe {
            self.shared.raw.destroy_buffer(self.buffer, None);
            self.shared.raw.free_memory(self.memory, None);
        }
    }
}

/// [`HostAllocation`] imported into one embedded member's device as a storage buffer.
#[derive(Clone)]
pub struct EmbeddedSlots(Arc<SlotsInner>);

impl EmbeddedSlots {
    /// Size in bytes: all of the imported [`HostAllocation`].
    pub fn size(&self) -> u64 {
        self.0.size
    }

    /// Imports all of `host` into `s`'s device.
    pub(super) fn import(s: &Arc<Shared>, host: &Arc<HostAllocation>) -> Result<Self> {
        let (buffer, memory) =
            crate::host::import_host_allocation(&s.raw, &s.host_memory, &s.mem_props, s.min_align, host)?;
        // SAFETY: wgpu-hal only reads the handle for bindings and copies; we destroy it ourselves.
        let hal = unsafe { wgpu_hal::vulkan::Buffer::from_raw(buffer) };
        Ok(EmbeddedSlots(Arc::new(SlotsInner {
            hal: Some(hal),
            buffer,
            memory,
            size: host.len(),
            shared: s.clone(),
            _host: host.clone(),
        })))
    }

    /// Whether these slots were imported into the device `s` describes.
    pub(super) fn is_of(&self, s: &Shared) -> bool {
        self.0.shared.raw.handle() == s.raw.handle()
    }

    pub(super) fn hal(&self) -> &wgpu_hal::vulkan::Buffer {
        self.0.hal.as_ref().expect("alive")
    }
}
