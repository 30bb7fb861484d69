//! The work an embedded member does, each recorded into a fresh wgpu command encoder and
//! submitted with the application's own queue: a copy into imported host memory
//! ([`EmbeddedMember::submit_copy`]), dispatches of one of its kernels over (imported host
//! memory, application buffers) ([`EmbeddedMember::submit_kernel`],
//! [`EmbeddedMember::submit_dispatches`]), and a submission that only waits or signals
//! ([`EmbeddedMember::submit_marker`]).

use std::num::NonZeroU64;

use ash::vk;
use wgpu_hal::CommandEncoder as _;

use super::kernel::HalKernel;
use super::shared::VkApi;
use super::slots::EmbeddedSlots;
use super::submit::{global_barrier, submit_raw};
use super::{EmbeddedMember, Pending};
use crate::error::{NativeError, Result};
use crate::semaphore::TimelineSemaphore;

impl EmbeddedMember {
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
        self.check_slots(slots)?;
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
        let (claim, raw_buf) = self.claim(&[buffer])?;
        // SAFETY: a non-owning wgpu-hal wrapper of a live handle of this device (wgpu checked
        // it in `claim`), never destroyed through it.
        let src = unsafe { wgpu_hal::vulkan::Buffer::from_raw(raw_buf[0]) };
        let slot_hal = slots.hal();
        let (index, done) = submit_raw(&self.shared, claim, None, Some(signal), |_, enc| {
            let region = wgpu_hal::BufferCopy { src_offset: offset, dst_offset: slot_offset, size };
            // SAFETY: both buffers are of this device and alive; the ranges are checked above.
            unsafe { enc.copy_buffer_to_buffer(&src, slot_hal, std::iter::once(region)) };
        })?;
        self.pending.push_back(Pending {
            index,
            done,
            bind_groups: Vec::new(),
            _buffers: vec![buffer.clone()],
            _slots: Some(slots.clone()),
            _timelines: vec![signal.0.clone()],
        });
        Ok(())
    }

    /// A submission with no commands that waits for `wait` and then signals `signal` (each a
    /// timeline of this device, either or both): a member with nothing to do in a step of a
    /// protocol still takes part in its order.
    pub fn submit_marker(
        &mut self,
        wait: Option<(&TimelineSemaphore, u64)>,
        signal: Option<(&TimelineSemaphore, u64)>,
    ) -> Result<()> {
        for (sem, _) in wait.iter().chain(signal.iter()) {
            self.check_own(sem)?;
        }
        self.recycle()?;
        let (claim, _) = self.claim(&[])?;
        let (index, done) = submit_raw(&self.shared, claim, wait, signal, |_, _| {})?;
        self.pending.push_back(Pending {
            index,
            done,
            bind_groups: Vec::new(),
            _buffers: Vec::new(),
            _slots: None,
            _timelines: wait.iter().chain(signal.iter()).map(|(s, _)| (*s).clone()).collect(),
        });
        Ok(())
    }

    /// Waits for `wait` (a timeline of this device), then runs the member's kernel 0 once over
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
        let run = EmbeddedDispatch {
            buffers: vec![BufferRange { buffer, offset: dst_offset, bytes: dst_bytes }],
            immediates: immediates.to_vec(),
            groups,
        };
        self.submit_dispatches(0, slots, slot_bytes, &[run], Some(wait))
    }

    /// Waits for `wait` (a timeline of this device, if any), then runs kernel `kernel` (0, or
    /// an index [`EmbeddedMember::add_kernel`] gave) once per dispatch, in order, in one
    /// submission, each over the first `slot_bytes` of `slots` (binding 0) and its buffer
    /// ranges (bindings 1 ..: the first written, the rest read), with a memory barrier
    /// between two dispatches (a later one sees an earlier one's writes). Every range must lie
    /// inside a live buffer of this member's device with STORAGE and COPY_DST usage (wgpu
    /// checks the buffers before anything is recorded), start at a multiple of
    /// `minStorageBufferOffsetAlignment` and fit `maxStorageBufferRange`.
    pub fn submit_dispatches(
        &mut self,
        kernel: usize,
        slots: &EmbeddedSlots,
        slot_bytes: u64,
        dispatches: &[EmbeddedDispatch<'_>],
        wait: Option<(&TimelineSemaphore, u64)>,
    ) -> Result<()> {
        if let Some((sem, _)) = wait {
            self.check_own(sem)?;
        }
        self.check_slots(slots)?;
        self.recycle()?;
        let k = self.kernels.get(kernel).ok_or_else(|| {
            NativeError::Unsupported(format!("kernel {kernel}: the member has {}", self.kernels.len()))
        })?;
        if slot_bytes == 0 || slot_bytes > slots.size() || slot_bytes > self.shared.max_storage_range {
            return Err(NativeError::Unsupported(format!(
                "a binding of {slot_bytes} bytes of slots holding {} (maxStorageBufferRange {})",
                slots.size(),
                self.shared.max_storage_range
            )));
        }
        for d in dispatches {
            self.check_dispatch(k, d)?;
        }
        // Each distinct buffer claimed once; `raw[slot[b]]` is dispatch b's handles.
        let mut buffers: Vec<&wgpu::Buffer> = Vec::new();
        for r in dispatches.iter().flat_map(|d| &d.buffers) {
            if !buffers.contains(&r.buffer) {
                buffers.push(r.buffer);
            }
        }
        let (claim, raw) = self.claim(&buffers)?;
        let mut bind_groups = Vec::with_capacity(dispatches.len());
        let made: Result<()> = (|| {
            // SAFETY: as in `make_kernel`; every bind group made here is destroyed in
            // `recycle`/`Drop` after the submission that uses it completed, or below if it is
            // never submitted.
            let d = unsafe { self.shared.device.as_hal::<VkApi>() }
                .ok_or_else(|| NativeError::Unsupported("not a Vulkan device".into()))?;
            for run in dispatches {
                let hal: Vec<wgpu_hal::vulkan::Buffer> = run
                    .buffers
                    .iter()
                    .map(|r| {
                        let at = buffers.iter().position(|b| *b == r.buffer).expect("claimed above");
                        // SAFETY: a non-owning wrapper of a handle wgpu checked in `claim`,
                        // never destroyed through it.
                        unsafe { wgpu_hal::vulkan::Buffer::from_raw(raw[at]) }
                    })
                    .collect();
                let mut bindings =
                    vec![wgpu_hal::BufferBinding::new_unchecked(slots.hal(), 0, NonZeroU64::new(slot_bytes))];
                for (h, r) in hal.iter().zip(&run.buffers) {
                    bindings.push(wgpu_hal::BufferBinding::new_unchecked(
                        h,
                        r.offset,
                        NonZeroU64::new(r.bytes),
                    ));
                }
                // SAFETY: the ranges are inside live buffers of this device and within its
                // limits (`check_dispatch`).
                bind_groups.push(unsafe { k.objects.bind(&d, "crossgpu collective", &bindings)? });
            }
            Ok(())
        })();
        let pipeline = k.objects.pipeline.as_ref().expect("alive");
        let layout = k.objects.layout.as_ref().expect("alive");
        let result = made.and_then(|()| {
            let groups = &bind_groups;
            submit_raw(&self.shared, claim, wait, None, |raw_dev, enc| {
                // SAFETY: the handle of the encoder wgpu lent for this recording, used only for
                // barriers inside it.
                let cmd = unsafe { enc.raw_handle() };
                for (i, (run, bg)) in dispatches.iter().zip(groups).enumerate() {
                    if i > 0 {
                        global_barrier(
                            raw_dev,
                            cmd,
                            vk::PipelineStageFlags::COMPUTE_SHADER,
                            vk::AccessFlags::SHADER_WRITE,
                            vk::PipelineStageFlags::COMPUTE_SHADER,
                            vk::AccessFlags::SHADER_READ | vk::AccessFlags::SHADER_WRITE,
                        );
                    }
                    // SAFETY: pipeline, layout and bind group are of this device and alive
                    // until the submission completed; the immediates match the layout's size.
                    unsafe {
                        enc.begin_compute_pass(&wgpu_hal::ComputePassDescriptor {
                            label: None,
                            timestamp_writes: None,
                        });
                        enc.set_compute_pipeline(pipeline);
                        enc.set_bind_group(layout, 0, bg, &[]);
                        enc.set_immediates(layout, 0, &run.immediates);
                        enc.dispatch_workgroups([run.groups, 1, 1]);
                        enc.end_compute_pass();
                    }
                }
            })
        });
        match result {
            Ok((index, done)) => {
                self.pending.push_back(Pending {
                    index,
                    done,
                    bind_groups,
                    _buffers: buffers.iter().map(|b| (*b).clone()).collect(),
                    _slots: Some(slots.clone()),
                    _timelines: wait.iter().map(|(s, _)| (*s).clone()).collect(),
                });
                Ok(())
            }
            Err(e) => {
                // Never submitted: the bind groups are unused.
                self.destroy_bind_groups(&mut bind_groups);
                Err(e)
            }
        }
    }

    /// Checks one dispatch of kernel `k` against its interface and the device's limits.
    fn check_dispatch(&self, k: &HalKernel, d: &EmbeddedDispatch<'_>) -> Result<()> {
        if d.buffers.len() != k.buffers {
            return Err(NativeError::Unsupported(format!(
                "the kernel binds {} application buffers, {} given",
                k.buffers,
                d.buffers.len()
            )));
        }
        for (r, &min) in d.buffers.iter().zip(&k.min_bytes) {
            let inside = r.offset.checked_add(r.bytes).is_some_and(|end| end <= r.buffer.size());
            if r.bytes == 0 || r.bytes < min || !inside {
                return Err(NativeError::Unsupported(format!(
                    "kernel binding of {} bytes at byte {} (at least {min} bytes, inside the buffer's {})",
                    r.bytes,
                    r.offset,
                    r.buffer.size()
                )));
            }
            if !r.buffer.usage().contains(wgpu::BufferUsages::STORAGE) {
                return Err(NativeError::Unsupported("the buffer lacks STORAGE usage".into()));
            }
            if !r.offset.is_multiple_of(self.shared.storage_offset_align) {
                return Err(NativeError::Unsupported(format!(
                    "a binding at byte {}: minStorageBufferOffsetAlignment is {}",
                    r.offset, self.shared.storage_offset_align
                )));
            }
            if r.bytes > self.shared.max_storage_range {
                return Err(NativeError::Unsupported(format!(
                    "a binding of {} bytes; maxStorageBufferRange is {}",
                    r.bytes, self.shared.max_storage_range
                )));
            }
        }
        if d.immediates.len() * 4 != k.immediate_bytes as usize {
            return Err(NativeError::Unsupported(format!(
                "the kernel takes {} bytes of immediates, not {}",
                k.immediate_bytes,
                d.immediates.len() * 4
            )));
        }
        if d.groups == 0 || d.groups > 65_535 {
            return Err(NativeError::Unsupported(format!("{} workgroups (1 to 65535)", d.groups)));
        }
        Ok(())
    }
}

/// A range of an application buffer a kernel binds.
#[derive(Debug, Clone, Copy)]
pub struct BufferRange<'a> {
    /// The buffer, of the member's device.
    pub buffer: &'a wgpu::Buffer,
    /// Where the binding starts, in bytes (a multiple of `minStorageBufferOffsetAlignment`).
    pub offset: u64,
    /// How many bytes it binds.
    pub bytes: u64,
}

/// One dispatch of [`EmbeddedMember::submit_dispatches`]: the application buffer ranges
/// (bindings 1 ..), the immediates and the number of workgroups.
#[derive(Debug, Clone)]
pub struct EmbeddedDispatch<'a> {
    /// Bindings 1 .. in order: the first is written, the rest read.
    pub buffers: Vec<BufferRange<'a>>,
    /// The kernel's immediates, as words.
    pub immediates: Vec<u32>,
    /// Workgroups along x (1 to 65535).
    pub groups: u32,
}
