//! The Vulkan instance (through wgpu-hal) and what each physical device can do for crossgpu.

use std::ffi::CStr;
use std::sync::Arc;

use ash::{ext, khr, vk};
use wgpu_hal::Instance as _;

use crate::error::{NativeError, Result};
use crate::validation::ValidationMessenger;

type VkApi = wgpu_hal::vulkan::Api;

/// How to create the [`Instance`].
#[derive(Debug, Clone, Default)]
pub struct InstanceOptions {
    /// Enable the Khronos validation layer (when installed) and collect its errors, see
    /// [`crate::validation_messages`].
    pub validation: bool,
}

/// Kind of physical device, from `VkPhysicalDeviceType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceType {
    /// A discrete GPU (`DISCRETE_GPU`), with its own memory across PCIe.
    Discrete,
    /// A GPU integrated with the CPU (`INTEGRATED_GPU`), sharing system memory.
    Integrated,
    /// A GPU in a virtualised environment (`VIRTUAL_GPU`).
    Virtual,
    /// A device that runs on the CPU (`CPU`), e.g. Mesa's lavapipe.
    Cpu,
    /// Any other `VkPhysicalDeviceType` (`OTHER`).
    Other,
}

impl std::fmt::Display for DeviceType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Discrete => "discrete",
            Self::Integrated => "integrated",
            Self::Virtual => "virtual",
            Self::Cpu => "cpu",
            Self::Other => "other",
        })
    }
}

/// The capabilities crossgpu depends on, read from the physical device.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Capabilities {
    /// VK_EXT_external_memory_host: host allocations can be imported as device memory.
    pub external_memory_host: bool,
    /// `minImportedHostPointerAlignment` (0 without the extension).
    pub min_imported_host_pointer_alignment: u64,
    /// Timeline semaphores (Vulkan 1.2 core or VK_KHR_timeline_semaphore).
    pub timeline_semaphore: bool,
    /// VK_KHR_external_semaphore_fd is exposed.
    pub external_semaphore_fd: bool,
    /// A binary semaphore's payload can be exported as a SYNC_FD.
    pub sync_fd_export: bool,
    /// A SYNC_FD can be imported into a binary semaphore.
    pub sync_fd_import: bool,
    /// OPAQUE_FD semaphore export and import (shown beside SYNC_FD: a driver may offer one
    /// without the other).
    pub opaque_fd: bool,
    /// `shaderFloat16`.
    pub shader_float16: bool,
    /// `storageBuffer16BitAccess`.
    pub storage_buffer_16bit: bool,
    /// `shaderIntegerDotProduct` (Vulkan 1.3 or VK_KHR_shader_integer_dot_product): kernels
    /// with `dot4I8Packed` / `dot4U8Packed`, which naga writes as SPIR-V's integer dot
    /// products, run here. wgpu-hal enables it on every device it opens where it is supported.
    pub integer_dot_product: bool,
    /// The sides of the square cooperative matrices of f16 inputs summed into f32 that the
    /// device offers (VK_KHR_cooperative_matrix, largest first: 16 on NVIDIA's tensor cores, 8
    /// on Mesa's lavapipe), with subgroup operations beside them: kernels with `enable
    /// wgpu_cooperative_matrix;` over those run here. Empty: none.
    pub cooperative_matrix_sides: Vec<u32>,
    /// robustBufferAccess2 (VK_EXT_robustness2): a buffer access past the bound range reads
    /// zeros and drops writes. wgpu-hal enables it on every device it opens where it is
    /// supported, so this is also whether a device opened here has it on.
    pub robust_buffer_access2: bool,
    /// Queues in family 0 (the compute family wgpu-hal opens).
    pub queue_count: u32,
    /// Nanoseconds per timestamp tick, 0 when the queue has no timestamps.
    pub timestamp_period_ns: f32,
    /// `maxStorageBufferRange`: the most bytes one storage-buffer binding may cover.
    pub max_storage_buffer_range: u64,
    /// `minStorageBufferOffsetAlignment`.
    pub min_storage_buffer_offset_alignment: u64,
    /// `maxUniformBufferRange`: the most bytes one uniform-buffer binding may cover.
    pub max_uniform_buffer_range: u64,
    /// `minUniformBufferOffsetAlignment`.
    pub min_uniform_buffer_offset_alignment: u64,
    /// `maxComputeWorkGroupCount`: the most workgroups one dispatch may have per dimension.
    pub max_compute_work_group_count: [u32; 3],
    /// `maxComputeWorkGroupSize`: the most invocations a workgroup may have per dimension.
    pub max_compute_work_group_size: [u32; 3],
    /// `maxComputeWorkGroupInvocations`: the most invocations in one workgroup.
    pub max_compute_work_group_invocations: u32,
    /// `maxPushConstantsSize`: the most bytes of immediates a kernel may take.
    pub max_push_constants_size: u32,
    /// `maxComputeSharedMemorySize`: the most bytes of `var<workgroup>` memory a kernel may use.
    pub max_compute_shared_memory_size: u32,
    /// Size of the largest DEVICE_LOCAL memory heap, in bytes: what the device can hold (on a
    /// CPU device or an iGPU this is system memory, shared with the host and other devices).
    pub device_local_heap_bytes: u64,
    /// Whether a memory type is device-local, host-visible and host-coherent at once (resizable
    /// BAR on a discrete GPU; any memory on a CPU device): where [`crate::MappedWords`] live.
    pub device_local_host_visible: bool,
}

/// One physical device as crossgpu sees it.
#[derive(Debug, Clone)]
pub struct AdapterInfo {
    /// Position in [`Instance::adapters`].
    pub index: usize,
    /// The device name the driver reports, e.g. `llvmpipe (LLVM 15.0.6, 256 bits)`.
    pub name: String,
    /// PCI vendor id (`VkPhysicalDeviceProperties::vendorID`), e.g. `0x10de` for NVIDIA.
    pub vendor_id: u32,
    /// Vendor-specific device id (`VkPhysicalDeviceProperties::deviceID`).
    pub device_id: u32,
    /// Discrete, integrated, virtual, CPU or other.
    pub device_type: DeviceType,
    /// `VkDriverId` as a name, e.g. `MESA_LLVMPIPE` or `NVIDIA_PROPRIETARY`.
    pub driver_id: String,
    /// Driver name and info strings, e.g. `llvmpipe` / `Mesa 22.3.6 (LLVM 15.0.6)`.
    pub driver_name: String,
    /// The driver's info string (`VkPhysicalDeviceDriverProperties::driverInfo`), e.g. its version.
    pub driver_info: String,
    /// Driver version decoded the vendor's way (NVIDIA packs it differently).
    pub driver_version: String,
    /// Vulkan API version, `major.minor.patch`.
    pub api_version: String,
    /// What the device offers that crossgpu depends on.
    pub caps: Capabilities,
}

impl AdapterInfo {
    /// A short vendor name from the PCI vendor id, or the driver for CPU devices.
    pub fn vendor_name(&self) -> &'static str {
        match self.vendor_id {
            0x10de => "nvidia",
            0x1002 => "amd",
            0x8086 => "intel",
            0x13b5 => "arm",
            0x5143 => "qualcomm",
            0x106b => "apple",
            0x10005 => "mesa",
            _ => "unknown",
        }
    }

    /// Whether the driver is one of Mesa's (RADV, ANV, NVK, lavapipe, ...).
    pub fn is_mesa(&self) -> bool {
        self.driver_id.starts_with("MESA")
    }
}

// Field order is drop order: the messenger goes before the VkInstance it was made from.
pub(crate) struct InstanceShared {
    _messenger: Option<ValidationMessenger>,
    pub(crate) infos: Vec<AdapterInfo>,
    pub(crate) adapters: Vec<wgpu_hal::vulkan::Adapter>,
    /// wgpu features and limits of each adapter, as wgpu-hal exposes them.
    pub(crate) features: Vec<(wgpu_types::Features, wgpu_types::Limits)>,
    pub(crate) hal: wgpu_hal::vulkan::Instance,
}

/// A Vulkan instance made through wgpu-hal, with its physical devices listed once.
#[derive(Clone)]
pub struct Instance {
    pub(crate) shared: Arc<InstanceShared>,
}

impl std::fmt::Debug for Instance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Instance").field("adapters", &self.shared.infos.len()).finish()
    }
}

impl Instance {
    /// Loads Vulkan, creates the instance and lists every physical device.
    pub fn new(options: &InstanceOptions) -> Result<Self> {
        let mut flags = wgpu_types::InstanceFlags::empty();
        if options.validation {
            flags |= wgpu_types::InstanceFlags::VALIDATION | wgpu_types::InstanceFlags::DEBUG;
        }
        let desc = wgpu_hal::InstanceDescriptor {
            name: "crossgpu",
            flags,
            memory_budget_thresholds: Default::default(),
            backend_options: Default::default(),
            telemetry: None,
            display: None,
        };
        // SAFETY: the descriptor is fully initialised; wgpu-hal loads libvulkan and owns the
        // VkInstance it creates until `hal` is dropped, after every adapter and device.
        let hal = unsafe { <VkApi as wgpu_hal::Api>::Instance::init(&desc) }
            .map_err(|e| NativeError::NoDriver(e.to_string()))?;
        let messenger =
            if options.validation { ValidationMessenger::new(hal.shared_instance()) } else { None };
        // SAFETY: no surface hint; the adapters borrow nothing from the call.
        let exposed = unsafe { hal.enumerate_adapters(None) };
        if exposed.is_empty() {
            return Err(NativeError::NoDriver("the Vulkan loader found no physical device".into()));
        }
        let mut adapters = Vec::new();
        let mut infos = Vec::new();
        let mut features = Vec::new();
        for (index, e) in exposed.into_iter().enumerate() {
            // SAFETY: the physical device came from this instance, which is alive.
            let info = unsafe { query_adapter(hal.shared_instance().raw_instance(), &e, index) };
            infos.push(info);
            features.push((e.features, e.capabilities.limits.clone()));
            adapters.push(e.adapter);
        }
        Ok(Self {
            shared: Arc::new(InstanceShared { _messenger: messenger, infos, adapters, features, hal }),
        })
    }

    /// Every physical device, in the order the loader lists them.
    pub fn adapters(&self) -> &[AdapterInfo] {
        &self.shared.infos
    }

    /// Whether the validation layer is loaded in this instance.
    pub fn validation_enabled(&self) -> bool {
        self.shared._messenger.is_some()
    }
}

/// The sides (16, 8) of the square configurations of f16 inputs and an f32 accumulator that
/// wgpu-hal offers on this adapter with cooperative matrices, subgroups and f16, largest first.
fn cooperative_matrix_sides(exposed: &wgpu_hal::ExposedAdapter<VkApi>) -> Vec<u32> {
    use wgpu_types::{CooperativeScalarType, Features};
    let needs = Features::EXPERIMENTAL_COOPERATIVE_MATRIX | Features::SUBGROUP | Features::SHADER_F16;
    if !exposed.features.contains(needs) {
        return Vec::new();
    }
    let offers = |unit: u32| {
        exposed.capabilities.cooperative_matrix_properties.iter().any(|c| {
            (c.m_size, c.n_size, c.k_size) == (unit, unit, unit)
                && c.ab_type == CooperativeScalarType::F16
                && c.cr_type == CooperativeScalarType::F32
        })
    };
    [16, 8].into_iter().filter(|&u| offers(u)).collect()
}

fn driver_id_name(id: vk::DriverId) -> String {
    let s = format!("{id:?}");
    if s.starts_with("DriverId(") {
        format!("UNKNOWN({})", id.as_raw())
    } else {
        s
    }
}

fn decode_driver_version(vendor: u32, v: u32) -> String {
    if vendor == 0x10de {
        format!("{}.{}.{}.{}", v >> 22, (v >> 14) & 0xff, (v >> 6) & 0xff, v & 0x3f)
    } else {
        format!("{}.{}.{}", vk::api_version_major(v), vk::api_version_minor(v), vk::api_version_patch(v))
    }
}

/// # Safety
/// `instance` must be the live instance the adapter was enumerated from.
unsafe fn query_adapter(
    instance: &ash::Instance,
    exposed: &wgpu_hal::ExposedAdapter<VkApi>,
    index: usize,
) -> AdapterInfo {
    let phd = exposed.adapter.raw_physical_device();
    let has = |name: &CStr| exposed.adapter.physical_device_capabilities().supports_extension(name);
    let host_ext = has(ext::external_memory_host::NAME);
    let sem_fd_ext = has(khr::external_semaphore_fd::NAME);

    let mut driver = vk::PhysicalDeviceDriverProperties::default();
    let mut host_props = vk::PhysicalDeviceExternalMemoryHostPropertiesEXT::default();
    let mut props2 = vk::PhysicalDeviceProperties2::default().push_next(&mut driver);
    if host_ext {
        props2 = props2.push_next(&mut host_props);
    }
    // SAFETY: the pNext chain holds structs whose extensions the device exposes; Vulkan 1.1 core.
    unsafe { instance.get_physical_device_properties2(phd, &mut props2) };
    let props = props2.properties;

    let mut f12 = vk::PhysicalDeviceVulkan12Features::default();
    let mut f16bit = vk::PhysicalDevice16BitStorageFeatures::default();
    let mut robustness2 = vk::PhysicalDeviceRobustness2FeaturesEXT::default();
    let robustness2_ext = has(ext::robustness2::NAME);
    let mut dot = vk::PhysicalDeviceShaderIntegerDotProductFeatures::default();
    // Core in Vulkan 1.3, as wgpu-hal reads it (and enables it where supported).
    let dot_struct = props.api_version >= vk::API_VERSION_1_3 || has(khr::shader_integer_dot_product::NAME);
    let mut feats2 = vk::PhysicalDeviceFeatures2::default().push_next(&mut f12).push_next(&mut f16bit);
    if robustness2_ext {
        feats2 = feats2.push_next(&mut robustness2);
    }
    if dot_struct {
        feats2 = feats2.push_next(&mut dot);
    }
    // SAFETY: as above; both structs are core in Vulkan 1.2, which wgpu-hal requires for them,
    // the robustness2 struct is chained only where the device exposes the extension, and the
    // integer dot product one only where the device has Vulkan 1.3 or the extension.
    unsafe { instance.get_physical_device_features2(phd, &mut feats2) };

    let (mut export, mut import, mut opaque_fd) = (false, false, false);
    if sem_fd_ext {
        let info = vk::PhysicalDeviceExternalSemaphoreInfo::default()
            .handle_type(vk::ExternalSemaphoreHandleTypeFlags::OPAQUE_FD);
        let mut out = vk::ExternalSemaphoreProperties::default();
        // SAFETY: core 1.1 query on a live physical device.
        unsafe { instance.get_physical_device_external_semaphore_properties(phd, &info, &mut out) };
        opaque_fd = out.external_semaphore_features.contains(
            vk::ExternalSemaphoreFeatureFlags::EXPORTABLE | vk::ExternalSemaphoreFeatureFlags::IMPORTABLE,
        );
        let info = vk::PhysicalDeviceExternalSemaphoreInfo::default()
            .handle_type(vk::ExternalSemaphoreHandleTypeFlags::SYNC_FD);
        let mut out = vk::ExternalSemaphoreProperties::default();
        // SAFETY: core 1.1 query on a live physical device.
        unsafe { instance.get_physical_device_external_semaphore_properties(phd, &info, &mut out) };
        export = out.external_semaphore_features.contains(vk::ExternalSemaphoreFeatureFlags::EXPORTABLE);
        import = out.external_semaphore_features.contains(vk::ExternalSemaphoreFeatureFlags::IMPORTABLE);
    }
    // SAFETY: live physical device.
    let families = unsafe { instance.get_physical_device_queue_family_properties(phd) };
    // SAFETY: live physical device.
    let memory = unsafe { instance.get_physical_device_memory_properties(phd) };
    let device_local_heap_bytes = memory
        .memory_heaps_as_slice()
        .iter()
        .filter(|h| h.flags.contains(vk::MemoryHeapFlags::DEVICE_LOCAL))
        .map(|h| h.size)
        .max()
        .unwrap_or(0);
    let mapped = vk::MemoryPropertyFlags::DEVICE_LOCAL
        | vk::MemoryPropertyFlags::HOST_VISIBLE
        | vk::MemoryPropertyFlags::HOST_COHERENT;
    let device_local_host_visible =
        memory.memory_types_as_slice().iter().any(|t| t.property_flags.contains(mapped));
    let fam0 = families.first().copied().unwrap_or_default();
    let timestamp_period_ns = if fam0.timestamp_valid_bits > 0 { props.limits.timestamp_period } else { 0.0 };

    let cstr = |s: &[std::ffi::c_char]| {
        // SAFETY: Vulkan fills these fixed arrays with NUL-terminated strings.
        unsafe { CStr::from_ptr(s.as_ptr()) }.to_string_lossy().into_owned()
    };
    AdapterInfo {
        index,
        name: exposed.info.name.clone(),
        vendor_id: props.vendor_id,
        device_id: props.device_id,
        device_type: match props.device_type {
            vk::PhysicalDeviceType::DISCRETE_GPU => DeviceType::Discrete,
            vk::PhysicalDeviceType::INTEGRATED_GPU => DeviceType::Integrated,
            vk::PhysicalDeviceType::VIRTUAL_GPU => DeviceType::Virtual,
            vk::PhysicalDeviceType::CPU => DeviceType::Cpu,
            _ => DeviceType::Other,
        },
        driver_id: driver_id_name(driver.driver_id),
        driver_name: cstr(&driver.driver_name),
        driver_info: cstr(&driver.driver_info),
        driver_version: decode_driver_version(props.vendor_id, props.driver_version),
        api_version: format!(
            "{}.{}.{}",
            vk::api_version_major(props.api_version),
            vk::api_version_minor(props.api_version),
            vk::api_version_patch(props.api_version)
        ),
        caps: Capabilities {
            external_memory_host: host_ext,
            min_imported_host_pointer_alignment: if host_ext {
                host_props.min_imported_host_pointer_alignment
            } else {
                0
            },
            timeline_semaphore: f12.timeline_semaphore == vk::TRUE,
            external_semaphore_fd: sem_fd_ext,
            sync_fd_export: export,
            sync_fd_import: import,
            opaque_fd,
            shader_float16: f12.shader_float16 == vk::TRUE,
            storage_buffer_16bit: f16bit.storage_buffer16_bit_access == vk::TRUE,
            integer_dot_product: dot_struct && dot.shader_integer_dot_product == vk::TRUE,
            cooperative_matrix_sides: cooperative_matrix_sides(exposed),
            robust_buffer_access2: robustness2_ext && robustness2.robust_buffer_access2 == vk::TRUE,
            queue_count: if fam0.queue_flags.contains(vk::QueueFlags::COMPUTE) {
                fam0.queue_count
            } else {
                0
            },
            timestamp_period_ns,
            max_storage_buffer_range: props.limits.max_storage_buffer_range as u64,
            min_storage_buffer_offset_alignment: props.limits.min_storage_buffer_offset_alignment,
            max_uniform_buffer_range: u64::from(props.limits.max_uniform_buffer_range),
            min_uniform_buffer_offset_alignment: props.limits.min_uniform_buffer_offset_alignment,
            max_compute_work_group_count: props.limits.max_compute_work_group_count,
            max_compute_work_group_size: props.limits.max_compute_work_group_size,
            max_compute_work_group_invocations: props.limits.max_compute_work_group_invocations,
            max_push_constants_size: props.limits.max_push_constants_size,
            max_compute_shared_memory_size: props.limits.max_compute_shared_memory_size,
            device_local_heap_bytes,
            device_local_host_visible,
        },
    }
}
