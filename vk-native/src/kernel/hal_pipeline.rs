//! The wgpu-hal objects of one compute pipeline ([`PipelineObjects`]), made and destroyed on a
//! wgpu-hal device the caller lends: what the wgpu embedding, which records into a borrowed wgpu
//! device, binds and dispatches.

use wgpu_hal::Device as _;

use crate::error::{map_hal_device, NativeError, Result};
use crate::shader::{BindingKind, Shader};

/// The wgpu-hal objects of one compute pipeline: group 0 of storage buffers and one block of
/// immediates. Made and destroyed on a wgpu-hal device the caller lends — crossgpu's own
/// ([`Kernel`]) or one borrowed from a wgpu application (`embed/`).
///
/// [`Kernel`]: super::compute::Kernel
pub(crate) struct PipelineObjects {
    module: Option<wgpu_hal::vulkan::ShaderModule>,
    pub(crate) bgl: Option<wgpu_hal::vulkan::BindGroupLayout>,
    pub(crate) layout: Option<wgpu_hal::vulkan::PipelineLayout>,
    pub(crate) pipeline: Option<wgpu_hal::vulkan::ComputePipeline>,
}

impl PipelineObjects {
    /// Creates the pipeline of `shader`. On error, what was made is destroyed again.
    ///
    /// # Safety
    /// The objects must be destroyed with [`PipelineObjects::destroy`] on the same device `d`,
    /// whose limits the shader's workgroup size, shared memory and immediates must fit.
    pub(crate) unsafe fn new(d: &wgpu_hal::vulkan::Device, shader: &Shader) -> Result<Self> {
        let name = shader.label();
        let iface = shader.interface();
        let err = |what: &str, e: String| NativeError::Unsupported(format!("kernel {name}: {what}: {e}"));
        let mut o = Self { module: None, bgl: None, layout: None, pipeline: None };
        let desc = wgpu_hal::ShaderModuleDescriptor {
            label: Some(name),
            runtime_checks: wgpu_types::ShaderRuntimeChecks::unchecked(),
        };
        // SAFETY: naga wrote and validated the SPIR-V (a `Shader` exists only so); each object
        // is made from the ones before it, on `d`.
        let r: Result<()> = unsafe {
            (|| {
                o.module = Some(
                    d.create_shader_module(&desc, wgpu_hal::ShaderInput::SpirV(shader.spirv()))
                        .map_err(|e| err("shader module", format!("{e}")))?,
                );
                let entries: Vec<_> = iface
                    .bindings
                    .iter()
                    .map(|b| wgpu_types::BindGroupLayoutEntry {
                        binding: b.binding,
                        visibility: wgpu_types::ShaderStages::COMPUTE,
                        ty: wgpu_types::BindingType::Buffer {
                            ty: match b.kind {
                                BindingKind::StorageRead => {
                                    wgpu_types::BufferBindingType::Storage { read_only: true }
                                }
                                BindingKind::StorageReadWrite => {
                                    wgpu_types::BufferBindingType::Storage { read_only: false }
                                }
                                BindingKind::Uniform => wgpu_types::BufferBindingType::Uniform,
                            },
                            has_dynamic_offset: false,
                            min_binding_size: None,
                        },
                        count: None,
                    })
                    .collect();
                o.bgl = Some(
                    d.create_bind_group_layout(&wgpu_hal::BindGroupLayoutDescriptor {
                        label: Some(name),
                        flags: wgpu_hal::BindGroupLayoutFlags::empty(),
                        entries: &entries,
                    })
                    .map_err(map_hal_device("vkCreateDescriptorSetLayout"))?,
                );
                o.layout = Some(
                    d.create_pipeline_layout(&wgpu_hal::PipelineLayoutDescriptor {
                        label: Some(name),
                        flags: wgpu_hal::PipelineLayoutFlags::empty(),
                        bind_group_layouts: &[o.bgl.as_ref()],
                        immediate_size: iface.immediate_bytes(),
                    })
                    .map_err(map_hal_device("vkCreatePipelineLayout"))?,
                );
                let constants = Default::default();
                o.pipeline = Some(
                    d.create_compute_pipeline(&wgpu_hal::ComputePipelineDescriptor {
                        label: Some(name),
                        layout: o.layout.as_ref().expect("made above"),
                        stage: wgpu_hal::ProgrammableStage {
                            module: o.module.as_ref().expect("made above"),
                            entry_point: &iface.entry,
                            constants: &constants,
                            zero_initialize_workgroup_memory: false,
                        },
                        cache: None,
                    })
                    .map_err(|e| err("pipeline", format!("{e}")))?,
                );
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

    /// A bind group over `bindings` (bindings 0..n in order) for this pipeline's layout.
    ///
    /// # Safety
    /// `d` is the device the objects were made on; every binding lies inside a live buffer of
    /// that device, within its binding limits; the bind group is destroyed on `d` after the
    /// last submission that uses it completed.
    pub(crate) unsafe fn bind(
        &self,
        d: &wgpu_hal::vulkan::Device,
        label: &str,
        bindings: &[wgpu_hal::BufferBinding<'_, wgpu_hal::vulkan::Buffer>],
    ) -> Result<wgpu_hal::vulkan::BindGroup> {
        let entries: Vec<_> = (0..bindings.len() as u32)
            .map(|i| wgpu_hal::BindGroupEntry { binding: i, resource_index: i, count: 1 })
            .collect();
        let desc = wgpu_hal::BindGroupDescriptor {
            label: Some(label),
            layout: self.bgl.as_ref().expect("alive"),
            buffers: bindings,
            samplers: &[],
            textures: &[],
            entries: &entries,
            acceleration_structures: &[],
            external_textures: &[],
        };
        // SAFETY: the caller's contract.
        unsafe { d.create_bind_group(&desc) }.map_err(map_hal_device("vkAllocateDescriptorSets"))
    }

    /// Destroys the objects, in reverse order of creation.
    ///
    /// # Safety
    /// `d` is the device they were made on, and no pending work uses them.
    pub(crate) unsafe fn destroy(&mut self, d: &wgpu_hal::vulkan::Device) {
        // SAFETY: the caller's contract.
        unsafe {
            if let Some(p) = self.pipeline.take() {
                d.destroy_compute_pipeline(p);
            }
            if let Some(p) = self.layout.take() {
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
