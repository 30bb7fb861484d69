//! Compute pipelines made by wgpu-hal from SPIR-V, and their bind groups.
//!
//! Every kernel binds storage buffers at group 0, bindings 0..n, and takes its small parameters
//! as immediates (push constants): a kernel's bind group is made once per buffer set and reused.

use std::num::NonZeroU64;
use std::sync::Arc;

use wgpu_hal::Device as _;

use crate::buffer::BufferId;
use crate::device::{Device, DeviceId};
use crate::error::{map_hal_device, NativeError, Result};
use crate::GpuBuffer;

/// A byte range of a buffer bound as one storage buffer.
#[derive(Clone, Copy)]
pub struct BindRange<'a> {
    pub buffer: &'a dyn GpuBuffer,
    pub offset: u64,
    pub size: u64,
}

impl<'a> BindRange<'a> {
    /// All of `buffer`.
    pub fn whole(buffer: &'a dyn GpuBuffer) -> Self {
        Self { buffer, offset: 0, size: buffer.size() }
    }
}

/// The resource interface of a kernel.
#[derive(Debug, Clone)]
pub struct KernelLayout {
    /// One entry per binding 0..n of group 0: `true` for `read`, `false` for `read_write`.
    pub read_only: Vec<bool>,
    /// Bytes of immediates (push constants), a multiple of 4.
    pub immediate_bytes: u32,
}

struct KernelInner {
    device: Device,
    name: String,
    layout: KernelLayout,
    // Destroyed in Drop in reverse order of creation.
    module: Option<wgpu_hal::vulkan::ShaderModule>,
    bgl: Option<wgpu_hal::vulkan::BindGroupLayout>,
    pipeline_layout: Option<wgpu_hal::vulkan::PipelineLayout>,
    pipeline: Option<wgpu_hal::vulkan::ComputePipeline>,
}

impl Drop for KernelInner {
    fn drop(&mut self) {
        crate::live::dec(&crate::live::KERNELS);
        let d = &self.device.shared.hal;
        // SAFETY: bind groups and pending command buffers that use these hold this value alive,
        // so nothing uses them now; destroyed in reverse order of creation.
        unsafe {
            if let Some(p) = self.pipeline.take() {
                d.destroy_compute_pipeline(p);
            }
            if let Some(p) = self.pipeline_layout.take() {
                d.destroy_pipeline_layout(p);
            }
            if let Some(b) = self.bgl.take() {
                d.destroy_bind_group_layout(b);
            }
            if let Some(m) = self.module.take() {
                d.destroy_shader_module(m);
            }
        }
    }
}

/// A compute pipeline of one device. Clones share it.
#[derive(Clone)]
pub struct Kernel(Arc<KernelInner>);

impl std::fmt::Debug for Kernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Kernel").field(&self.0.name).finish()
    }
}

impl Kernel {
    /// Creates the pipeline for `entry` of a SPIR-V module whose interface is `layout`.
    pub fn new(
        device: &Device,
        name: &str,
        spirv: &[u32],
        entry: &str,
        layout: &KernelLayout,
    ) -> Result<Self> {
        let d = &device.shared.hal;
        let err = |what: &str, e: String| NativeError::Unsupported(format!("kernel {name}: {what}: {e}"));
        let desc = wgpu_hal::ShaderModuleDescriptor {
            label: Some(name),
            runtime_checks: wgpu_types::ShaderRuntimeChecks::unchecked(),
        };
        crate::live::inc(&crate::live::KERNELS);
        let mut inner = KernelInner {
            device: device.clone(),
            name: name.to_string(),
            layout: layout.clone(),
            module: None,
            bgl: None,
            pipeline_layout: None,
            pipeline: None,
        };
        // SAFETY: the SPIR-V was produced and validated by naga at build time; on any error below
        // `inner`'s Drop destroys what was created so far.
        unsafe {
            inner.module = Some(
                d.create_shader_module(&desc, wgpu_hal::ShaderInput::SpirV(spirv))
                    .map_err(|e| err("shader module", format!("{e}")))?,
            );
            let entries: Vec<_> = layout
                .read_only
                .iter()
                .enumerate()
                .map(|(i, &ro)| wgpu_types::BindGroupLayoutEntry {
                    binding: i as u32,
                    visibility: wgpu_types::ShaderStages::COMPUTE,
                    ty: wgpu_types::BindingType::Buffer {
                        ty: wgpu_types::BufferBindingType::Storage { read_only: ro },
                        has_dynamic_offset: false,
                        min_binding_size: None,
                    },
                    count: None,
                })
                .collect();
            inner.bgl = Some(
                d.create_bind_group_layout(&wgpu_hal::BindGroupLayoutDescriptor {
                    label: Some(name),
                    flags: wgpu_hal::BindGroupLayoutFlags::empty(),
                    entries: &entries,
                })
                .map_err(map_hal_device("vkCreateDescriptorSetLayout"))?,
            );
            inner.pipeline_layout = Some(
                d.create_pipeline_layout(&wgpu_hal::PipelineLayoutDescriptor {
                    label: Some(name),
                    flags: wgpu_hal::PipelineLayoutFlags::empty(),
                    bind_group_layouts: &[inner.bgl.as_ref()],
                    immediate_size: layout.immediate_bytes,
                })
                .map_err(map_hal_device("vkCreatePipelineLayout"))?,
            );
            let constants = Default::default();
            inner.pipeline = Some(
                d.create_compute_pipeline(&wgpu_hal::ComputePipelineDescriptor {
                    label: Some(name),
                    layout: inner.pipeline_layout.as_ref().expect("made above"),
                    stage: wgpu_hal::ProgrammableStage {
                        module: inner.module.as_ref().expect("made above"),
                        entry_point: entry,
                        constants: &constants,
                        zero_initialize_workgroup_memory: false,
                    },
                    cache: None,
                })
                .map_err(|e| err("pipeline", format!("{e}")))?,
            );
        }
        Ok(Self(Arc::new(inner)))
    }

    pub fn name(&self) -> &str {
        &self.0.name
    }

    pub fn layout(&self) -> &KernelLayout {
        &self.0.layout
    }

    pub fn device_id(&self) -> DeviceId {
        self.0.device.id()
    }

    /// Makes a bind group over whole `buffers` (bindings 0..n in order).
    pub fn bind(&self, buffers: &[&dyn GpuBuffer]) -> Result<BindGroup> {
        let ranges: Vec<BindRange<'_>> = buffers.iter().map(|b| BindRange::whole(*b)).collect();
        self.bind_ranges(&ranges)
    }

    /// Makes a bind group over buffer ranges (bindings 0..n in order). Each range must fit in
    /// its buffer and in the device's `maxStorageBufferRange`, and start at a multiple of
    /// `minStorageBufferOffsetAlignment`.
    pub fn bind_ranges(&self, ranges: &[BindRange<'_>]) -> Result<BindGroup> {
        let k = &self.0;
        if ranges.len() != k.layout.read_only.len() {
            return Err(NativeError::Unsupported(format!(
                "kernel {} takes {} buffers, {} given",
                k.name,
                k.layout.read_only.len(),
                ranges.len()
            )));
        }
        let caps = &k.device.info().caps;
        for r in ranges {
            if r.buffer.device_id() != k.device.id() {
                return Err(NativeError::Unsupported(format!(
                    "buffer {:?} belongs to another device than kernel {}",
                    r.buffer.id(),
                    k.name
                )));
            }
            if r.size == 0 || r.offset.checked_add(r.size).is_none_or(|e| e > r.buffer.size()) {
                return Err(NativeError::Unsupported(format!(
                    "kernel {}: binding {}..+{} of a {}-byte buffer",
                    k.name,
                    r.offset,
                    r.size,
                    r.buffer.size()
                )));
            }
            if r.size > caps.max_storage_buffer_range {
                return Err(NativeError::Unsupported(format!(
                    "kernel {}: a binding of {} bytes exceeds the device's maxStorageBufferRange ({} bytes)",
                    k.name, r.size, caps.max_storage_buffer_range
                )));
            }
            if r.offset % caps.min_storage_buffer_offset_alignment.max(1) != 0 {
                return Err(NativeError::Unsupported(format!(
                    "kernel {}: binding offset {} is not a multiple of minStorageBufferOffsetAlignment {}",
                    k.name, r.offset, caps.min_storage_buffer_offset_alignment
                )));
            }
        }
        let bindings: Vec<_> = ranges
            .iter()
            .map(|r| {
                wgpu_hal::BufferBinding::new_unchecked(r.buffer.hal(), r.offset, NonZeroU64::new(r.size))
            })
            .collect();
        let entries: Vec<_> = (0..ranges.len() as u32)
            .map(|i| wgpu_hal::BindGroupEntry { binding: i, resource_index: i, count: 1 })
            .collect();
        let desc = wgpu_hal::BindGroupDescriptor {
            label: Some(&k.name),
            layout: k.bgl.as_ref().expect("alive"),
            buffers: &bindings,
            samplers: &[],
            textures: &[],
            entries: &entries,
            acceleration_structures: &[],
            external_textures: &[],
        };
        // SAFETY: the ranges are inside live buffers of this device and within the device's
        // binding limits (checked above); the bind group keeps the buffers and the kernel alive.
        let hal = unsafe { k.device.shared.hal.create_bind_group(&desc) }
            .map_err(map_hal_device("vkAllocateDescriptorSets"))?;
        crate::live::inc(&crate::live::BIND_GROUPS);
        Ok(BindGroup(Arc::new(BindGroupInner {
            hal: Some(hal),
            kernel: self.clone(),
            buffers: ranges.iter().map(|r| r.buffer.keep_alive()).collect(),
            ids: ranges.iter().map(|r| r.buffer.id()).collect(),
        })))
    }

    pub(crate) fn hal_pipeline(&self) -> &wgpu_hal::vulkan::ComputePipeline {
        self.0.pipeline.as_ref().expect("alive")
    }

    pub(crate) fn hal_layout(&self) -> &wgpu_hal::vulkan::PipelineLayout {
        self.0.pipeline_layout.as_ref().expect("alive")
    }
}

struct BindGroupInner {
    hal: Option<wgpu_hal::vulkan::BindGroup>,
    kernel: Kernel,
    buffers: Vec<Arc<dyn std::any::Any + Send + Sync>>,
    ids: Vec<BufferId>,
}

impl Drop for BindGroupInner {
    fn drop(&mut self) {
        crate::live::dec(&crate::live::BIND_GROUPS);
        if let Some(g) = self.hal.take() {
            // SAFETY: pending command buffers that use the group hold this value alive.
            unsafe { self.kernel.0.device.shared.hal.destroy_bind_group(g) };
        }
        self.buffers.clear();
    }
}

/// A kernel's buffers bound once, reused by every dispatch over the same buffers.
#[derive(Clone)]
pub struct BindGroup(Arc<BindGroupInner>);

impl BindGroup {
    pub fn kernel(&self) -> &Kernel {
        &self.0.kernel
    }

    /// The bound buffers, in binding order.
    pub fn buffer_ids(&self) -> &[BufferId] {
        &self.0.ids
    }

    pub(crate) fn hal(&self) -> &wgpu_hal::vulkan::BindGroup {
        self.0.hal.as_ref().expect("alive")
    }

    pub(crate) fn keep_alive(&self) -> Arc<dyn std::any::Any + Send + Sync> {
        self.0.clone()
    }
}
