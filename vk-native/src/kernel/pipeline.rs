//! The Vulkan objects of one of crossgpu's kernels ([`RawPipeline`]), made with ash so that a
//! command buffer can bind them by handle and be recorded once and replayed: its shader module,
//! descriptor-set layout, pipeline layout and compute pipeline.

use std::ffi::CString;
use std::sync::Mutex;

use ash::vk;

use crate::error::{map_vk, NativeError, Result};
use crate::shader::{BindingKind, Shader};

/// The Vulkan objects of one of crossgpu's kernels, made with ash.
pub(super) struct RawPipeline {
    module: vk::ShaderModule,
    pub(super) set_layout: vk::DescriptorSetLayout,
    pub(super) layout: vk::PipelineLayout,
    pub(super) pipeline: vk::Pipeline,
    /// The pools bind groups are allocated from (externally synchronised, hence the lock).
    pub(super) pools: Mutex<Vec<vk::DescriptorPool>>,
}

/// The Vulkan descriptor type of a binding.
pub(super) fn descriptor_type(kind: BindingKind) -> vk::DescriptorType {
    match kind {
        BindingKind::Uniform => vk::DescriptorType::UNIFORM_BUFFER,
        BindingKind::StorageRead | BindingKind::StorageReadWrite => vk::DescriptorType::STORAGE_BUFFER,
    }
}

impl RawPipeline {
    /// Creates the pipeline of `shader`. On error, what was made is destroyed again.
    ///
    /// # Safety
    /// `shader` must fit `d`'s limits (workgroup size, shared memory, immediates, f16: checked
    /// by [`Kernel::new`]); the objects must be destroyed with [`RawPipeline::destroy`] on the
    /// same device.
    ///
    /// [`Kernel::new`]: super::compute::Kernel::new
    /// `robust`: the device has robustBufferAccess2 enabled ([`Shader::spirv_for`]).
    pub(super) unsafe fn new(d: &ash::Device, shader: &Shader, robust: bool) -> Result<Self> {
        let name = shader.label();
        let iface = shader.interface();
        let mut o = Self {
            module: vk::ShaderModule::null(),
            set_layout: vk::DescriptorSetLayout::null(),
            layout: vk::PipelineLayout::null(),
            pipeline: vk::Pipeline::null(),
            pools: Mutex::new(Vec::new()),
        };
        let entry_c = CString::new(iface.entry.as_str()).map_err(|_| {
            NativeError::Unsupported(format!("kernel {name}: entry point {:?} has a NUL", iface.entry))
        })?;
        let immediate_bytes = iface.immediate_bytes();
        // SAFETY: naga wrote and validated the SPIR-V (a `Shader` exists only so) and the
        // caller checked it against the device; each object is made from the ones before it,
        // on `d`, and the create infos outlive the calls.
        let r: Result<()> = unsafe {
            (|| {
                o.module = d
                    .create_shader_module(
                        &vk::ShaderModuleCreateInfo::default().code(shader.spirv_for(robust)),
                        None,
                    )
                    .map_err(map_vk("vkCreateShaderModule"))?;
                let entries: Vec<_> = iface
                    .bindings
                    .iter()
                    .map(|b| {
                        vk::DescriptorSetLayoutBinding::default()
                            .binding(b.binding)
                            .descriptor_type(descriptor_type(b.kind))
                            .descriptor_count(1)
                            .stage_flags(vk::ShaderStageFlags::COMPUTE)
                    })
                    .collect();
                o.set_layout = d
                    .create_descriptor_set_layout(
                        &vk::DescriptorSetLayoutCreateInfo::default().bindings(&entries),
                        None,
                    )
                    .map_err(map_vk("vkCreateDescriptorSetLayout"))?;
                let ranges = [vk::PushConstantRange::default()
                    .stage_flags(vk::ShaderStageFlags::COMPUTE)
                    .offset(0)
                    .size(immediate_bytes)];
                let set_layouts = [o.set_layout];
                let mut info = vk::PipelineLayoutCreateInfo::default().set_layouts(&set_layouts);
                if immediate_bytes > 0 {
                    info = info.push_constant_ranges(&ranges);
                }
                o.layout = d.create_pipeline_layout(&info, None).map_err(map_vk("vkCreatePipelineLayout"))?;
                let stage = vk::PipelineShaderStageCreateInfo::default()
                    .stage(vk::ShaderStageFlags::COMPUTE)
                    .module(o.module)
                    .name(&entry_c);
                let info = [vk::ComputePipelineCreateInfo::default().stage(stage).layout(o.layout)];
                o.pipeline = d
                    .create_compute_pipelines(vk::PipelineCache::null(), &info, None)
                    .map_err(|(_, e)| map_vk("vkCreateComputePipelines")(e))?[0];
                Ok(())
            })()
        };
        match r {
            Ok(()) => Ok(o),
            Err(e) => {
                // SAFETY: nothing made above has been used.
                unsafe { o.destroy(d) };
                Err(e)
            }
        }
    }

    /// Destroys the objects (and every set of the pools), in reverse order of creation.
    ///
    /// # Safety
    /// `d` is the device they were made on, and no pending work uses them.
    pub(super) unsafe fn destroy(&mut self, d: &ash::Device) {
        // SAFETY: the caller's contract; destroying a null handle is a no-op.
        unsafe {
            for pool in self.pools.get_mut().unwrap_or_else(|p| p.into_inner()).drain(..) {
                d.destroy_descriptor_pool(pool, None);
            }
            d.destroy_pipeline(self.pipeline, None);
            d.destroy_pipeline_layout(self.layout, None);
            d.destroy_descriptor_set_layout(self.set_layout, None);
            d.destroy_shader_module(self.module, None);
        }
    }
}
