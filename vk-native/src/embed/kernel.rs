//! A member's compute kernels ([`HalKernel`]): the interface checked, the wgpu-hal pipeline
//! objects made and destroyed on the borrowed device.

use std::sync::Arc;

use super::shared::{Shared, VkApi};
use crate::error::{NativeError, Result};
use crate::kernel::PipelineObjects;
use crate::shader::{BindingKind, Shader};

pub(super) struct HalKernel {
    pub(super) objects: PipelineObjects,
    pub(super) immediate_bytes: u32,
    /// The application buffers it binds after the slots (bindings 1 ..).
    pub(super) buffers: usize,
    /// The fewest bytes each of those bindings may hold (one element, or the whole struct).
    pub(super) min_bytes: Vec<u64>,
}

pub(super) fn make_kernel(shared: &Arc<Shared>, shader: &Shader) -> Result<HalKernel> {
    let i = shader.interface();
    let kinds: Vec<BindingKind> = i.bindings.iter().map(|b| b.kind).collect();
    let rest_read = kinds.iter().skip(2).all(|&k| k == BindingKind::StorageRead);
    if kinds.len() < 2
        || kinds[..2] != [BindingKind::StorageRead, BindingKind::StorageReadWrite]
        || !rest_read
    {
        return Err(NativeError::Unsupported(format!(
            "kernel {}: an embedded member's kernel binds (storage read, storage read_write, storage read ...), not {kinds:?}",
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
    // SAFETY: the shader's SPIR-V is naga's; its interface is the bindings checked above;
    // `destroy_kernel` destroys the objects on this device.
    let objects = unsafe { PipelineObjects::new(&d, shader)? };
    let min_bytes = i.bindings.iter().skip(1).map(|b| b.min_bytes).collect();
    Ok(HalKernel { objects, immediate_bytes: i.immediate_bytes(), buffers: kinds.len() - 1, min_bytes })
}

pub(super) fn destroy_kernel(shared: &Shared, k: &mut HalKernel) {
    // SAFETY: see `make_kernel`.
    let Some(d) = (unsafe { shared.device.as_hal::<VkApi>() }) else { return };
    // SAFETY: no pending submission uses these (the caller waited); made on this device.
    unsafe { k.objects.destroy(&d) };
}
