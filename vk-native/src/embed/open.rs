//! Opening a `wgpu::Device` with the interop extensions an embedded member needs.

use ash::{ext, khr};

use super::shared::VkApi;
use crate::error::{map_hal_device, NativeError, Result};

/// Opens a `wgpu::Device` and `wgpu::Queue` on `adapter` (a Vulkan adapter) with
/// VK_EXT_external_memory_host and VK_KHR_external_semaphore_fd added where the adapter has
/// them, through wgpu-hal's `open_with_callback` and `Adapter::create_device_from_hal`.
///
/// Fails with [`NativeError::Unsupported`] for a non-Vulkan adapter or features the adapter
/// lacks. A device opened on an adapter without VK_EXT_external_memory_host is returned too;
/// [`EmbeddedMember::new`] then reports the missing extension.
///
/// [`EmbeddedMember::new`]: super::EmbeddedMember::new
pub fn request_wgpu_device(
    adapter: &wgpu::Adapter,
    desc: &wgpu::DeviceDescriptor<'_>,
) -> Result<(wgpu::Device, wgpu::Queue)> {
    if !adapter.features().contains(desc.required_features) {
        return Err(NativeError::Unsupported(format!(
            "the adapter lacks features {:?}",
            desc.required_features - adapter.features()
        )));
    }
    let open = {
        // SAFETY: the guard only lends the wgpu-hal adapter; nothing is destroyed through it and
        // it is dropped at the end of this block, before wgpu uses the adapter again.
        let hal_adapter = unsafe { adapter.as_hal::<VkApi>() }
            .ok_or_else(|| NativeError::Unsupported("not a Vulkan adapter".into()))?;
        let caps = hal_adapter.physical_device_capabilities();
        let host_ext = caps.supports_extension(ext::external_memory_host::NAME);
        let fd_ext = caps.supports_extension(khr::external_semaphore_fd::NAME);
        let callback: Box<wgpu_hal::vulkan::CreateDeviceCallback<'_>> = Box::new(move |args| {
            if host_ext && !args.extensions.contains(&ext::external_memory_host::NAME) {
                args.extensions.push(ext::external_memory_host::NAME);
            }
            if fd_ext && !args.extensions.contains(&khr::external_semaphore_fd::NAME) {
                args.extensions.push(khr::external_semaphore_fd::NAME);
            }
        });
        // SAFETY: the callback only adds extensions the physical device exposes (checked above)
        // and removes nothing; the features were checked against the adapter's.
        unsafe {
            hal_adapter.open_with_callback(
                desc.required_features,
                &desc.required_limits,
                &desc.memory_hints,
                Some(callback),
            )
        }
        .map_err(map_hal_device("vkCreateDevice"))?
    };
    // SAFETY: `open` was just created from this very adapter's wgpu-hal adapter, with the
    // features of `desc` (plus extensions wgpu does not know of, which change nothing it relies on).
    unsafe { adapter.create_device_from_hal(open, desc) }
        .map_err(|e| NativeError::Unsupported(format!("create_device_from_hal: {e}")))
}
