//! Host memory imported into devices (VK_EXT_external_memory_host).
//!
//! A [`HostAllocation`] is page-aligned host memory; an [`ImportedBuffer`] makes it a storage
//! buffer of one device. The allocation outlives every buffer over it: each `ImportedBuffer`
//! holds an `Arc` to it and is destroyed (buffer, then device memory) before that `Arc` drops.

use std::alloc::Layout;
use std::ptr::NonNull;
use std::sync::Arc;

use ash::vk;
use wgpu_hal::vulkan::Buffer as HalBuffer;

use crate::buffer::GpuBuffer;
use crate::buffer::{next_buffer_id, BufferId};
use crate::device::{Device, DeviceId};
use crate::error::{map_vk, NativeError, Result};

/// Zeroed host memory with a chosen alignment, shared by the host and any device that imports
/// it; [`HostAllocation::shared`] maps a file instead, so other processes that map the same
/// file (and their devices) share it too.
pub struct HostAllocation {
    ptr: NonNull<u8>,
    len: usize,
    backing: Backing,
}

/// Where a [`HostAllocation`]'s bytes come from, and so how they are given back.
enum Backing {
    /// The process's heap, with this layout.
    Heap(Layout),
    /// A shared mapping of a file (`munmap` on drop).
    Mapped,
}

// SAFETY: the allocation is plain memory owned by this value; the host reaches its bytes only
// through `word`, as atomics (devices write it through an ImportedBuffer): any thread may do
// that.
unsafe impl Send for HostAllocation {}
// SAFETY: see above.
unsafe impl Sync for HostAllocation {}

impl std::fmt::Debug for HostAllocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostAllocation").field("len", &self.len).field("shared", &self.is_shared()).finish()
    }
}

impl HostAllocation {
    /// Allocates `len` bytes (rounded up to `align`), aligned to `align` (a power of two).
    pub fn new(len: u64, align: u64) -> Result<Self> {
        let align = align.max(4096);
        let size = len.max(1).next_multiple_of(align);
        let layout = Layout::from_size_align(size as usize, align as usize)
            .map_err(|e| NativeError::Unsupported(format!("host slot layout: {e}")))?;
        // SAFETY: the layout has non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(ptr)
            .ok_or_else(|| NativeError::OutOfHostMemory(format!(": {size} bytes of host slots")))?;
        crate::live::inc(&crate::live::HOST_ALLOCATIONS);
        Ok(Self { ptr, len: size as usize, backing: Backing::Heap(layout) })
    }

    /// A new file of `len` bytes of zeros in memory (a memfd), sealed so that its size can
    /// never change again (`F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL`), for
    /// [`HostAllocation::shared`]: other processes of the same user open it by
    /// `/proc/<pid>/fd/<fd>` while the returned file is open. Writing the zeros makes the pages
    /// exist, so a full memory file system is this error, not a fault at a device's first write.
    pub fn sealed_file(len: u64) -> Result<std::fs::File> {
        use std::io::Write;
        use std::os::fd::{AsRawFd, FromRawFd};
        let fail = |what: &str, e: std::io::Error| NativeError::OutOfHostMemory(format!(": {what}: {e}"));
        // SAFETY: a valid NUL-terminated name and flags; the fd is owned by the File below.
        let fd = unsafe {
            libc::memfd_create(c"crossgpu-slots".as_ptr(), libc::MFD_ALLOW_SEALING | libc::MFD_CLOEXEC)
        };
        if fd < 0 {
            return Err(fail("memfd_create", std::io::Error::last_os_error()));
        }
        // SAFETY: `fd` is a new, open descriptor that nothing else owns.
        let file = unsafe { std::fs::File::from_raw_fd(fd) };
        let zeros = vec![0u8; 1 << 20];
        let mut w = std::io::BufWriter::new(&file);
        let mut left = len;
        while left > 0 {
            let n = left.min(zeros.len() as u64) as usize;
            w.write_all(&zeros[..n]).map_err(|e| fail("writing the shared memory", e))?;
            left -= n as u64;
        }
        w.flush().map_err(|e| fail("writing the shared memory", e))?;
        drop(w);
        // SAFETY: fcntl on an open descriptor with an int argument.
        let r = unsafe {
            libc::fcntl(
                file.as_raw_fd(),
                libc::F_ADD_SEALS,
                libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL,
            )
        };
        if r < 0 {
            return Err(fail("sealing the shared memory", std::io::Error::last_os_error()));
        }
        Ok(file)
    }

    /// Maps the first `len` bytes of `file` shared, readable and writable: every process that
    /// maps the same file sees the same memory, and so do the devices each imports it into.
    /// `file` must be sealed against shrinking ([`HostAllocation::sealed_file`] makes one;
    /// another process opens it by `/proc/<pid>/fd/<fd>`): a file anyone could truncate would
    /// fault the mapping under the devices, so an unsealed one is refused. `len` must be a
    /// non-zero multiple of `align` (a power of two) and the file at least that long.
    pub fn shared(file: &std::fs::File, len: u64, align: u64) -> Result<Self> {
        use std::os::fd::AsRawFd;
        let align = align.max(4096);
        if len == 0 || !len.is_multiple_of(align) {
            return Err(NativeError::Unsupported(format!(
                "shared host memory of {len} bytes: must be a non-zero multiple of {align}"
            )));
        }
        // SAFETY: fcntl on an open descriptor; F_GET_SEALS takes no argument.
        let seals = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GET_SEALS) };
        if seals < 0 || seals & libc::F_SEAL_SHRINK == 0 {
            return Err(NativeError::Unsupported(
                "shared host memory: the file is not sealed against shrinking (F_SEAL_SHRINK), so it could be truncated under the mapping; make it with HostAllocation::sealed_file".into(),
            ));
        }
        let file_len =
            file.metadata().map_err(|e| NativeError::Unsupported(format!("shared host memory: {e}")))?.len();
        if file_len < len {
            return Err(NativeError::Unsupported(format!(
                "shared host memory: the file holds {file_len} bytes, {len} asked for"
            )));
        }
        let size =
            usize::try_from(len).map_err(|_| NativeError::OutOfHostMemory(format!(": {len} bytes")))?;
        // SAFETY: a new mapping (no address given) of an open file descriptor, whose size can
        // never shrink (sealed, checked above), so no page of the mapping disappears; the result
        // is checked before use and unmapped in Drop; the host touches it only through atomics
        // (`word`). The file may be closed afterwards: the mapping keeps its own reference.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                size,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            let e = std::io::Error::last_os_error();
            return Err(NativeError::OutOfHostMemory(format!(": mapping {len} bytes of shared memory: {e}")));
        }
        let ptr = NonNull::new(ptr.cast::<u8>())
            .ok_or_else(|| NativeError::OutOfHostMemory(": mmap gave null".into()))?;
        let this = Self { ptr, len: size, backing: Backing::Mapped };
        crate::live::inc(&crate::live::HOST_ALLOCATIONS);
        if !(ptr.as_ptr() as u64).is_multiple_of(align) {
            return Err(NativeError::Unsupported(format!(
                "shared host memory mapped at {:p}, not a multiple of {align}",
                ptr.as_ptr()
            )));
        }
        Ok(this)
    }

    /// Whether the memory is a shared file mapping ([`HostAllocation::shared`]).
    pub fn is_shared(&self) -> bool {
        matches!(self.backing, Backing::Mapped)
    }

    /// Size in bytes: the length asked for, rounded up to the alignment.
    pub fn len(&self) -> u64 {
        self.len as u64
    }

    /// The 32-bit word at `byte_offset` (a multiple of 4 inside the allocation), for atomic
    /// loads and stores from the host while devices write the memory: a device's store is seen
    /// once it reached host memory (the allocation is host-coherent by construction).
    pub fn word(&self, byte_offset: u64) -> Option<&std::sync::atomic::AtomicU32> {
        let ok =
            byte_offset.is_multiple_of(4) && byte_offset.checked_add(4).is_some_and(|end| end <= self.len());
        // SAFETY: in range and aligned (checked; the base is page-aligned); zero-initialised
        // memory is a valid AtomicU32; alive while `self` is. Devices write it concurrently,
        // as another process would write shared memory: only atomic accesses are made here.
        ok.then(|| unsafe {
            &*self.ptr.as_ptr().add(byte_offset as usize).cast::<std::sync::atomic::AtomicU32>()
        })
    }

    /// Whether the allocation has no bytes (never, since [`HostAllocation::new`] allocates at
    /// least one page).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for HostAllocation {
    fn drop(&mut self) {
        crate::live::dec(&crate::live::HOST_ALLOCATIONS);
        match self.backing {
            // SAFETY: allocated in `new` with this layout; every ImportedBuffer over it holds an
            // Arc to this value, so none is alive.
            Backing::Heap(layout) => unsafe { std::alloc::dealloc(self.ptr.as_ptr(), layout) },
            Backing::Mapped => {
                // SAFETY: mapped in `shared` with this length; no ImportedBuffer over it is
                // alive (as above). Other processes' mappings are their own.
                unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
            }
        }
    }
}

struct ImportedInner {
    device: Device,
    hal: Option<HalBuffer>,
    raw_buffer: vk::Buffer,
    memory: vk::DeviceMemory,
    size: u64,
    id: BufferId,
    // Declared last: dropped after the buffer and memory above are destroyed in `Drop`.
    _host: Arc<HostAllocation>,
}

impl Drop for ImportedInner {
    fn drop(&mut self) {
        crate::live::dec(&crate::live::IMPORTS);
        self.hal.take();
        // SAFETY: no command buffer that uses the buffer is pending (they hold this value alive);
        // the buffer is destroyed before the memory it is bound to.
        unsafe {
            self.device.raw().destroy_buffer(self.raw_buffer, None);
            self.device.raw().free_memory(self.memory, None);
        }
    }
}

/// A [`HostAllocation`] imported into one device as a storage buffer (transfer source and
/// destination too). Host-coherent: the host sees the device's writes once they are made
/// available to the host domain by a barrier and the submission completed.
#[derive(Clone)]
pub struct ImportedBuffer(Arc<ImportedInner>);

impl ImportedBuffer {
    /// Imports all of `host` into `device`.
    pub fn new(device: &Device, host: &Arc<HostAllocation>) -> Result<Self> {
        let loader = device
            .shared
            .host_memory
            .as_ref()
            .ok_or(NativeError::MissingExtension("VK_EXT_external_memory_host"))?;
        let mem_props = {
            let inst = device.shared.hal.shared_instance().raw_instance();
            // SAFETY: live physical device of this instance.
            unsafe { inst.get_physical_device_memory_properties(device.shared.hal.raw_physical_device()) }
        };
        let align = device.info().caps.min_imported_host_pointer_alignment;
        let (buffer, memory) = import_host_allocation(device.raw(), loader, &mem_props, align, host)?;
        // SAFETY: wgpu-hal only reads the handle for bindings and copies; we destroy it ourselves
        // and never pass it to wgpu-hal's destroy_buffer.
        let hal = unsafe { HalBuffer::from_raw(buffer) };
        crate::live::inc(&crate::live::IMPORTS);
        Ok(Self(Arc::new(ImportedInner {
            device: device.clone(),
            hal: Some(hal),
            raw_buffer: buffer,
            memory,
            size: host.len(),
            id: next_buffer_id(),
            _host: host.clone(),
        })))
    }
}

/// Imports all of `host` into the device `raw` (whose VK_EXT_external_memory_host functions
/// `loader` holds and whose memory types `mem_props` lists) as a host-coherent storage buffer
/// that is also a transfer source and destination: the one implementation behind
/// [`ImportedBuffer`] and the wgpu embedding's slots. The caller owns the returned buffer and
/// memory, must destroy the buffer before freeing the memory, and must keep `host` alive until
/// then.
pub(crate) fn import_host_allocation(
    raw: &ash::Device,
    loader: &ash::ext::external_memory_host::Device,
    mem_props: &vk::PhysicalDeviceMemoryProperties,
    min_align: u64,
    host: &HostAllocation,
) -> Result<(vk::Buffer, vk::DeviceMemory)> {
    let align = min_align.max(1);
    let addr = host.ptr.as_ptr() as u64;
    if !addr.is_multiple_of(align) || !host.len().is_multiple_of(align) {
        return Err(NativeError::Unsupported(format!(
            "host allocation not aligned to minImportedHostPointerAlignment {align}"
        )));
    }
    let handle = vk::ExternalMemoryHandleTypeFlags::HOST_ALLOCATION_EXT;
    let mut ptr_props = vk::MemoryHostPointerPropertiesEXT::default();
    // SAFETY: the pointer is a live host allocation aligned as the extension requires; the
    // loader's functions belong to `raw`.
    unsafe {
        (loader.fp().get_memory_host_pointer_properties_ext)(
            raw.handle(),
            handle,
            host.ptr.as_ptr() as *const std::ffi::c_void,
            &mut ptr_props,
        )
    }
    .result()
    .map_err(map_vk("vkGetMemoryHostPointerPropertiesEXT"))?;

    let mut ext_info = vk::ExternalMemoryBufferCreateInfo::default().handle_types(handle);
    let info = vk::BufferCreateInfo::default()
        .size(host.len())
        .usage(
            vk::BufferUsageFlags::STORAGE_BUFFER
                | vk::BufferUsageFlags::TRANSFER_SRC
                | vk::BufferUsageFlags::TRANSFER_DST,
        )
        .sharing_mode(vk::SharingMode::EXCLUSIVE)
        .push_next(&mut ext_info);
    // SAFETY: valid create info; destroyed by the caller, or below on failure.
    let buffer = unsafe { raw.create_buffer(&info, None) }.map_err(map_vk("vkCreateBuffer"))?;
    // SAFETY: live buffer.
    let reqs = unsafe { raw.get_buffer_memory_requirements(buffer) };
    let bits = reqs.memory_type_bits & ptr_props.memory_type_bits;
    let want = vk::MemoryPropertyFlags::HOST_VISIBLE | vk::MemoryPropertyFlags::HOST_COHERENT;
    let type_index = (0..mem_props.memory_type_count)
        .find(|&i| bits & (1 << i) != 0 && mem_props.memory_types[i as usize].property_flags.contains(want));
    let Some(type_index) = type_index else {
        // SAFETY: created above, unused.
        unsafe { raw.destroy_buffer(buffer, None) };
        return Err(NativeError::Unsupported(
            "no host-coherent memory type accepts this host pointer".into(),
        ));
    };
    let mut import = vk::ImportMemoryHostPointerInfoEXT::default()
        .handle_type(handle)
        .host_pointer(host.ptr.as_ptr() as *mut std::ffi::c_void);
    let alloc = vk::MemoryAllocateInfo::default()
        .allocation_size(host.len())
        .memory_type_index(type_index)
        .push_next(&mut import);
    // SAFETY: the host pointer stays valid until the memory is freed (the caller keeps `host`).
    let memory = match unsafe { raw.allocate_memory(&alloc, None) } {
        Ok(m) => m,
        Err(e) => {
            // SAFETY: created above, unused.
            unsafe { raw.destroy_buffer(buffer, None) };
            return Err(map_vk("vkAllocateMemory (host pointer import)")(e));
        }
    };
    // SAFETY: memory and buffer are unbound, same device, sizes match.
    if let Err(e) = unsafe { raw.bind_buffer_memory(buffer, memory, 0) } {
        // SAFETY: both created above, unused.
        unsafe {
            raw.destroy_buffer(buffer, None);
            raw.free_memory(memory, None);
        }
        return Err(map_vk("vkBindBufferMemory")(e));
    }
    Ok((buffer, memory))
}

impl crate::buffer::sealed::Sealed for ImportedBuffer {}

impl GpuBuffer for ImportedBuffer {
    fn hal(&self) -> &HalBuffer {
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
}
