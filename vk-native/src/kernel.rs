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

use std::ffi::CString;
use std::sync::{Arc, Mutex};

use ash::vk;
use wgpu_hal::Device as _;

use crate::buffer::BufferId;
use crate::device::{Device, DeviceId};
use crate::error::{map_hal_device, map_vk, NativeError, Result};
use crate::shader::{BindingKind, Interface, Shader};
use crate::GpuBuffer;

/// A byte range of a buffer bound as one storage or uniform buffer.
#[derive(Clone, Copy)]
pub struct BindRange<'a> {
    /// The buffer bound.
    pub buffer: &'a dyn GpuBuffer,
    /// Start of the range in bytes, a multiple of `minStorageBufferOffsetAlignment` (of
    /// `minUniformBufferOffsetAlignment` for a uniform binding).
    pub offset: u64,
    /// Length of the range in bytes: at least the binding's [`crate::shader::Binding::min_bytes`]
    /// and at most `maxStorageBufferRange` (`maxUniformBufferRange`).
    pub size: u64,
}

impl<'a> BindRange<'a> {
    /// All of `buffer`.
    pub fn whole(buffer: &'a dyn GpuBuffer) -> Self {
        Self { buffer, offset: 0, size: buffer.size() }
    }
}

/// The wgpu-hal objects of one compute pipeline: group 0 of storage buffers and one block of
/// immediates. Made and destroyed on a wgpu-hal device the caller lends — crossgpu's own
/// ([`Kernel`]) or one borrowed from a wgpu application (`embed.rs`).
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

/// Descriptor sets one pool holds; a kernel makes another pool when its pools are full.
const SETS_PER_POOL: u32 = 64;

/// The Vulkan objects of one of crossgpu's kernels, made with ash.
struct RawPipeline {
    module: vk::ShaderModule,
    set_layout: vk::DescriptorSetLayout,
    layout: vk::PipelineLayout,
    pipeline: vk::Pipeline,
    /// The pools bind groups are allocated from (externally synchronised, hence the lock).
    pools: Mutex<Vec<vk::DescriptorPool>>,
}

/// The Vulkan descriptor type of a binding.
fn descriptor_type(kind: BindingKind) -> vk::DescriptorType {
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
    unsafe fn new(d: &ash::Device, shader: &Shader) -> Result<Self> {
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
                    .create_shader_module(&vk::ShaderModuleCreateInfo::default().code(shader.spirv()), None)
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

    /// A descriptor set of this pipeline's layout over `ranges` (bindings 0..n in order), and
    /// the pool it came from.
    ///
    /// # Safety
    /// `d` is the device the pipeline was made on; every range lies inside a live buffer of
    /// that device, within its binding limits; the set is freed with [`RawPipeline::free`]
    /// after the last submission that uses it completed.
    unsafe fn allocate(
        &self,
        d: &ash::Device,
        kinds: &[BindingKind],
        ranges: &[BindRange<'_>],
    ) -> Result<(vk::DescriptorPool, vk::DescriptorSet)> {
        let mut pools = self.pools.lock().unwrap_or_else(|p| p.into_inner());
        let layouts = [self.set_layout];
        let mut found = None;
        for &pool in pools.iter().rev() {
            let info = vk::DescriptorSetAllocateInfo::default().descriptor_pool(pool).set_layouts(&layouts);
            // SAFETY: the pool is of this device and locked; the layout is alive.
            match unsafe { d.allocate_descriptor_sets(&info) } {
                Ok(sets) => {
                    found = Some((pool, sets[0]));
                    break;
                }
                // A full pool (drivers before Vulkan 1.1 may say out of host or device memory):
                // try the next, then a new one, whose failure is reported.
                Err(
                    vk::Result::ERROR_OUT_OF_POOL_MEMORY
                    | vk::Result::ERROR_FRAGMENTED_POOL
                    | vk::Result::ERROR_OUT_OF_HOST_MEMORY
                    | vk::Result::ERROR_OUT_OF_DEVICE_MEMORY,
                ) => continue,
                Err(e) => return Err(map_vk("vkAllocateDescriptorSets")(e)),
            }
        }
        let (pool, set) = match found {
            Some(f) => f,
            None => {
                let count = |uniform: bool| {
                    kinds.iter().filter(|&&k| (k == BindingKind::Uniform) == uniform).count() as u32
                };
                let sizes: Vec<_> = [
                    (vk::DescriptorType::STORAGE_BUFFER, count(false)),
                    (vk::DescriptorType::UNIFORM_BUFFER, count(true)),
                ]
                .into_iter()
                .filter(|&(_, n)| n > 0)
                .map(|(ty, n)| vk::DescriptorPoolSize::default().ty(ty).descriptor_count(SETS_PER_POOL * n))
                .collect();
                let sizes = if sizes.is_empty() {
                    vec![vk::DescriptorPoolSize::default()
                        .ty(vk::DescriptorType::STORAGE_BUFFER)
                        .descriptor_count(1)]
                } else {
                    sizes
                };
                let info = vk::DescriptorPoolCreateInfo::default()
                    .flags(vk::DescriptorPoolCreateFlags::FREE_DESCRIPTOR_SET)
                    .max_sets(SETS_PER_POOL)
                    .pool_sizes(&sizes);
                // SAFETY: a new pool of this device.
                let pool = unsafe { d.create_descriptor_pool(&info, None) }
                    .map_err(map_vk("vkCreateDescriptorPool"))?;
                pools.push(pool);
                let info =
                    vk::DescriptorSetAllocateInfo::default().descriptor_pool(pool).set_layouts(&layouts);
                // SAFETY: as above, from the new, empty pool.
                let sets = unsafe { d.allocate_descriptor_sets(&info) }
                    .map_err(map_vk("vkAllocateDescriptorSets"))?;
                (pool, sets[0])
            }
        };
        // SAFETY: the caller vouches for the buffers (alive, of this device, in range).
        let infos: Vec<_> = ranges
            .iter()
            .map(|r| {
                vk::DescriptorBufferInfo::default()
                    .buffer(unsafe { r.buffer.hal().raw_handle() })
                    .offset(r.offset)
                    .range(r.size)
            })
            .collect();
        let writes: Vec<_> = infos
            .iter()
            .enumerate()
            .map(|(i, info)| {
                vk::WriteDescriptorSet::default()
                    .dst_set(set)
                    .dst_binding(i as u32)
                    .descriptor_type(descriptor_type(kinds[i]))
                    .buffer_info(std::slice::from_ref(info))
            })
            .collect();
        // SAFETY: the set is new and unused; the infos outlive the call.
        unsafe { d.update_descriptor_sets(&writes, &[]) };
        Ok((pool, set))
    }

    /// Returns a set to its pool.
    ///
    /// # Safety
    /// `set` came from [`RawPipeline::allocate`] with `pool`, and no pending work uses it.
    unsafe fn free(&self, d: &ash::Device, pool: vk::DescriptorPool, set: vk::DescriptorSet) {
        let _pools = self.pools.lock().unwrap_or_else(|p| p.into_inner());
        // SAFETY: the caller's contract; the pool is locked. Freeing cannot fail in a way the
        // caller could act on (the pool was made with FREE_DESCRIPTOR_SET).
        let _ = unsafe { d.free_descriptor_sets(pool, &[set]) };
    }

    /// Destroys the objects (and every set of the pools), in reverse order of creation.
    ///
    /// # Safety
    /// `d` is the device they were made on, and no pending work uses them.
    unsafe fn destroy(&mut self, d: &ash::Device) {
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

/// Refuses `shader` on `device` where it exceeds a limit (or needs f16 arithmetic the device
/// was not opened with): Vulkan leaves those undefined.
fn check_limits(device: &Device, shader: &Shader) -> Result<()> {
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
    Ok(())
}

impl Kernel {
    /// Creates the pipeline of `shader` on `device`, after checking it against the device's
    /// limits (workgroup size and invocations, `var<workgroup>` bytes, immediates, f16).
    pub fn new(device: &Device, shader: &Shader) -> Result<Self> {
        check_limits(device, shader)?;
        // SAFETY: the shader fits the device (checked above); KernelInner's Drop destroys the
        // objects on this device.
        let objects = unsafe { RawPipeline::new(device.raw(), shader)? };
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
        let name = k.shader.label();
        let bindings = &k.shader.interface().bindings;
        if ranges.len() != bindings.len() {
            return Err(NativeError::Unsupported(format!(
                "kernel {name} takes {} buffers, {} given",
                bindings.len(),
                ranges.len()
            )));
        }
        let caps = &k.device.info().caps;
        for (r, b) in ranges.iter().zip(bindings) {
            let refuse = |why: String| {
                Err(NativeError::Unsupported(format!(
                    "kernel {name}, binding {} ({}): {why}",
                    b.binding, b.name
                )))
            };
            if r.buffer.device_id() != k.device.id() {
                return refuse(format!("buffer {:?} belongs to another device", r.buffer.id()));
            }
            let uniform = b.kind == BindingKind::Uniform;
            if !r.buffer.storage() || (uniform && !r.buffer.uniform()) {
                return refuse(format!(
                    "buffer {:?} cannot be bound as a {} buffer (a staging buffer, or host memory bound as uniform)",
                    r.buffer.id(),
                    if uniform { "uniform" } else { "storage" }
                ));
            }
            if r.offset.checked_add(r.size).is_none_or(|e| e > r.buffer.size()) {
                return refuse(format!(
                    "range {}..+{} of a {}-byte buffer",
                    r.offset,
                    r.size,
                    r.buffer.size()
                ));
            }
            if r.size < b.min_bytes.max(1) {
                return refuse(format!(
                    "a range of {} bytes; its type {} needs at least {}",
                    r.size, b.type_name, b.min_bytes
                ));
            }
            let (max, align, what) = if uniform {
                (caps.max_uniform_buffer_range, caps.min_uniform_buffer_offset_alignment, "Uniform")
            } else {
                (caps.max_storage_buffer_range, caps.min_storage_buffer_offset_alignment, "Storage")
            };
            if r.size > max {
                return refuse(format!(
                    "a range of {} bytes exceeds the device's max{what}BufferRange ({max} bytes)",
                    r.size
                ));
            }
            if r.offset % align.max(1) != 0 {
                return refuse(format!(
                    "offset {} is not a multiple of the device's min{what}BufferOffsetAlignment ({align})",
                    r.offset
                ));
            }
        }
        // SAFETY: the ranges are inside live buffers of this device and within the device's
        // binding limits (checked above); the bind group keeps the buffers and the kernel alive
        // and frees the set when the last command buffer that uses it let go of it.
        let (pool, set) = unsafe { k.objects.allocate(k.device.raw(), &k.kinds, ranges)? };
        crate::live::inc(&crate::live::BIND_GROUPS);
        Ok(BindGroup(Arc::new(BindGroupInner {
            pool,
            set,
            kernel: self.clone(),
            buffers: ranges.iter().map(|r| r.buffer.keep_alive()).collect(),
            ids: ranges.iter().map(|r| r.buffer.id()).collect(),
        })))
    }

    pub(crate) fn raw_pipeline(&self) -> vk::Pipeline {
        self.0.objects.pipeline
    }

    pub(crate) fn raw_layout(&self) -> vk::PipelineLayout {
        self.0.objects.layout
    }
}

struct BindGroupInner {
    pool: vk::DescriptorPool,
    set: vk::DescriptorSet,
    kernel: Kernel,
    buffers: Vec<Arc<dyn std::any::Any + Send + Sync>>,
    ids: Vec<BufferId>,
}

impl Drop for BindGroupInner {
    fn drop(&mut self) {
        crate::live::dec(&crate::live::BIND_GROUPS);
        let k = &self.kernel.0;
        // SAFETY: pending command buffers (and recordings) that use the group hold this value
        // alive, so nothing uses the set now; it came from this pool of the kernel.
        unsafe { k.objects.free(k.device.raw(), self.pool, self.set) };
        self.buffers.clear();
    }
}

/// A kernel's buffers bound once, reused by every dispatch over the same buffers.
#[derive(Clone)]
pub struct BindGroup(Arc<BindGroupInner>);

impl std::fmt::Debug for BindGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BindGroup").field("kernel", &self.0.kernel).field("buffers", &self.0.ids).finish()
    }
}

impl BindGroup {
    /// The kernel whose bindings this group fills.
    pub fn kernel(&self) -> &Kernel {
        &self.0.kernel
    }

    /// The bound buffers, in binding order.
    pub fn buffer_ids(&self) -> &[BufferId] {
        &self.0.ids
    }

    pub(crate) fn raw_set(&self) -> vk::DescriptorSet {
        self.0.set
    }

    pub(crate) fn keep_alive(&self) -> Arc<dyn std::any::Any + Send + Sync> {
        self.0.clone()
    }
}
