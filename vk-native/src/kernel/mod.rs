//! Compute pipelines made from [`Shader`]s (WGSL compiled by naga), and their bind groups.
//!
//! Every kernel binds storage or uniform buffers at group 0, bindings 0..n, and takes its small
//! parameters as immediates (push constants): a kernel's bind group is made once per buffer set
//! and reused. A pipeline is made only from a [`Shader`], whose SPIR-V naga wrote, validated and
//! bounds-checked, after its workgroup size, shared memory, immediates and f16 use were checked
//! against the device; a bind group only over ranges that fit the interface and the device's
//! limits. So no dispatch, whatever its workgroups and immediates, reaches past a binding.
//!
//! crossgpu's own kernels ([`Kernel`]) are Vulkan objects made here with ash, so that a command
//! buffer can bind them by handle and be recorded once and replayed
//! ([`crate::Recorder::begin_capture`]): wgpu-hal keeps its pipeline and descriptor-set handles
//! private and records one-time command buffers only. The wgpu embedding, which records into a
//! borrowed wgpu device, keeps wgpu-hal's objects ([`PipelineObjects`]).
//!
//! - `pipeline.rs`: the ash objects of a [`Kernel`]: shader module, layouts and pipeline.
//! - `limits.rs`: a shader checked against the device's limits before a pipeline is made.
//! - `bind_group.rs`: [`BindGroup`]s over checked [`BindRange`]s, and their descriptor sets.
//! - `hal_pipeline.rs`: the wgpu-hal objects of the embedding's pipeline ([`PipelineObjects`]).

mod bind_group;
mod hal_pipeline;
mod limits;
mod pipeline;

use std::sync::Arc;

use ash::vk;

use crate::device::{Device, DeviceId};
use crate::error::Result;
use crate::shader::{BindingKind, Shader};

pub use bind_group::{BindGroup, BindRange};
pub(crate) use hal_pipeline::PipelineObjects;
use limits::check_limits;
use pipeline::RawPipeline;

struct KernelInner {
    device: Device,
    shader: Shader,
    /// Per binding: the kernel never writes it (read-only storage, uniform, or read-write
    /// storage naga finds no store to), for hazard tracking.
    reads_only: Vec<bool>,
    kinds: Vec<BindingKind>,
    objects: RawPipeline,
}

impl Drop for KernelInner {
    fn drop(&mut self) {
        crate::live::dec(&crate::live::KERNELS);
        // SAFETY: bind groups and pending command buffers that use the pipeline hold this value
        // alive, so nothing uses it now; it was made on this device.
        unsafe { self.objects.destroy(self.device.raw()) };
    }
}

/// A compute pipeline of one device. Clones share it.
#[derive(Clone)]
pub struct Kernel(Arc<KernelInner>);

impl std::fmt::Debug for Kernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Kernel").field(&self.0.shader.label()).finish()
    }
}

impl Kernel {
    /// Creates the pipeline of `shader` on `device`, after checking it against the device's
    /// limits (workgroup size and invocations, `var<workgroup>` bytes, immediates, f16).
    pub fn new(device: &Device, shader: &Shader) -> Result<Self> {
        check_limits(device, shader)?;
        // SAFETY: the shader fits the device (checked above); KernelInner's Drop destroys the
        // objects on this device.
        let robust = device.info().caps.robust_buffer_access2;
        let objects = unsafe { RawPipeline::new(device.raw(), shader, robust)? };
        crate::live::inc(&crate::live::KERNELS);
        let bindings = &shader.interface().bindings;
        let inner = KernelInner {
            device: device.clone(),
            shader: shader.clone(),
            reads_only: bindings.iter().map(|b| !b.written).collect(),
            kinds: bindings.iter().map(|b| b.kind).collect(),
            objects,
        };
        Ok(Self(Arc::new(inner)))
    }

    /// The kernel's name: its shader's label (the entry point for crossgpu's kernels).
    pub fn name(&self) -> &str {
        self.0.shader.label()
    }

    /// The shader the kernel was made from, with its interface.
    pub fn shader(&self) -> &Shader {
        &self.0.shader
    }

    /// Per binding: whether the kernel only reads it (never stores to it), for hazard
    /// tracking.
    pub fn reads_only(&self) -> &[bool] {
        &self.0.reads_only
    }

    /// Bytes of immediates each dispatch passes.
    pub fn immediate_bytes(&self) -> u32 {
        self.0.shader.interface().immediate_bytes()
    }

    /// The device whose pipeline this is; the kernel is dispatched on that device only.
    pub fn device_id(&self) -> DeviceId {
        self.0.device.id()
    }

    pub(crate) fn raw_pipeline(&self) -> vk::Pipeline {
        self.0.objects.pipeline
    }

    pub(crate) fn raw_layout(&self) -> vk::PipelineLayout {
        self.0.objects.layout
    }
}
