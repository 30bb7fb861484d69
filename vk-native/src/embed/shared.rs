//! What a member needs from its wgpu device ([`Shared`]), read once when the member is made, and
//! shared by everything made on the device: it holds a clone of the `wgpu::Device`, so the
//! VkDevice outlives them.

use std::sync::Arc;

use ash::{ext, vk};

use crate::error::{NativeError, Result};
use crate::semaphore::{SemaphoreOwner, TimelineSemaphore};

pub(super) type VkApi = wgpu_hal::vulkan::Api;

/// What a member needs from its wgpu device, shared by everything made on it.
///
/// Fields drop in declaration order: `raw` and `host_memory` are function tables (no `Drop`),
/// and `device`, last, is what keeps the VkDevice alive; everything made on the device holds an
/// `Arc<Shared>` and is destroyed before it.
pub(super) struct Shared {
    pub(super) raw: ash::Device,
    pub(super) host_memory: ext::external_memory_host::Device,
    pub(super) mem_props: vk::PhysicalDeviceMemoryProperties,
    pub(super) min_align: u64,
    pub(super) max_storage_range: u64,
    /// `minStorageBufferOffsetAlignment`: where a binding of an application buffer may start.
    pub(super) storage_offset_align: u64,
    /// `maxPushConstantsSize`.
    pub(super) max_push_constants: u32,
    pub(super) name: String,
    pub(super) queue: wgpu::Queue,
    pub(super) device: wgpu::Device,
}

impl Shared {
    /// Reads what a member needs from `device` (opened by
    /// [`request_wgpu_device`](super::request_wgpu_device)) and its `queue`. Errors: not a
    /// Vulkan device, VK_EXT_external_memory_host not enabled on it, no timeline semaphores.
    pub(super) fn new(device: &wgpu::Device, queue: &wgpu::Queue) -> Result<Arc<Self>> {
        // SAFETY: the guard only lends wgpu-hal's device; we clone the ash function table and
        // never destroy the device through it (we hold a wgpu::Device clone instead).
        let hal = unsafe { device.as_hal::<VkApi>() }
            .ok_or_else(|| NativeError::Unsupported("not a Vulkan device".into()))?;
        if !hal.enabled_device_extensions().contains(&ext::external_memory_host::NAME) {
            return Err(NativeError::MissingExtension(
                "VK_EXT_external_memory_host (open the device with crossgpu::embed::request_device)",
            ));
        }
        let inst = hal.shared_instance().raw_instance();
        let phd = hal.raw_physical_device();
        let mut host_props = vk::PhysicalDeviceExternalMemoryHostPropertiesEXT::default();
        let mut props2 = vk::PhysicalDeviceProperties2::default().push_next(&mut host_props);
        // SAFETY: live physical device of this instance; the chained struct belongs to an
        // extension the device exposes (it was enabled).
        unsafe { inst.get_physical_device_properties2(phd, &mut props2) };
        let props = props2.properties;
        let mut v12 = vk::PhysicalDeviceVulkan12Features::default();
        let mut f2 = vk::PhysicalDeviceFeatures2::default().push_next(&mut v12);
        let timeline = props.api_version >= vk::API_VERSION_1_2 && {
            // SAFETY: live physical device; Vulkan 1.2 structures on a 1.2 device.
            unsafe { inst.get_physical_device_features2(phd, &mut f2) };
            v12.timeline_semaphore == vk::TRUE
        };
        if !timeline {
            return Err(NativeError::MissingExtension("timeline semaphores (Vulkan 1.2)"));
        }
        // SAFETY: live physical device of this instance.
        let mem_props = unsafe { inst.get_physical_device_memory_properties(phd) };
        let raw = hal.raw_device().clone();
        let name = props
            .device_name_as_c_str()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|_| "device".into());
        Ok(Arc::new(Shared {
            host_memory: ext::external_memory_host::Device::new(inst, &raw),
            raw,
            mem_props,
            min_align: host_props.min_imported_host_pointer_alignment.max(1),
            max_storage_range: u64::from(props.limits.max_storage_buffer_range),
            storage_offset_align: props.limits.min_storage_buffer_offset_alignment.max(1),
            max_push_constants: props.limits.max_push_constants_size,
            name,
            queue: queue.clone(),
            device: device.clone(),
        }))
    }
}

impl SemaphoreOwner for Shared {
    fn raw_device(&self) -> &ash::Device {
        &self.raw
    }
}

impl TimelineSemaphore {
    /// A timeline semaphore of an embedded member's wgpu device.
    pub(super) fn embedded(shared: &Arc<Shared>) -> Result<Self> {
        // SAFETY: timeline semaphores are supported and enabled (checked in EmbeddedMember::new).
        unsafe { Self::with_owner(shared.clone(), 0) }
    }
}
