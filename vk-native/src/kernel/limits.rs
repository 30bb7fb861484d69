//! Refuses a shader on a device where it exceeds a limit (workgroup size and invocations,
//! `var<workgroup>` bytes, immediates) or needs f16 arithmetic, cooperative matrices or integer
//! dot products the device was not opened with:
//! Vulkan leaves those undefined.

use crate::device::Device;
use crate::error::{NativeError, Result};
use crate::shader::{Interface, Shader};

/// Refuses `shader` on `device` where it exceeds a limit (or needs f16 arithmetic the device
/// was not opened with): Vulkan leaves those undefined.
pub(super) fn check_limits(device: &Device, shader: &Shader) -> Result<()> {
    let caps = &device.info().caps;
    let i: &Interface = shader.interface();
    let name = shader.label();
    let refuse = |why: String| Err(NativeError::Unsupported(format!("kernel {name}: {why}")));
    let size = i.workgroup_size;
    let max = caps.max_compute_work_group_size;
    if let Some(a) = (0..3).find(|&a| size[a] > max[a]) {
        return refuse(format!(
            "@workgroup_size {size:?} exceeds the device's maxComputeWorkGroupSize {max:?} along {}",
            ["x", "y", "z"][a]
        ));
    }
    let invocations = size.iter().map(|&s| u64::from(s)).product::<u64>();
    if invocations > u64::from(caps.max_compute_work_group_invocations) {
        return refuse(format!(
            "@workgroup_size {size:?} is {invocations} invocations; the device allows {} (maxComputeWorkGroupInvocations)",
            caps.max_compute_work_group_invocations
        ));
    }
    if i.workgroup_bytes > caps.max_compute_shared_memory_size {
        return refuse(format!(
            "{} bytes of var<workgroup> memory; the device allows {} (maxComputeSharedMemorySize)",
            i.workgroup_bytes, caps.max_compute_shared_memory_size
        ));
    }
    if i.immediate_bytes() > caps.max_push_constants_size {
        return refuse(format!(
            "{} bytes of immediates; the device allows {} (maxPushConstantsSize)",
            i.immediate_bytes(),
            caps.max_push_constants_size
        ));
    }
    if i.uses_f16 && !device.f16_enabled() {
        return refuse("it uses f16 arithmetic (enable f16), which this device was not opened with (shaderFloat16 and 16-bit storage)".into());
    }
    if i.uses_cooperative_matrix && !device.cooperative_matrix_enabled() {
        return refuse(format!(
            "it uses cooperative matrices and subgroups, which {} does not offer (f16 products into f32: VK_KHR_cooperative_matrix)",
            device.info().name
        ));
    }
    if i.uses_integer_dot_product && !caps.integer_dot_product {
        return refuse(format!(
            "it uses integer dot products (dot4I8Packed, dot4U8Packed), which {} does not offer (shaderIntegerDotProduct)",
            device.info().name
        ));
    }
    // The configurations crossgpu checks for: square, f16 inputs, f32 sums, of a side offered.
    for &(side, role, scalar) in &i.cooperative_matrices {
        let scalar_ok = scalar == if role == 'C' { "f32" } else { "f16" };
        if !scalar_ok || !caps.cooperative_matrix_sides.contains(&side) {
            return refuse(format!(
                "a cooperative matrix of role {role}, side {side} and {scalar} elements: {} offers f16 inputs summed into f32 on sides {:?} (square)",
                device.info().name,
                caps.cooperative_matrix_sides
            ));
        }
    }
    Ok(())
}
