//! [`Kernel`]: a compute pipeline and its layouts, made with ash from a checked [`Shader`].

use std::sync::Arc;

use ash::vk;

use crate::device::{Device, DeviceId};
use crate::error::Result;
use crate::shader::{BindingKind, Shader};

use super::limits::check_limits;
use super::pipeline::RawPipeline;

pub(super) struct KernelInner {
    pub(super) device: Device,
    pub(super) shader: Shader,
    /// Per binding: the kernel never writes it (read-only storage, uniform, or read-write
    /// storage naga finds no store to), for hazard tracking.
    pub(super) reads_only: Vec<bool>,
    pub(super) kinds: Vec<BindingKind>,
    pub(super) objects: RawPipeline,
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
pub struct Kernel(pub(super) Arc<KernelInner>);

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
