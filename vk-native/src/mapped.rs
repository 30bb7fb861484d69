//! Words of device-local memory the host can store to while a kernel runs.
//!
//! A [`MappedWords`] is a small storage buffer in memory that is `DEVICE_LOCAL`, `HOST_VISIBLE`
//! and `HOST_COHERENT` at once (resizable BAR on a discrete GPU; any memory on a CPU device),
//! mapped for its whole life. A running kernel that reads a word with an atomic load sees the
//! host's later stores to it, which it does not for imported host memory once it has read a
//! line (NVIDIA 580, docs/BENCHMARKS.md#waking-a-running-kernel): this is how a host thread
//! wakes a kernel that polls.

use std::ptr::NonNull;
use std::sync::atomic::AtomicU32;
use std::sync::Arc;

use ash::vk;
use wgpu_hal::vulkan::Buffer as HalBuffer;

use crate::buffer::GpuBuffer;
use crate::buffer::{next_buffer_id, BufferId};
use crate::device::{Device, DeviceId};
use crate::error::{map_vk, NativeError, Result};

struct MappedInner {
    device: Device,
    hal: Option<HalBuffer>,
    raw_buffer: vk::Buffer,
    memory: vk::DeviceMemory,
    ptr: NonNull<AtomicU32>,
    words: usize,
    id: BufferId,
}

// SAFETY: the mapping is only accessed through `&AtomicU32` (atomic operations), which any
// thread may perform; the memory lives as long as this value.
unsafe impl Send for MappedInner {}
// SAFETY: as above.
unsafe impl Sync for MappedInner {}

impl Drop for MappedInner {
    fn drop(&mut self) {
        crate::live::dec(&crate::live::BUFFERS);
        self.hal.take();
        // SAFETY: no pending command buffer uses the buffer (each holds this value alive until
        // its submission completed); unmapped implicitly by freeing; buffer before memory.
        unsafe {
            self.device.raw().destroy_buffer(self.raw_buffer, None);
            self.device.raw().free_memory(self.memory, None);
        }
    }
}

/// A storage buffer of 32-bit words in device-local, host-visible, host-coherent memory,
/// mapped for its whole life: the host loads and stores its words atomically while kernels use
/// it. Zeroed at creation. Clones share it.
#[derive(Clone)]
pub struct MappedWords(Arc<MappedInner>);

impl std::fmt::Debug for MappedWords {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MappedWords").field("id", &self.0.id).field("words", &self.0.words).finish()
    }
}

impl MappedWords {
    /// The memory type index that is device-local, host-visible and host-coherent among
    /// `type_bits`, if the device has one.
    fn memory_type(device: &Device, type_bits: u32) -> Option<u32> {
        let inst = device.shared.hal.shared_instance().raw_instance();
        // SAFETY: live physical device of this instance.
        let props =
            unsafe { inst.get_physical_device_memory_properties(device.shared.hal.raw_physical_device()) };
        let want = vk::MemoryPropertyFlags::DEVICE_LOCAL
            | vk::MemoryPropertyFlags::HOST_VISIBLE
            | vk::MemoryPropertyFlags::HOST_COHERENT;
        (0..props.memory_type_count).find(|&i| {
            type_bits & (1 << i) != 0 && props.memory_types[i as usize].property_flags.contains(want)
        })
    }

    /// Whether `device` has memory that is device-local, host-visible and host-coherent
    /// (`Capabilities::device_local_host_visible`).
    pub fn supported(device: &Device) -> bool {
        device.info().caps.device_local_host_visible
    }

    /// Allocates and maps `words` zeroed words (at least one). Fails with
    /// [`NativeError::Unsupported`] where the device has no device-local host-visible
    /// host-coherent memory.
    pub fn new(device: &Device, words: usize) -> Result<Self> {
        let words = words.max(1);
        // Words are indexed with u32 by the kernels; more than that is no flag buffer.
        if words > u32::MAX as usize / 4 {
            return Err(NativeError::Unsupported(format!("{words} mapped words (at most {})", u32::MAX / 4)));
        }
        let size = (words * 4) as u64;
        let raw = device.raw();
        let info = vk::BufferCreateInfo::default()
            .size(size)
            .usage(vk::BufferUsageFlags::STORAGE_BUFFER | vk::BufferUsageFlags::TRANSFER_DST)
            .sharing_mode(vk::SharingMode::EXCLUSIVE);
        // SAFETY: valid create info; destroyed by `MappedInner::drop`, or below on failure.
        let buffer = unsafe { raw.create_buffer(&info, None) }.map_err(map_vk("vkCreateBuffer"))?;
        let destroy_buffer = || {
            // SAFETY: created above, unused.
            unsafe { raw.destroy_buffer(buffer, None) }
        };
        // SAFETY: live buffer.
        let reqs = unsafe { raw.get_buffer_memory_requirements(buffer) };
        let Some(type_index) = Self::memory_type(device, reqs.memory_type_bits) else {
            destroy_buffer();
            return Err(NativeError::Unsupported(format!(
                "{} has no memory that is device-local, host-visible and host-coherent",
                device.info().name
            )));
        };
        let alloc =
            vk::MemoryAllocateInfo::default().allocation_size(reqs.size).memory_type_index(type_index);
        // SAFETY: valid allocate info; freed by `MappedInner::drop`, or below on failure.
        let memory = match unsafe { raw.allocate_memory(&alloc, None) } {
            Ok(m) => m,
            Err(e) => {
                destroy_buffer();
                return Err(map_vk("vkAllocateMemory (mapped words)")(e));
            }
        };
        let free_both = || {
            destroy_buffer();
            // SAFETY: allocated above, unused.
            unsafe { raw.free_memory(memory, None) };
        };
        // SAFETY: unbound buffer and memory of this device, memory large enough.
        if let Err(e) = unsafe { raw.bind_buffer_memory(buffer, memory, 0) } {
            free_both();
            return Err(map_vk("vkBindBufferMemory")(e));
        }
        // SAFETY: host-visible memory, not mapped yet; stays mapped until freed.
        let ptr = match unsafe { raw.map_memory(memory, 0, vk::WHOLE_SIZE, vk::MemoryMapFlags::empty()) } {
            Ok(p) => p,
            Err(e) => {
                free_both();
                return Err(map_vk("vkMapMemory")(e));
            }
        };
        let Some(ptr) = NonNull::new(ptr.cast::<AtomicU32>()) else {
            free_both();
            return Err(NativeError::Unsupported("vkMapMemory returned a null pointer".into()));
        };
        for i in 0..words {
            // SAFETY: `i` is inside the mapping; maps are aligned to minMemoryMapAlignment
            // (at least 64 bytes), so every word is 4-byte aligned; nothing else uses it yet.
            unsafe { ptr.as_ptr().add(i).write(AtomicU32::new(0)) };
        }
        // SAFETY: wgpu-hal only reads the handle for bindings and copies; we destroy it ourselves.
        let hal = unsafe { HalBuffer::from_raw(buffer) };
        crate::live::inc(&crate::live::BUFFERS);
        Ok(Self(Arc::new(MappedInner {
            device: device.clone(),
            hal: Some(hal),
            raw_buffer: buffer,
            memory,
            ptr,
            words,
            id: next_buffer_id(),
        })))
    }

    /// Number of words.
    pub fn len(&self) -> usize {
        self.0.words
    }

    /// Whether there are no words (never: [`MappedWords::new`] makes at least one).
    pub fn is_empty(&self) -> bool {
        self.0.words == 0
    }

    /// Word `i`, for atomic loads from the host; `None` past the end. A load sees a kernel's
    /// store once it reached memory (host-coherent: no invalidation needed).
    pub fn word(&self, i: usize) -> Option<&AtomicU32> {
        // SAFETY: in range (checked), aligned, initialised in `new`, and alive while `self` is.
        (i < self.0.words).then(|| unsafe { &*self.0.ptr.as_ptr().add(i) })
    }

    /// Stores `value` into word `i` so that a kernel polling it sees it at once; `false` past
    /// the end. The mapping is usually write-combined, where a plain store can wait in the
    /// CPU's write-combining buffer: the store is followed by a sequentially consistent fence
    /// (MFENCE on x86), which drains it; a plain store, or a locked exchange, reached a polling
    /// kernel many times later (docs/BENCHMARKS.md#waking-a-running-kernel).
    pub fn publish(&self, i: usize, value: u32) -> bool {
        use std::sync::atomic::{fence, Ordering};
        let Some(w) = self.word(i) else { return false };
        w.store(value, Ordering::Release);
        fence(Ordering::SeqCst);
        true
    }
}

impl crate::buffer::sealed::Sealed for MappedWords {}

impl GpuBuffer for MappedWords {
    fn hal(&self) -> &HalBuffer {
        self.0.hal.as_ref().expect("buffer is alive")
    }
    fn size(&self) -> u64 {
        (self.0.words * 4) as u64
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
}
