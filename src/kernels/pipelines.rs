//! One VkDevice's pipelines, made from [`Kernel`]s at their first dispatch there and kept for
//! the device's life (members that share a VkDevice share them).

use std::sync::Mutex;

use vk_native::Device;

use super::kernel::Kernel;

pub(crate) struct Pipelines {
    device: Device,
    /// Indexed by the kernel's id (dense in the process).
    made: Mutex<Vec<Option<vk_native::Kernel>>>,
}

impl Pipelines {
    pub(crate) fn new(device: Device) -> Self {
        Self { device, made: Mutex::new(Vec::new()) }
    }

    /// The pipeline of `kernel` on this device, made now if it is the first use.
    pub(crate) fn get(&self, kernel: &Kernel) -> vk_native::Result<vk_native::Kernel> {
        let i = kernel.id().0 as usize;
        let mut made = self.made.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(Some(k)) = made.get(i) {
            return Ok(k.clone());
        }
        let k = vk_native::Kernel::new(&self.device, kernel.shader())?;
        if made.len() <= i {
            made.resize(i + 1, None);
        }
        made[i] = Some(k.clone());
        Ok(k)
    }
}
