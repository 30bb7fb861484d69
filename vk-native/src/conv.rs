//! Translation of crossgpu's access kinds to Vulkan stages and access masks, alone here.

use ash::vk;

use crate::access::Access;

pub(crate) fn access_to_vk(a: Access) -> (vk::PipelineStageFlags, vk::AccessFlags) {
    let mut stages = vk::PipelineStageFlags::empty();
    let mut access = vk::AccessFlags::empty();
    if a.contains(Access::COMPUTE_READ) {
        stages |= vk::PipelineStageFlags::COMPUTE_SHADER;
        access |= vk::AccessFlags::SHADER_READ;
    }
    if a.contains(Access::COMPUTE_WRITE) {
        stages |= vk::PipelineStageFlags::COMPUTE_SHADER;
        access |= vk::AccessFlags::SHADER_WRITE;
    }
    if a.contains(Access::TRANSFER_READ) {
        stages |= vk::PipelineStageFlags::TRANSFER;
        access |= vk::AccessFlags::TRANSFER_READ;
    }
    if a.contains(Access::TRANSFER_WRITE) {
        stages |= vk::PipelineStageFlags::TRANSFER;
        access |= vk::AccessFlags::TRANSFER_WRITE;
    }
    if a.contains(Access::HOST_READ) {
        stages |= vk::PipelineStageFlags::HOST;
        access |= vk::AccessFlags::HOST_READ;
    }
    if a.contains(Access::HOST_WRITE) {
        stages |= vk::PipelineStageFlags::HOST;
        access |= vk::AccessFlags::HOST_WRITE;
    }
    (stages, access)
}
