//! A kernel's buffers bound once, reused by every dispatch over the same buffers
//! ([`BindGroup`]): the ranges checked against the kernel's interface and the device's limits,
//! and the descriptor set allocated from the kernel's pools, freed when the group goes.

use std::sync::Arc;

use ash::vk;

use super::compute::Kernel;
use super::pipeline::{descriptor_type, RawPipeline};
use crate::buffer::BufferId;
use crate::buffer::GpuBuffer;
use crate::error::{map_vk, NativeError, Result};
use crate::shader::BindingKind;

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

/// Descriptor sets one pool holds; a kernel makes another pool when its pools are full.
const SETS_PER_POOL: u32 = 64;

impl RawPipeline {
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
}

impl Kernel {
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
