//! Embedding in wgpu applications: a `wgpu::Device` opened with the interop extensions, and a
//! borrowed member of it ([`EmbeddedMember`]) whose work — a copy into imported host memory, a
//! kernel over imported host memory and an application buffer — is recorded into the
//! application's own wgpu command encoders and submitted with the application's own
//! `wgpu::Queue::submit`, waiting and signalling timelines the caller gives. The all-reduce
//! protocol built from them is `crossgpu::embed`'s; nothing here knows rounds or phases.
//!
//! How the work is ordered against the application's work (the contract `crossgpu::embed`
//! documents): every command buffer made here is recorded through
//! `wgpu::CommandEncoder::as_hal_mut` (raw commands only) and submitted with `queue.submit`,
//! so wgpu serialises the VkQueue and the submission lands in queue order between the
//! application's submits. Timeline semaphore waits and signals are attached to that one
//! submission through wgpu-hal's `Queue::add_wait_semaphore`/`add_signal_semaphore`. wgpu-core
//! does not track raw use of a buffer, so every command buffer starts with a global memory
//! barrier (all earlier writes → its reads and writes) and ends with one (its writes → any later
//! access).
//!
//! Objects made here (imported slot buffers, semaphores, the pipeline, bind groups) hold a clone
//! of the `wgpu::Device`, so the VkDevice outlives them; they are destroyed only after the
//! submissions that use them completed, as wgpu itself reports it (`SubmissionIndex`,
//! `Queue::on_submitted_work_done`), not as a semaphore of ours says: a submit from another
//! thread between staging our semaphores and our submit would take them (the ordering contract
//! forbids it), and would then make a round's sums wrong, but never free what the GPU uses.
//!
//! The application's buffer is checked by wgpu before any raw command names it: each submission
//! starts with a command buffer holding a zero-sized `clear_buffer` of it, recorded under an
//! error scope, which wgpu validates (a live buffer of this device, with COPY_DST) and which
//! makes wgpu-core track the buffer as used by the submission, so the application's
//! `Buffer::destroy` waits for it.

use std::collections::VecDeque;
use std::num::NonZeroU64;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ash::{ext, khr, vk};
use wgpu_hal::{CommandEncoder as _, Device as _};

use crate::error::{map_hal_device, NativeError, Result};
use crate::host::HostAllocation;
use crate::kernel::PipelineObjects;
use crate::semaphore::{SemaphoreOwner, TimelineSemaphore};
use crate::shader::{BindingKind, Shader};

type VkApi = wgpu_hal::vulkan::Api;

/// Opens a `wgpu::Device` and `wgpu::Queue` on `adapter` (a Vulkan adapter) with
/// VK_EXT_external_memory_host and VK_KHR_external_semaphore_fd added where the adapter has
/// them, through wgpu-hal's `open_with_callback` and `Adapter::create_device_from_hal`.
///
/// Fails with [`NativeError::Unsupported`] for a non-Vulkan adapter or features the adapter
/// lacks. A device opened on an adapter without VK_EXT_external_memory_host is returned too;
/// [`EmbeddedMember::new`] then reports the missing extension.
pub fn request_wgpu_device(
    adapter: &wgpu::Adapter,
    desc: &wgpu::DeviceDescriptor<'_>,
) -> Result<(wgpu::Device, wgpu::Queue)> {
    if !adapter.features().contains(desc.required_features) {
        return Err(NativeError::Unsupported(format!(
            "the adapter lacks features {:?}",
            desc.required_features - adapter.features()
        )));
    }
    let open = {
        // SAFETY: the guard only lends the wgpu-hal adapter; nothing is destroyed through it and
        // it is dropped at the end of this block, before wgpu uses the adapter again.
        let hal_adapter = unsafe { adapter.as_hal::<VkApi>() }
            .ok_or_else(|| NativeError::Unsupported("not a Vulkan adapter".into()))?;
        let caps = hal_adapter.physical_device_capabilities();
        let host_ext = caps.supports_extension(ext::external_memory_host::NAME);
        let fd_ext = caps.supports_extension(khr::external_semaphore_fd::NAME);
        let callback: Box<wgpu_hal::vulkan::CreateDeviceCallback<'_>> = Box::new(move |args| {
            if host_ext && !args.extensions.contains(&ext::external_memory_host::NAME) {
                args.extensions.push(ext::external_memory_host::NAME);
            }
            if fd_ext && !args.extensions.contains(&khr::external_semaphore_fd::NAME) {
                args.extensions.push(khr::external_semaphore_fd::NAME);
            }
        });
        // SAFETY: the callback only adds extensions the physical device exposes (checked above)
        // and removes nothing; the features were checked against the adapter's.
        unsafe {
            hal_adapter.open_with_callback(
                desc.required_features,
                &desc.required_limits,
                &desc.memory_hints,
                Some(callback),
            )
        }
        .map_err(map_hal_device("vkCreateDevice"))?
    };
    // SAFETY: `open` was just created from this very adapter's wgpu-hal adapter, with the
    // features of `desc` (plus extensions wgpu does not know of, which change nothing it relies on).
    unsafe { adapter.create_device_from_hal(open, desc) }
        .map_err(|e| NativeError::Unsupported(format!("create_device_from_hal: {e}")))
}

/// What a member needs from its wgpu device, shared by everything made on it.
///
/// Fields drop in declaration order: `raw` and `host_memory` are function tables (no `Drop`),
/// and `device`, last, is what keeps the VkDevice alive; everything made on the device holds an
/// `Arc<Shared>` and is destroyed before it.
struct Shared {
    raw: ash::Device,
    host_memory: ext::external_memory_host::Device,
    mem_props: vk::PhysicalDeviceMemoryProperties,
    min_align: u64,
    max_storage_range: u64,
    /// `minStorageBufferOffsetAlignment`: where a binding of an application buffer may start.
    storage_offset_align: u64,
    /// `maxPushConstantsSize`.
    max_push_constants: u32,
    name: String,
    queue: wgpu::Queue,
    device: wgpu::Device,
}

impl SemaphoreOwner for Shared {
    fn raw_device(&self) -> &ash::Device {
        &self.raw
    }
}

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
    fn hal(&self) -> &wgpu_hal::vulkan::Buffer {
        self.0.hal.as_ref().expect("alive")
    }
}

struct Pending {
    /// wgpu's index of the submission, and whether wgpu reported it done.
    index: wgpu::SubmissionIndex,
    done: Arc<AtomicBool>,
    bind_group: Option<wgpu_hal::vulkan::BindGroup>,
    _buffer: wgpu::Buffer,
    _slots: EmbeddedSlots,
    /// The timeline the submission waits on or signals.
    _timeline: TimelineSemaphore,
}

struct HalKernel {
    objects: PipelineObjects,
    immediate_bytes: u32,
}

/// One application wgpu device (and its queue), borrowed: host memory imported into it,
/// timeline semaphores on it, and two kinds of work — a copy into imported host memory and one
/// compute kernel over (imported host memory, an application buffer) — each recorded into a
/// fresh wgpu command encoder and submitted with the application's own queue, waiting and
/// signalling the timelines it is given. What the work means (the all-reduce's phases) is
/// `crossgpu::embed`'s.
pub struct EmbeddedMember {
    kernel: HalKernel,
    pending: VecDeque<Pending>,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for EmbeddedMember {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddedMember").field("name", &self.shared.name).finish()
    }
}

fn global_barrier(
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

const ALL_ACCESS: vk::AccessFlags = vk::AccessFlags::from_raw(
    vk::AccessFlags::MEMORY_READ.as_raw()
        | vk::AccessFlags::MEMORY_WRITE.as_raw()
        | vk::AccessFlags::HOST_READ.as_raw()
        | vk::AccessFlags::HOST_WRITE.as_raw(),
);

impl EmbeddedMember {
    /// Makes `device` (opened by [`request_wgpu_device`]) and its `queue` a member, with the
    /// compute kernel `shader`, whose interface must be two storage buffers — binding 0
    /// read-only (the imported host memory), binding 1 read-write (the application's buffer) —
    /// and `immediate_bytes` of immediates.
    ///
    /// Errors: not a Vulkan device, VK_EXT_external_memory_host not enabled on it (a device
    /// from plain `request_device`), no timeline semaphores, a kernel of another interface.
    pub fn new(device: &wgpu::Device, queue: &wgpu::Queue, shader: &Shader) -> Result<Self> {
        let shared = {
            // SAFETY: the guard only lends wgpu-hal's device; we clone the ash function table and
            // never destroy the device through it (we hold a wgpu::Device clone instead).
            let hal = unsafe { device.as_hal::<VkApi>() }
                .ok_or_else(|| NativeError::Unsupported("not a Vulkan device".into()))?;
            if !hal.enabled_device_extensions().contains(&ext::external_memory_host::NAME) {
                return Err(NativeError::MissingExtension(
                    "VK_EXT_external_memory_host (open the device with crossgpu::embed::request_device)",
                ));
            }
            let inst = hal.shared_instance().raw_instance();
            let phd = hal.raw_physical_device();
            let mut host_props = vk::PhysicalDeviceExternalMemoryHostPropertiesEXT::default();
            let mut props2 = vk::PhysicalDeviceProperties2::default().push_next(&mut host_props);
            // SAFETY: live physical device of this instance; the chained struct belongs to an
            // extension the device exposes (it was enabled).
            unsafe { inst.get_physical_device_properties2(phd, &mut props2) };
            let props = props2.properties;
            let mut v12 = vk::PhysicalDeviceVulkan12Features::default();
            let mut f2 = vk::PhysicalDeviceFeatures2::default().push_next(&mut v12);
            let timeline = props.api_version >= vk::API_VERSION_1_2 && {
                // SAFETY: live physical device; Vulkan 1.2 structures on a 1.2 device.
                unsafe { inst.get_physical_device_features2(phd, &mut f2) };
                v12.timeline_semaphore == vk::TRUE
            };
            if !timeline {
                return Err(NativeError::MissingExtension("timeline semaphores (Vulkan 1.2)"));
            }
            // SAFETY: live physical device of this instance.
            let mem_props = unsafe { inst.get_physical_device_memory_properties(phd) };
            let raw = hal.raw_device().clone();
            let name = props
                .device_name_as_c_str()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|_| "device".into());
            Arc::new(Shared {
                host_memory: ext::external_memory_host::Device::new(inst, &raw),
                raw,
                mem_props,
                min_align: host_props.min_imported_host_pointer_alignment.max(1),
                max_storage_range: u64::from(props.limits.max_storage_buffer_range),
                storage_offset_align: props.limits.min_storage_buffer_offset_alignment.max(1),
                max_push_constants: props.limits.max_push_constants_size,
                name,
                queue: queue.clone(),
                device: device.clone(),
            })
        };
        let kernel = Self::make_kernel(&shared, shader)?;
        Ok(Self { kernel, pending: VecDeque::new(), shared })
    }

    fn make_kernel(shared: &Arc<Shared>, shader: &Shader) -> Result<HalKernel> {
        let i = shader.interface();
        let kinds: Vec<BindingKind> = i.bindings.iter().map(|b| b.kind).collect();
        if kinds != [BindingKind::StorageRead, BindingKind::StorageReadWrite] {
            return Err(NativeError::Unsupported(format!(
                "kernel {}: an embedded member's kernel binds (storage read, storage read_write), not {kinds:?}",
                shader.label()
            )));
        }
        if i.immediate_bytes() as u64 > u64::from(shared.max_push_constants) {
            return Err(NativeError::Unsupported(format!(
                "kernel {}: {} bytes of immediates, more than the device's maxPushConstantsSize",
                shader.label(),
                i.immediate_bytes()
            )));
        }
        // SAFETY: the guard only lends the wgpu-hal device for the call.
        let d = unsafe { shared.device.as_hal::<VkApi>() }
            .ok_or_else(|| NativeError::Unsupported("not a Vulkan device".into()))?;
        // SAFETY: the shader's SPIR-V is naga's; its interface is the two bindings checked above;
        // `destroy_kernel` destroys the objects on this device.
        let objects = unsafe { PipelineObjects::new(&d, shader)? };
        Ok(HalKernel { objects, immediate_bytes: i.immediate_bytes() })
    }

    fn destroy_kernel(shared: &Shared, k: &mut HalKernel) {
        // SAFETY: see `make_kernel`.
        let Some(d) = (unsafe { shared.device.as_hal::<VkApi>() }) else { return };
        // SAFETY: no pending submission uses these (the caller waited); made on this device.
        unsafe { k.objects.destroy(&d) };
    }

    /// The adapter's name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// `minImportedHostPointerAlignment`.
    pub fn min_import_alignment(&self) -> u64 {
        self.shared.min_align
    }

    /// `maxStorageBufferRange`.
    pub fn max_storage_buffer_range(&self) -> u64 {
        self.shared.max_storage_range
    }

    /// A new timeline semaphore (value 0) on this member's device, for the waits and signals
    /// of [`EmbeddedMember::submit_copy`] and [`EmbeddedMember::submit_kernel`].
    pub fn timeline(&self) -> Result<TimelineSemaphore> {
        TimelineSemaphore::embedded(&self.shared)
    }

    /// Imports all of `host` into this member's device.
    pub fn import(&self, host: &Arc<HostAllocation>) -> Result<EmbeddedSlots> {
        let s = &self.shared;
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

    /// Refuses a timeline semaphore of another device (its raw handle would be meaningless here).
    fn check_own(&self, sem: &TimelineSemaphore) -> Result<()> {
        if sem.raw_device_handle() != self.shared.raw.handle() {
            return Err(NativeError::Unsupported("a timeline semaphore of another device".into()));
        }
        Ok(())
    }

    /// The command buffer that opens every submission naming `buffer`: a zero-sized
    /// `clear_buffer` of it, which wgpu validates (a live buffer of this device, with COPY_DST:
    /// an error here, before any raw command names the buffer) and which makes wgpu-core track
    /// the buffer as used by the submission (so a `destroy()` waits for it). Returns the
    /// buffer's raw handle, valid while the submission is pending.
    fn claim(&self, buffer: &wgpu::Buffer) -> Result<(wgpu::CommandBuffer, vk::Buffer)> {
        let device = &self.shared.device;
        let scope = device.push_error_scope(wgpu::ErrorFilter::Validation);
        let mut encoder =
            device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("crossgpu claim") });
        encoder.clear_buffer(buffer, 0, Some(0));
        let claim = encoder.finish();
        if let Some(e) = pollster::block_on(scope.pop()) {
            return Err(NativeError::Unsupported(format!(
                "the buffer is not a live buffer of {} with COPY_DST usage: {e}",
                self.shared.name
            )));
        }
        // SAFETY: the guard lends wgpu-hal's buffer only for reading its handle and is dropped
        // at once (it holds wgpu's snatch lock); the claim above keeps the buffer alive for the
        // submission it opens, and `Pending` keeps a `wgpu::Buffer` clone beside it.
        let guard = unsafe { buffer.as_hal::<VkApi>() }
            .ok_or_else(|| NativeError::Unsupported("buffer is destroyed or not a Vulkan buffer".into()))?;
        // SAFETY: live buffer (guard held).
        Ok((claim, unsafe { guard.raw_handle() }))
    }

    /// Records `f` into a fresh wgpu command encoder (raw commands only) between a leading and
    /// a trailing global barrier, attaches `wait` and `signal` (timelines of this device) and
    /// submits it after `claim` ([`EmbeddedMember::claim`]) with the application's queue;
    /// returns wgpu's index of the submission and the flag wgpu sets when it is done.
    fn submit_raw(
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

    /// Copies `bytes` of `buffer` from `offset` into `slots` at `slot_offset`, then signals
    /// `signal` (a timeline of this device) when the copy is done. `buffer` must be a live
    /// buffer of this member's device with COPY_SRC and COPY_DST usage (checked by wgpu before
    /// anything is recorded).
    #[allow(clippy::too_many_arguments)]
    pub fn submit_copy(
        &mut self,
        buffer: &wgpu::Buffer,
        offset: u64,
        slots: &EmbeddedSlots,
        slot_offset: u64,
        bytes: u64,
        signal: (&TimelineSemaphore, u64),
    ) -> Result<()> {
        self.check_own(signal.0)?;
        self.recycle()?;
        let size = NonZeroU64::new(bytes).ok_or_else(|| NativeError::Unsupported("empty copy".into()))?;
        let in_buffer = offset.checked_add(bytes).is_some_and(|end| end <= buffer.size());
        let in_slots = slot_offset.checked_add(bytes).is_some_and(|end| end <= slots.size());
        if !in_buffer
            || !in_slots
            || !bytes.is_multiple_of(4)
            || !offset.is_multiple_of(4)
            || !slot_offset.is_multiple_of(4)
        {
            return Err(NativeError::Unsupported("copy into the slots out of range or unaligned".into()));
        }
        if !buffer.usage().contains(wgpu::BufferUsages::COPY_SRC) {
            return Err(NativeError::Unsupported("the buffer lacks COPY_SRC usage".into()));
        }
        let (claim, raw_buf) = self.claim(buffer)?;
        // SAFETY: a non-owning wgpu-hal wrapper of a live handle of this device (wgpu checked
        // it in `claim`), never destroyed through it.
        let src = unsafe { wgpu_hal::vulkan::Buffer::from_raw(raw_buf) };
        let slot_hal = slots.hal();
        let (index, done) = Self::submit_raw(&self.shared, claim, None, Some(signal), |_, enc| {
            let region = wgpu_hal::BufferCopy { src_offset: offset, dst_offset: slot_offset, size };
            // SAFETY: both buffers are of this device and alive; the ranges are checked above.
            unsafe { enc.copy_buffer_to_buffer(&src, slot_hal, std::iter::once(region)) };
        })?;
        self.pending.push_back(Pending {
            index,
            done,
            bind_group: None,
            _buffer: buffer.clone(),
            _slots: slots.clone(),
            _timeline: signal.0.clone(),
        });
        Ok(())
    }

    /// Waits for `wait` (a timeline of this device), then runs the member's kernel once over
    /// the first `slot_bytes` of `slots` (binding 0) and `dst_bytes` of `buffer` from
    /// `dst_offset` (binding 1, the offset a multiple of `minStorageBufferOffsetAlignment`),
    /// with `immediates` and `groups` workgroups. `buffer` must be a live buffer of this
    /// member's device with STORAGE and COPY_DST usage (checked by wgpu before anything is
    /// recorded).
    #[allow(clippy::too_many_arguments)]
    pub fn submit_kernel(
        &mut self,
        buffer: &wgpu::Buffer,
        dst_offset: u64,
        dst_bytes: u64,
        slots: &EmbeddedSlots,
        slot_bytes: u64,
        immediates: &[u32],
        groups: u32,
        wait: (&TimelineSemaphore, u64),
    ) -> Result<()> {
        self.check_own(wait.0)?;
        self.recycle()?;
        let in_buffer = dst_offset.checked_add(dst_bytes).is_some_and(|end| end <= buffer.size());
        if dst_bytes == 0 || slot_bytes == 0 || slot_bytes > slots.size() || !in_buffer {
            return Err(NativeError::Unsupported("kernel bindings out of range".into()));
        }
        if !buffer.usage().contains(wgpu::BufferUsages::STORAGE) {
            return Err(NativeError::Unsupported("the buffer lacks STORAGE usage".into()));
        }
        if !dst_offset.is_multiple_of(self.shared.storage_offset_align) {
            return Err(NativeError::Unsupported(format!(
                "a binding at byte {dst_offset}: minStorageBufferOffsetAlignment is {}",
                self.shared.storage_offset_align
            )));
        }
        if slot_bytes > self.shared.max_storage_range || dst_bytes > self.shared.max_storage_range {
            return Err(NativeError::Unsupported(format!(
                "bindings of {slot_bytes} and {dst_bytes} bytes; maxStorageBufferRange is {}",
                self.shared.max_storage_range
            )));
        }
        if immediates.len() * 4 != self.kernel.immediate_bytes as usize {
            return Err(NativeError::Unsupported(format!(
                "the kernel takes {} bytes of immediates, not {}",
                self.kernel.immediate_bytes,
                immediates.len() * 4
            )));
        }
        if groups == 0 || groups > 65_535 {
            return Err(NativeError::Unsupported(format!("{groups} workgroups (1 to 65535)")));
        }
        let (claim, raw_buf) = self.claim(buffer)?;
        // SAFETY: non-owning wrapper, as in `submit_copy`.
        let dst = unsafe { wgpu_hal::vulkan::Buffer::from_raw(raw_buf) };
        let bind_group = {
            // SAFETY: as in `make_kernel`; the bind group is destroyed in `recycle`/`Drop` after
            // the submission that uses it completed.
            let d = unsafe { self.shared.device.as_hal::<VkApi>() }
                .ok_or_else(|| NativeError::Unsupported("not a Vulkan device".into()))?;
            let bindings = [
                wgpu_hal::BufferBinding::new_unchecked(slots.hal(), 0, NonZeroU64::new(slot_bytes)),
                wgpu_hal::BufferBinding::new_unchecked(&dst, dst_offset, NonZeroU64::new(dst_bytes)),
            ];
            // SAFETY: the ranges are inside live buffers of this device and within its limits.
            unsafe { self.kernel.objects.bind(&d, "crossgpu reduce", &bindings)? }
        };
        let pipeline = self.kernel.objects.pipeline.as_ref().expect("alive");
        let layout = self.kernel.objects.layout.as_ref().expect("alive");
        let bg = &bind_group;
        let result = Self::submit_raw(&self.shared, claim, Some(wait), None, |_, enc| {
            // SAFETY: pipeline, layout and bind group are of this device and alive until the
            // submission completed; the immediates match the layout's size.
            unsafe {
                enc.begin_compute_pass(&wgpu_hal::ComputePassDescriptor {
                    label: None,
                    timestamp_writes: None,
                });
                enc.set_compute_pipeline(pipeline);
                enc.set_bind_group(layout, 0, bg, &[]);
                enc.set_immediates(layout, 0, immediates);
                enc.dispatch_workgroups([groups, 1, 1]);
                enc.end_compute_pass();
            }
        });
        match result {
            Ok((index, done)) => {
                self.pending.push_back(Pending {
                    index,
                    done,
                    bind_group: Some(bind_group),
                    _buffer: buffer.clone(),
                    _slots: slots.clone(),
                    _timeline: wait.0.clone(),
                });
                Ok(())
            }
            Err(e) => {
                // SAFETY: never submitted.
                if let Some(d) = unsafe { self.shared.device.as_hal::<VkApi>() } {
                    // SAFETY: the bind group is unused.
                    unsafe { d.destroy_bind_group(bind_group) };
                }
                Err(e)
            }
        }
    }

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
            self.destroy_bind_group(&mut p);
        }
        Ok(())
    }

    /// Destroys the bind group of a submission that completed (or never was submitted).
    fn destroy_bind_group(&self, p: &mut Pending) {
        if let Some(bg) = p.bind_group.take() {
            // SAFETY: as in `make_kernel`.
            if let Some(d) = unsafe { self.shared.device.as_hal::<VkApi>() } {
                // SAFETY: the submission that used it completed (wgpu said so).
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
        while !matches!(self.wait_idle(1_000_000_000), Ok(true) | Err(_)) {
            log::warn!(
                "crossgpu embed: waiting for {} to finish ({} s)",
                self.shared.name,
                start.elapsed().as_secs()
            );
            if start.elapsed() >= Duration::from_secs(60) {
                log::error!("crossgpu embed: giving up; waiting for the device to go idle");
                // SAFETY: last resort; wgpu does not submit from our thread meanwhile.
                let _ = unsafe { self.shared.raw.device_wait_idle() };
                break;
            }
        }
        let mut pending = std::mem::take(&mut self.pending);
        for p in pending.iter_mut() {
            // The work completed (waited above) or the device is idle.
            self.destroy_bind_group(p);
        }
        Self::destroy_kernel(&self.shared, &mut self.kernel);
    }
}

impl TimelineSemaphore {
    /// A timeline semaphore of an embedded member's wgpu device.
    fn embedded(shared: &Arc<Shared>) -> Result<Self> {
        // SAFETY: timeline semaphores are supported and enabled (checked in EmbeddedMember::new).
        unsafe { Self::with_owner(shared.clone(), 0) }
    }
}
