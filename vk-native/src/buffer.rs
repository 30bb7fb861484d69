//! Device-local storage buffers and host-visible staging buffers, both made by wgpu-hal.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use wgpu_hal::Device as _;

use crate::device::{Device, DeviceId};
use crate::error::{map_hal_device, NativeError, Result};
use crate::semaphore::TimelineSemaphore;

/// The submissions that use a buffer the host reads or writes with plain copies (a
/// [`StagingBuffer`]): for each recorder's `progress` timeline, the value its latest such
/// submission signals. The recorder notes it when it submits; a host access while any is
/// pending is refused ([`GpuUse::check_idle`]), so the host never races the GPU on those bytes.
#[derive(Default)]
#[doc(hidden)]
pub struct GpuUse(Mutex<Vec<(TimelineSemaphore, u64)>>);

impl GpuUse {
    /// A submission signalling `progress` with `value` uses the buffer.
    pub(crate) fn note(&self, progress: &TimelineSemaphore, value: u64) {
        let mut uses = self.0.lock().unwrap_or_else(|p| p.into_inner());
        match uses.iter_mut().find(|(s, _)| s.raw() == progress.raw()) {
            Some(u) => u.1 = u.1.max(value),
            None => uses.push((progress.clone(), value)),
        }
    }

    /// Refuses `what` while a submission that uses the buffer has not completed.
    fn check_idle(&self, what: &str) -> Result<()> {
        let mut uses = self.0.lock().unwrap_or_else(|p| p.into_inner());
        for (s, v) in uses.iter() {
            if s.value()? < *v {
                return Err(NativeError::Unsupported(format!(
                    "{what}: a submitted copy that uses the staging buffer has not completed; wait for it first"
                )));
            }
        }
        uses.clear();
        Ok(())
    }
}

/// Identity of a buffer, unique in the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BufferId(pub u64);

static NEXT_BUFFER: AtomicU64 = AtomicU64::new(1);

pub(crate) fn next_buffer_id() -> BufferId {
    BufferId(NEXT_BUFFER.fetch_add(1, Ordering::Relaxed))
}

/// What a device-local buffer is used for, beyond being a storage buffer.
#[derive(Debug, Clone, Copy, Default)]
pub struct BufferUsage {
    /// The buffer can be the source of a copy (`COPY_SRC`), e.g. to read it back.
    pub copy_src: bool,
    /// The buffer can be the destination of a copy (`COPY_DST`), e.g. to upload into it.
    pub copy_dst: bool,
}

pub(crate) struct BufferInner {
    device: Device,
    hal: Option<wgpu_hal::vulkan::Buffer>,
    size: u64,
    id: BufferId,
}

impl BufferInner {
    fn new(device: &Device, hal: wgpu_hal::vulkan::Buffer, size: u64) -> Self {
        crate::live::inc(&crate::live::BUFFERS);
        Self { device: device.clone(), hal: Some(hal), size, id: next_buffer_id() }
    }
}

impl Drop for BufferInner {
    fn drop(&mut self) {
        crate::live::dec(&crate::live::BUFFERS);
        if let Some(b) = self.hal.take() {
            // SAFETY: the last reference is gone; every command buffer that used the buffer holds
            // a reference until its submission completed (see `Recorder`), so the GPU is done.
            unsafe { self.device.shared.hal.destroy_buffer(b) };
        }
    }
}

/// A device-local storage buffer. Clones share it; it is destroyed when the last clone and the
/// last command buffer that used it are gone.
#[derive(Clone)]
pub struct Buffer(pub(crate) Arc<BufferInner>);

impl std::fmt::Debug for Buffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Buffer").field("id", &self.0.id).field("size", &self.0.size).finish()
    }
}

impl Buffer {
    /// Allocates `size` bytes (at least 4) of device-local memory usable as a storage buffer.
    pub fn new(device: &Device, size: u64, usage: BufferUsage, label: &str) -> Result<Self> {
        let size = size.max(4).next_multiple_of(4);
        let mut uses = wgpu_types::BufferUses::STORAGE_READ_WRITE
            | wgpu_types::BufferUses::STORAGE_READ_ONLY
            | wgpu_types::BufferUses::UNIFORM;
        if usage.copy_src {
            uses |= wgpu_types::BufferUses::COPY_SRC;
        }
        if usage.copy_dst {
            uses |= wgpu_types::BufferUses::COPY_DST;
        }
        let desc = wgpu_hal::BufferDescriptor {
            label: Some(label),
            size,
            usage: uses,
            memory_flags: wgpu_hal::MemoryFlags::empty(),
        };
        // SAFETY: valid descriptor; the buffer is destroyed by `BufferInner::drop`.
        let hal = unsafe { device.shared.hal.create_buffer(&desc) }
            .map_err(map_hal_device("vkCreateBuffer"))
            .map_err(|e| match e {
                NativeError::OutOfDeviceMemory(_) => {
                    NativeError::OutOfDeviceMemory(format!(": {size} bytes for '{label}'"))
                }
                e => e,
            })?;
        Ok(Self(Arc::new(BufferInner::new(device, hal, size))))
    }
}

impl sealed::Sealed for Buffer {}

impl GpuBuffer for Buffer {
    fn hal(&self) -> &wgpu_hal::vulkan::Buffer {
        self.0.hal.as_ref().expect("buffer is alive")
    }
    fn size(&self) -> u64 {
        self.0.size
    }
    fn id(&self) -> BufferId {
        self.0.id
    }
    fn device_id(&self) -> DeviceId {
        self.0.device.id()
    }
    fn keep_alive(&self) -> Arc<dyn std::any::Any + Send + Sync> {
        self.0.clone()
    }
    fn uniform(&self) -> bool {
        true
    }
}

/// A host-visible buffer mapped for its whole life, for uploads (`upload = true`) or
/// read-backs, used by copies only (never bound to a kernel). The host reads or writes it only
/// when no submitted copy that uses it is pending: [`StagingBuffer::read`] and
/// [`StagingBuffer::write`] refuse otherwise.
pub struct StagingBuffer {
    inner: Arc<BufferInner>,
    ptr: NonNull<u8>,
    coherent: bool,
    uses: Arc<GpuUse>,
}

// SAFETY: the mapping pointer is only dereferenced through `&self`/`&mut self` methods that copy
// bytes; the buffer it points into lives as long as `inner`.
unsafe impl Send for StagingBuffer {}
// SAFETY: `read` copies out through a shared reference and `write` needs `&mut self`, so host
// threads never write while another reads; the GPU, the other writer, is excluded by
// `GpuUse::check_idle` before every host access.
unsafe impl Sync for StagingBuffer {}

impl StagingBuffer {
    /// Allocates and maps `size` bytes (at least 4, rounded up to a multiple of 4) of host-visible
    /// memory: an upload buffer (copy source, written by the host) when `upload`, else a read-back
    /// buffer (copy destination, read by the host). Fails with out-of-memory errors.
    pub fn new(device: &Device, size: u64, upload: bool) -> Result<Self> {
        let size = size.max(4).next_multiple_of(4);
        let usage = if upload {
            wgpu_types::BufferUses::MAP_WRITE | wgpu_types::BufferUses::COPY_SRC
        } else {
            wgpu_types::BufferUses::MAP_READ | wgpu_types::BufferUses::COPY_DST
        };
        let desc = wgpu_hal::BufferDescriptor {
            label: Some(if upload { "crossgpu upload" } else { "crossgpu readback" }),
            size,
            usage,
            memory_flags: wgpu_hal::MemoryFlags::PREFER_COHERENT,
        };
        let dev = &device.shared.hal;
        // SAFETY: valid descriptor; destroyed by `BufferInner::drop`.
        let hal = unsafe { dev.create_buffer(&desc) }.map_err(map_hal_device("vkCreateBuffer"))?;
        // SAFETY: the buffer was created with a MAP usage and is not mapped yet; it stays mapped
        // until destruction (wgpu-hal's destroy frees the allocation with its mapping).
        let mapping = unsafe { dev.map_buffer(&hal, 0..size) }.map_err(map_hal_device("vkMapMemory"))?;
        Ok(Self {
            inner: Arc::new(BufferInner::new(device, hal, size)),
            ptr: mapping.ptr,
            coherent: mapping.is_coherent,
            uses: Arc::default(),
        })
    }

    /// Copies `data` into the buffer at `offset` and makes it visible to the device. Refused
    /// while a submitted copy that uses the buffer has not completed.
    pub fn write(&mut self, offset: u64, data: &[u8]) -> Result<()> {
        let end = offset.checked_add(data.len() as u64).filter(|&e| e <= self.inner.size);
        let end = end.ok_or_else(|| NativeError::Unsupported("staging write out of range".into()))?;
        self.uses.check_idle("staging write")?;
        // SAFETY: the range is inside the mapping (checked above); `&mut self` excludes host
        // readers, and no submission that uses the buffer is pending (checked above).
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.as_ptr().add(offset as usize), data.len())
        };
        if !self.coherent {
            // SAFETY: the range is mapped.
            unsafe {
                self.inner.device.shared.hal.flush_mapped_ranges(self.hal(), std::iter::once(offset..end))
            };
        }
        Ok(())
    }

    /// Hands `fill` the buffer's bytes `offset .. offset + len` to write (for example a file's
    /// positioned read straight into the mapping, with no copy in between), then makes them
    /// visible to the device; returns what `fill` returns. Refused, before `fill` runs, while a
    /// submitted copy that uses the buffer has not completed. `fill` may read the bytes too:
    /// they hold what was last written there (zeros in a new buffer's pages, as the driver
    /// allocates them, or an earlier upload's bytes).
    pub fn write_with<R>(&mut self, offset: u64, len: usize, fill: impl FnOnce(&mut [u8]) -> R) -> Result<R> {
        let end = offset.checked_add(len as u64).filter(|&e| e <= self.inner.size);
        let end = end.ok_or_else(|| NativeError::Unsupported("staging write out of range".into()))?;
        self.uses.check_idle("staging write")?;
        // SAFETY: the range is inside the mapping (checked above), which stays mapped while
        // `self` lives; `&mut self` excludes every other host access for the slice's lifetime,
        // and no submission that uses the buffer is pending (checked above), so the device does
        // not touch it either. The bytes are host memory the driver allocated and mapped: they
        // are initialized as far as the program can tell (as for any memory an FFI call hands
        // over), whatever their values.
        let bytes = unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr().add(offset as usize), len) };
        let r = fill(bytes);
        if !self.coherent {
            // SAFETY: the range is mapped.
            unsafe {
                self.inner.device.shared.hal.flush_mapped_ranges(self.hal(), std::iter::once(offset..end))
            };
        }
        Ok(r)
    }

    /// Copies bytes at `offset` out of the buffer. Refused while a submitted copy that uses
    /// the buffer has not completed (the GPU could be writing them).
    pub fn read(&self, offset: u64, out: &mut [u8]) -> Result<()> {
        let end = offset.checked_add(out.len() as u64).filter(|&e| e <= self.inner.size);
        let end = end.ok_or_else(|| NativeError::Unsupported("staging read out of range".into()))?;
        self.uses.check_idle("staging read")?;
        if !self.coherent {
            // SAFETY: the range is mapped.
            unsafe {
                self.inner
                    .device
                    .shared
                    .hal
                    .invalidate_mapped_ranges(self.hal(), std::iter::once(offset..end))
            };
        }
        // SAFETY: the range is inside the mapping; no submission that uses the buffer is
        // pending (checked above), and host writers need `&mut self`: nothing writes it now.
        unsafe {
            std::ptr::copy_nonoverlapping(self.ptr.as_ptr().add(offset as usize), out.as_mut_ptr(), out.len())
        };
        Ok(())
    }
}

impl sealed::Sealed for StagingBuffer {}

impl GpuBuffer for StagingBuffer {
    fn hal(&self) -> &wgpu_hal::vulkan::Buffer {
        self.inner.hal.as_ref().expect("buffer is alive")
    }
    fn size(&self) -> u64 {
        self.inner.size
    }
    fn id(&self) -> BufferId {
        self.inner.id
    }
    fn device_id(&self) -> DeviceId {
        self.inner.device.id()
    }
    fn keep_alive(&self) -> Arc<dyn std::any::Any + Send + Sync> {
        self.inner.clone()
    }
    fn storage(&self) -> bool {
        false
    }
    fn gpu_use(&self) -> Option<Arc<GpuUse>> {
        Some(self.uses.clone())
    }
}

/// Keeps [`GpuBuffer`] implemented only here: the recorder trusts an implementation's `hal`
/// buffer, size and device to be what they say (a foreign one could name another device's
/// buffer or a destroyed one).
pub(crate) mod sealed {
    pub trait Sealed {}
}

/// Anything that can be bound as a storage buffer in a `BindGroup` or be a copy's source or
/// destination: a device-local [`Buffer`], a [`StagingBuffer`] or an `ImportedBuffer` over
/// host memory. Sealed: implemented only by this crate's buffers.
pub trait GpuBuffer: sealed::Sealed {
    /// The wgpu-hal buffer.
    #[doc(hidden)]
    fn hal(&self) -> &wgpu_hal::vulkan::Buffer;
    /// Size in bytes.
    fn size(&self) -> u64;
    /// Identity, unique in the process, for hazard tracking and bind-group caches.
    fn id(&self) -> BufferId;
    /// The device the buffer belongs to.
    fn device_id(&self) -> DeviceId;
    /// A reference that keeps the buffer alive while a command buffer that uses it is pending.
    #[doc(hidden)]
    fn keep_alive(&self) -> std::sync::Arc<dyn std::any::Any + Send + Sync>;
    /// Whether kernels may bind it as a storage buffer (staging buffers are copy-only).
    #[doc(hidden)]
    fn storage(&self) -> bool {
        true
    }
    /// Whether kernels may bind it as a uniform buffer (device-local buffers only).
    #[doc(hidden)]
    fn uniform(&self) -> bool {
        false
    }
    /// For a buffer the host reads or writes without atomics (a staging buffer): the record of
    /// the submissions that use it, so such an access while one is pending is refused.
    #[doc(hidden)]
    fn gpu_use(&self) -> Option<std::sync::Arc<GpuUse>> {
        None
    }
}
