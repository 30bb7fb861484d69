//! The two kinds of work an embedded member does, each recorded into a fresh wgpu command encoder
//! and submitted with the application's own queue: a copy into imported host memory
//! ([`EmbeddedMember::submit_copy`]) and one compute kernel over (imported host memory, an
//! application buffer) ([`EmbeddedMember::submit_kernel`]).

use std::num::NonZeroU64;

use wgpu_hal::{CommandEncoder as _, Device as _};

use super::shared::VkApi;
use super::slots::EmbeddedSlots;
use super::submit::submit_raw;
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
        let (index, done) = submit_raw(&self.shared, claim, None, Some(signal), |_, enc| {
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
        let result = submit_raw(&self.shared, claim, Some(wait), None, |_, enc| {
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
}
