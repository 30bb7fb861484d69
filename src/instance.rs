//! The entry point: a Vulkan instance and the adapters it sees.

use vk_native::{AdapterInfo, InstanceOptions};

use crate::config;
use crate::error::{Error, Result};

/// A Vulkan instance (through wgpu-hal) with every physical device listed.
///
/// The Khronos validation layer is enabled when `CROSSGPU_VALIDATION=1` (or through
/// [`Instance::with_validation`]); its errors are collected by
/// [`vk_native::validation_messages`].
#[derive(Clone, Debug)]
pub struct Instance {
    pub(crate) native: vk_native::Instance,
}

impl Instance {
    /// Creates the instance, validation as `CROSSGPU_VALIDATION` says (default off).
    pub fn new() -> Result<Self> {
        Self::with_validation(config::validation_from_env()?)
    }

    /// Creates the instance with the validation layer on or off.
    pub fn with_validation(validation: bool) -> Result<Self> {
        let native = vk_native::Instance::new(&InstanceOptions { validation })
            .map_err(|e| Error::native("instance", e))?;
        Ok(Self { native })
    }

    /// Every physical device: discrete, integrated, CPU (lavapipe).
    pub fn adapters(&self) -> &[AdapterInfo] {
        self.native.adapters()
    }

    /// Whether the validation layer is active.
    pub fn validation_enabled(&self) -> bool {
        self.native.validation_enabled()
    }
}

/// A table of adapters and the capabilities crossgpu depends on, as `crossgpu devices` prints it.
pub fn adapter_table(adapters: &[AdapterInfo]) -> String {
    use std::fmt::Write as _;
    let yes = |b: bool| if b { "yes" } else { "no" };
    let mut s = String::new();
    for a in adapters {
        let c = &a.caps;
        let _ = writeln!(
            s,
            "[{}] {} ({}, vendor {:#06x} {}, device {:#06x})",
            a.index,
            a.name,
            a.device_type,
            a.vendor_id,
            a.vendor_name(),
            a.device_id
        );
        let _ = writeln!(
            s,
            "    driver            {} / {}  (id {}, version {}), Vulkan {}",
            a.driver_name, a.driver_info, a.driver_id, a.driver_version, a.api_version
        );
        let _ = writeln!(
            s,
            "    host memory import {} (VK_EXT_external_memory_host, minImportedHostPointerAlignment {})",
            yes(c.external_memory_host),
            c.min_imported_host_pointer_alignment
        );
        let _ = writeln!(s, "    timeline semaphore {}", yes(c.timeline_semaphore));
        let _ = writeln!(
            s,
            "    semaphore fd       {} (VK_KHR_external_semaphore_fd), SYNC_FD export {} import {}, OPAQUE_FD {}",
            yes(c.external_semaphore_fd),
            yes(c.sync_fd_export),
            yes(c.sync_fd_import),
            yes(c.opaque_fd)
        );
        let _ = writeln!(
            s,
            "    shaderFloat16      {}, storageBuffer16BitAccess {}, shaderIntegerDotProduct {} (8-bit inputs)",
            yes(c.shader_float16),
            yes(c.storage_buffer_16bit),
            yes(c.integer_dot_product)
        );
        let sides: Vec<String> = c.cooperative_matrix_sides.iter().map(|s| format!("{s}×{s}×{s}")).collect();
        let _ = writeln!(
            s,
            "    matrix units       {} (VK_KHR_cooperative_matrix, f16 into f32, with subgroups: the prompt's f16 products)",
            if sides.is_empty() { "no".to_string() } else { sides.join(", ") }
        );
        let _ = writeln!(
            s,
            "    compute queues     {} (family 0), timestamp period {} ns",
            c.queue_count, c.timestamp_period_ns
        );
        let _ = writeln!(
            s,
            "    storage binding    maxStorageBufferRange {} bytes, minStorageBufferOffsetAlignment {}",
            c.max_storage_buffer_range, c.min_storage_buffer_offset_alignment
        );
        let _ = writeln!(
            s,
            "    memory             largest device-local heap {:.1} GiB; device-local host-visible {} \
             (DevicePoll's go words)",
            c.device_local_heap_bytes as f64 / (1u64 << 30) as f64,
            yes(c.device_local_host_visible)
        );
    }
    s
}
