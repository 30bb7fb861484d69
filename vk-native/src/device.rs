//! A logical device opened through wgpu-hal with the interop extensions and extra queues.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use ash::{ext, khr, vk};

use crate::error::{map_vk, NativeError, Result};
use crate::instance::{AdapterInfo, Instance};

/// Identity of a logical device (a VkDevice), unique in the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DeviceId(pub u64);

static NEXT_DEVICE: AtomicU64 = AtomicU64::new(1);

// Field order is drop order: wgpu-hal's queue before its device.
pub(crate) struct DeviceShared {
    pub(crate) hal_queue: wgpu_hal::vulkan::Queue,
    pub(crate) hal: wgpu_hal::vulkan::Device,
    /// Queues of family 0; index 0 is the queue wgpu-hal opened. VkQueue is externally
    /// synchronised, hence one mutex each.
    pub(crate) queues: Vec<Mutex<vk::Queue>>,
    pub(crate) host_memory: Option<ext::external_memory_host::Device>,
    pub(crate) semaphore_fd: Option<khr::external_semaphore_fd::Device>,
    pub(crate) info: AdapterInfo,
    pub(crate) id: DeviceId,
    pub(crate) lost: AtomicBool,
    pub(crate) f16_enabled: bool,
    pub(crate) cooperative_matrix_enabled: bool,
    _instance: Instance,
}

/// A logical device (VkDevice) with one or more queues of family 0.
///
/// Cloning is cheap and shares the device; it is destroyed with the last clone and the last
/// object made from it.
#[derive(Clone)]
pub struct Device {
    pub(crate) shared: Arc<DeviceShared>,
}

impl Drop for DeviceShared {
    fn drop(&mut self) {
        crate::live::dec(&crate::live::DEVICES);
    }
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device")
            .field("adapter", &self.shared.info.name)
            .field("id", &self.shared.id)
            .field("queues", &self.shared.queues.len())
            .finish()
    }
}

impl Device {
    /// Opens adapter `adapter_index` of `instance` with `queue_count` queues of family 0,
    /// adding VK_EXT_external_memory_host and VK_KHR_external_semaphore_fd where the adapter
    /// has them, and 16-bit storage / shaderFloat16 where supported (timeline semaphores are
    /// enabled by wgpu-hal itself where the device has them).
    pub fn open(instance: &Instance, adapter_index: usize, queue_count: u32) -> Result<Self> {
        let shared = &instance.shared;
        let info = shared
            .infos
            .get(adapter_index)
            .ok_or_else(|| NativeError::Unsupported(format!("no adapter {adapter_index}")))?
            .clone();
        if queue_count == 0 || queue_count > info.caps.queue_count.min(64) {
            return Err(NativeError::Unsupported(format!(
                "adapter {} ({}) has {} queue(s) in its compute family; {} requested \
                 (use separate VkDevices instead, e.g. CROSSGPU_DEVICES={},{})",
                adapter_index, info.name, info.caps.queue_count, queue_count, adapter_index, adapter_index
            )));
        }
        let adapter = &shared.adapters[adapter_index];
        let (features, limits) = &shared.features[adapter_index];
        let mut want = wgpu_types::Features::empty();
        for f in [wgpu_types::Features::SHADER_F16, wgpu_types::Features::IMMEDIATES] {
            if features.contains(f) {
                want |= f;
            }
        }
        if !info.caps.cooperative_matrix_sides.is_empty() {
            want |= wgpu_types::Features::EXPERIMENTAL_COOPERATIVE_MATRIX | wgpu_types::Features::SUBGROUP;
        }
        let host_ext = info.caps.external_memory_host;
        let fd_ext = info.caps.external_semaphore_fd;
        static PRIORITIES: [f32; 64] = [1.0; 64];
        let prio: &'static [f32] = &PRIORITIES[..(queue_count as usize).min(64)];
        let callback: Box<wgpu_hal::vulkan::CreateDeviceCallback<'_>> = Box::new(move |args| {
            if host_ext && !args.extensions.contains(&ext::external_memory_host::NAME) {
                args.extensions.push(ext::external_memory_host::NAME);
            }
            if fd_ext && !args.extensions.contains(&khr::external_semaphore_fd::NAME) {
                args.extensions.push(khr::external_semaphore_fd::NAME);
            }
            if let Some(q) = args.queue_create_infos.first_mut() {
                *q = q.queue_priorities(prio);
            }
        });
        // SAFETY: the callback only adds extensions the adapter exposes and raises the queue
        // count of family 0 within its queueCount (and at most 64).
        let open = unsafe {
            adapter.open_with_callback(want, limits, &wgpu_types::MemoryHints::Performance, Some(callback))
        }
        .map_err(crate::error::map_hal_device("vkCreateDevice"))?;
        let raw = open.device.raw_device().clone();
        let queues = (0..queue_count)
            // SAFETY: family 0 was created with `queue_count` queues.
            .map(|i| Mutex::new(unsafe { raw.get_device_queue(0, i) }))
            .collect();
        let inst = shared.hal.shared_instance().raw_instance();
        let host_memory = host_ext.then(|| ext::external_memory_host::Device::new(inst, &raw));
        let semaphore_fd = fd_ext.then(|| khr::external_semaphore_fd::Device::new(inst, &raw));
        crate::live::inc(&crate::live::DEVICES);
        Ok(Self {
            shared: Arc::new(DeviceShared {
                hal_queue: open.queue,
                hal: open.device,
                queues,
                host_memory,
                semaphore_fd,
                info,
                id: DeviceId(NEXT_DEVICE.fetch_add(1, Ordering::Relaxed)),
                lost: AtomicBool::new(false),
                f16_enabled: want.contains(wgpu_types::Features::SHADER_F16),
                cooperative_matrix_enabled: want
                    .contains(wgpu_types::Features::EXPERIMENTAL_COOPERATIVE_MATRIX),
                _instance: instance.clone(),
            }),
        })
    }

    /// The adapter this device was opened on.
    pub fn info(&self) -> &AdapterInfo {
        &self.shared.info
    }

    /// This device's identity, unique in the process.
    pub fn id(&self) -> DeviceId {
        self.shared.id
    }

    /// Number of queues opened.
    pub fn queue_count(&self) -> u32 {
        self.shared.queues.len() as u32
    }

    /// Whether VK_EXT_external_memory_host is enabled.
    pub fn has_host_import(&self) -> bool {
        self.shared.host_memory.is_some()
    }

    /// Whether VK_KHR_external_semaphore_fd with SYNC_FD export and import is usable.
    pub fn has_sync_fd(&self) -> bool {
        self.shared.semaphore_fd.is_some()
            && self.shared.info.caps.sync_fd_export
            && self.shared.info.caps.sync_fd_import
    }

    /// Whether shaderFloat16 and 16-bit storage were enabled.
    pub fn f16_enabled(&self) -> bool {
        self.shared.f16_enabled
    }

    /// Whether cooperative matrices (f16 inputs, f32 sums, `Capabilities::cooperative_matrix_sides`) and subgroup operations were enabled.
    pub fn cooperative_matrix_enabled(&self) -> bool {
        self.shared.cooperative_matrix_enabled
    }

    /// Whether a call on this device has reported VK_ERROR_DEVICE_LOST.
    pub fn is_lost(&self) -> bool {
        self.shared.lost.load(Ordering::Relaxed)
    }

    /// Waits until every queue of the device is idle (vkDeviceWaitIdle). For teardown and
    /// error recovery only, never on the hot path.
    pub fn wait_idle_queues(&self) -> Result<()> {
        let _guards: Vec<_> = self.shared.queues.iter().map(|q| q.lock()).collect();
        // SAFETY: every queue of the device is locked, as vkDeviceWaitIdle requires.
        unsafe { self.raw().device_wait_idle() }.map_err(|e| self.note(map_vk("vkDeviceWaitIdle")(e)))
    }

    pub(crate) fn raw(&self) -> &ash::Device {
        self.shared.hal.raw_device()
    }

    /// Records device loss so later calls fail fast.
    pub(crate) fn note(&self, e: NativeError) -> NativeError {
        if e == NativeError::DeviceLost {
            self.shared.lost.store(true, Ordering::Relaxed);
        }
        e
    }

    /// Test hook (feature `test-hooks`): mark the device lost so every later submit fails
    /// with DeviceLost.
    #[cfg(feature = "test-hooks")]
    pub fn inject_device_lost(&self) {
        self.shared.lost.store(true, Ordering::Relaxed);
    }
}
