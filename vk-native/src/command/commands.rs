//! The commands a recorder records — compute dispatches, copies, fills and global memory
//! barriers — into the command buffer commands go to: the recording in progress, or the open one.

use std::num::NonZeroU64;
use std::sync::Arc;

use ash::vk;

use super::recorder::{KeepAlive, Recorder};
use crate::access::Access;
use crate::buffer::GpuBuffer;
use crate::error::{NativeError, Result};
use crate::kernel::BindGroup;

impl Recorder {
    /// The command buffer commands go to: the recording in progress, or the open one.
    fn target(&mut self) -> Result<vk::CommandBuffer> {
        if let Some(c) = &self.capture {
            return Ok(c.cmd);
        }
        // SAFETY: the handle is only used while the encoder records (until `close`).
        Ok(unsafe { self.open()?.encoder.raw_handle() })
    }

    /// Notes that the command just recorded copies to or from `b`, if the host maps it (a
    /// staging buffer): the host may not touch it until the submission that runs it completed.
    fn note_use(&mut self, b: &dyn GpuBuffer) {
        let Some(u) = b.gpu_use() else { return };
        let uses = match (self.capture.as_mut(), self.active.as_mut()) {
            (Some(c), _) => &mut c.uses,
            (None, Some(a)) => &mut a.uses,
            (None, None) => return,
        };
        if !uses.iter().any(|x| Arc::ptr_eq(x, &u)) {
            uses.push(u);
        }
    }

    /// Keeps `k` alive as long as the command buffer commands go to now.
    fn keep(&mut self, k: KeepAlive) {
        if let Some(c) = self.capture.as_mut() {
            c.keep.push(k);
        } else if let Some(a) = self.active.as_mut() {
            a.keep.push(k);
        }
    }

    /// Counts a command (a dispatch if `dispatch`) recorded where commands go now.
    fn count(&mut self, dispatch: bool) {
        if let Some(c) = self.capture.as_mut() {
            c.commands += 1;
            c.dispatches += dispatch as u64;
        } else {
            self.commands += 1;
            self.dispatches += dispatch as u64;
        }
    }

    /// Records a dispatch of `group`'s kernel with `immediates` (as many words as the kernel's
    /// layout declares) over `workgroups`.
    pub fn dispatch(&mut self, group: &BindGroup, immediates: &[u32], workgroups: [u32; 3]) -> Result<()> {
        let k = group.kernel().clone();
        if k.device_id() != self.device.id() {
            return Err(NativeError::Unsupported(format!("kernel {} is of another device", k.name())));
        }
        if immediates.len() * 4 != k.immediate_bytes() as usize {
            return Err(NativeError::Unsupported(format!(
                "kernel {} takes {} bytes of immediates, {} given",
                k.name(),
                k.immediate_bytes(),
                immediates.len() * 4
            )));
        }
        if workgroups.contains(&0) {
            return Ok(());
        }
        let max = self.device.info().caps.max_compute_work_group_count;
        if let Some(axis) = (0..3).find(|&a| workgroups[a] > max[a]) {
            return Err(NativeError::Unsupported(format!(
                "kernel {}: {workgroups:?} workgroups, but the device dispatches at most {} along {} (maxComputeWorkGroupCount {max:?})",
                k.name(),
                max[axis],
                ["x", "y", "z"][axis]
            )));
        }
        let cb = self.target()?;
        let d = self.device.raw();
        // SAFETY: the command buffer is recording, outside any pass; pipeline, layout and
        // descriptor set are of this device and kept alive with the command buffer (below); the
        // immediates match the layout's size (checked above).
        unsafe {
            d.cmd_bind_pipeline(cb, vk::PipelineBindPoint::COMPUTE, k.raw_pipeline());
            d.cmd_bind_descriptor_sets(
                cb,
                vk::PipelineBindPoint::COMPUTE,
                k.raw_layout(),
                0,
                &[group.raw_set()],
                &[],
            );
            if !immediates.is_empty() {
                let bytes =
                    std::slice::from_raw_parts(immediates.as_ptr().cast::<u8>(), immediates.len() * 4);
                d.cmd_push_constants(cb, k.raw_layout(), vk::ShaderStageFlags::COMPUTE, 0, bytes);
            }
            d.cmd_dispatch(cb, workgroups[0], workgroups[1], workgroups[2]);
        }
        self.keep(group.keep_alive());
        self.count(true);
        self.stamp(|| Arc::from(k.name()));
        Ok(())
    }

    /// Records a copy of `size` bytes (a multiple of 4) between two buffers of this device.
    pub fn copy(
        &mut self,
        src: &dyn GpuBuffer,
        src_offset: u64,
        dst: &dyn GpuBuffer,
        dst_offset: u64,
        size: u64,
    ) -> Result<()> {
        let dev = self.device.id();
        if src.device_id() != dev || dst.device_id() != dev {
            return Err(NativeError::Unsupported("copy between buffers of another device".into()));
        }
        let in_range = |off: u64, b: &dyn GpuBuffer| off.checked_add(size).is_some_and(|e| e <= b.size());
        if !size.is_multiple_of(4)
            || !src_offset.is_multiple_of(4)
            || !dst_offset.is_multiple_of(4)
            || !in_range(src_offset, src)
            || !in_range(dst_offset, dst)
        {
            return Err(NativeError::Unsupported(format!(
                "copy of {size} bytes at {src_offset}->{dst_offset} is unaligned or out of range"
            )));
        }
        let Some(size) = NonZeroU64::new(size) else {
            return Ok(());
        };
        let cb = self.target()?;
        let region = vk::BufferCopy { src_offset, dst_offset, size: size.get() };
        // SAFETY: recording, outside any pass; both buffers are of this device, alive (kept
        // below), and the ranges are checked.
        unsafe {
            self.device.raw().cmd_copy_buffer(cb, src.hal().raw_handle(), dst.hal().raw_handle(), &[region])
        };
        self.keep(src.keep_alive());
        self.keep(dst.keep_alive());
        self.note_use(src);
        self.note_use(dst);
        self.count(false);
        self.stamp(|| Arc::from("copy"));
        Ok(())
    }

    /// Records `vkCmdFillBuffer` of `size` bytes (a multiple of 4) at `offset` with `value`.
    pub fn fill_u32(&mut self, dst: &dyn GpuBuffer, offset: u64, size: u64, value: u32) -> Result<()> {
        if dst.device_id() != self.device.id()
            || !size.is_multiple_of(4)
            || !offset.is_multiple_of(4)
            || offset.checked_add(size).is_none_or(|end| end > dst.size())
        {
            return Err(NativeError::Unsupported("fill out of range or of another device".into()));
        }
        if size == 0 {
            return Ok(());
        }
        let cb = self.target()?;
        // SAFETY: recording state; the buffer is of this device, alive (kept), range checked.
        unsafe { self.device.raw().cmd_fill_buffer(cb, dst.hal().raw_handle(), offset, size, value) };
        self.keep(dst.keep_alive());
        self.note_use(dst);
        self.count(false);
        Ok(())
    }

    /// Records a global memory barrier: accesses `src` before it happen-before and are visible
    /// to accesses `dst` after it.
    pub fn barrier(&mut self, src: Access, dst: Access) -> Result<()> {
        let (src_stage, src_access) = crate::conv::access_to_vk(src);
        let (dst_stage, dst_access) = crate::conv::access_to_vk(dst);
        let src_stage = if src_stage.is_empty() { vk::PipelineStageFlags::TOP_OF_PIPE } else { src_stage };
        let dst_stage = if dst_stage.is_empty() { vk::PipelineStageFlags::BOTTOM_OF_PIPE } else { dst_stage };
        let cb = self.target()?;
        let mb = [vk::MemoryBarrier::default().src_access_mask(src_access).dst_access_mask(dst_access)];
        // SAFETY: recording state; a plain memory barrier outside any render pass.
        unsafe {
            self.device.raw().cmd_pipeline_barrier(
                cb,
                src_stage,
                dst_stage,
                vk::DependencyFlags::empty(),
                &mb,
                &[],
                &[],
            )
        };
        Ok(())
    }
}
