//! Collects the Khronos validation layer's errors so tests can fail on any of them.
//!
//! wgpu-hal installs its own debug messenger that only logs; this one records every message of
//! ERROR severity (synchronization hazards included) in a process-wide list that
//! [`validation_messages`] drains, except the layer's known false positives
//! ([`KNOWN_LAYER_FALSE_POSITIVES`]), which it only counts
//! ([`take_suppressed_validation_count`]).

use std::ffi::{c_void, CStr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use ash::{ext, vk};

/// One error reported by the validation layer.
#[derive(Debug, Clone)]
pub struct ValidationMessage {
    /// The message id's name, e.g. a VUID or `SYNC-HAZARD-WRITE-AFTER-READ`.
    pub id_name: String,
    /// The message id's number (`messageIdNumber`).
    pub id_number: i32,
    /// The layer's full message text.
    pub message: String,
}

/// Message ids the layer reports about its own bookkeeping, not about the application: exactly
/// one. `UNASSIGNED-VkSemaphore-state-timeout` ("This is most likely a validation bug",
/// KhronosGroup/Vulkan-ValidationLayers issues 4968 and 8461) fires when a queue submission
/// waits on a timeline value that the host signals later from another thread, which the spec
/// allows ("wait-before-signal", Vulkan spec §7.4.4 Semaphore Waiting;
/// VUID-VkSemaphoreSignalInfo-value-03258 only requires the value to exceed the current and
/// pending ones). It reports no hazard and no misuse.
pub const KNOWN_LAYER_FALSE_POSITIVES: &[&str] = &["UNASSIGNED-VkSemaphore-state-timeout"];

/// Structures a layer older than their extension reports as unknown in `vkCreateDevice`'s
/// `pNext` chain (message id, and the structure type it names): valid Vulkan the layer's
/// headers predate, counted as suppressed like [`KNOWN_LAYER_FALSE_POSITIVES`]. 1000506000 is
/// `VkPhysicalDeviceCooperativeMatrixFeaturesKHR` (VK_KHR_cooperative_matrix, headers 1.3.255),
/// which the device enables where the driver has the extension (NVIDIA 580) and which Debian
/// 12's layer (1.3.239, the one carried to the GPU machine) does not know.
pub const NEWER_THAN_THE_LAYER: &[(&str, &str)] =
    &[("VUID-VkDeviceCreateInfo-pNext-pNext", "unknown VkStructureType (1000506000)")];

static MESSAGES: Mutex<Vec<ValidationMessage>> = Mutex::new(Vec::new());
static SUPPRESSED: AtomicUsize = AtomicUsize::new(0);

/// Takes every validation error recorded since the last call, in every instance of the process
/// (the known false positives are not among them).
pub fn validation_messages() -> Vec<ValidationMessage> {
    std::mem::take(&mut *MESSAGES.lock().unwrap_or_else(|p| p.into_inner()))
}

/// How many [`KNOWN_LAYER_FALSE_POSITIVES`] the layer reported since the last call.
pub fn take_suppressed_validation_count() -> usize {
    SUPPRESSED.swap(0, Ordering::Relaxed)
}

unsafe extern "system" fn on_message(
    severity: vk::DebugUtilsMessageSeverityFlagsEXT,
    _types: vk::DebugUtilsMessageTypeFlagsEXT,
    data: *const vk::DebugUtilsMessengerCallbackDataEXT<'_>,
    _user: *mut c_void,
) -> vk::Bool32 {
    if !severity.contains(vk::DebugUtilsMessageSeverityFlagsEXT::ERROR) || data.is_null() {
        return vk::FALSE;
    }
    // SAFETY: the layer passes a valid callback-data struct for the duration of the call; its
    // strings are NUL-terminated or null.
    let d = unsafe { &*data };
    let text = |p: *const std::ffi::c_char| {
        if p.is_null() {
            String::new()
        } else {
            // SAFETY: see above.
            unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
        }
    };
    let msg = ValidationMessage {
        id_name: text(d.p_message_id_name),
        id_number: d.message_id_number,
        message: text(d.p_message),
    };
    let newer =
        NEWER_THAN_THE_LAYER.iter().any(|(id, what)| msg.id_name == *id && msg.message.contains(what));
    if newer || KNOWN_LAYER_FALSE_POSITIVES.contains(&msg.id_name.as_str()) {
        SUPPRESSED.fetch_add(1, Ordering::Relaxed);
        return vk::FALSE;
    }
    eprintln!("VALIDATION ERROR [{}]: {}", msg.id_name, msg.message);
    if let Ok(mut m) = MESSAGES.lock() {
        m.push(msg);
    }
    vk::FALSE
}

pub(crate) struct ValidationMessenger {
    loader: ext::debug_utils::Instance,
    raw: vk::DebugUtilsMessengerEXT,
}

impl ValidationMessenger {
    /// Installs the messenger when the instance has VK_EXT_debug_utils (wgpu-hal enables it with
    /// `InstanceFlags::DEBUG`); `None` otherwise.
    pub(crate) fn new(shared: &wgpu_hal::vulkan::InstanceShared) -> Option<Self> {
        if !shared.extensions().contains(&ext::debug_utils::NAME) {
            log::warn!(
                "validation requested but VK_EXT_debug_utils is not enabled: errors are not collected"
            );
            return None;
        }
        let has_layer = {
            // SAFETY: plain enumeration through the loaded entry.
            let layers = unsafe { shared.entry().enumerate_instance_layer_properties() }.unwrap_or_default();
            layers.iter().any(|l| l.layer_name_as_c_str() == Ok(c"VK_LAYER_KHRONOS_validation"))
        };
        if !has_layer {
            log::warn!("validation requested but VK_LAYER_KHRONOS_validation is not installed (apt-get install vulkan-validationlayers)");
            return None;
        }
        let loader = ext::debug_utils::Instance::new(shared.entry(), shared.raw_instance());
        let info = vk::DebugUtilsMessengerCreateInfoEXT::default()
            .message_severity(vk::DebugUtilsMessageSeverityFlagsEXT::ERROR)
            .message_type(
                vk::DebugUtilsMessageTypeFlagsEXT::VALIDATION | vk::DebugUtilsMessageTypeFlagsEXT::GENERAL,
            )
            .pfn_user_callback(Some(on_message));
        // SAFETY: the callback is a plain function with no user data; the messenger is destroyed
        // in Drop, before the instance (field order of `InstanceShared`).
        let raw = unsafe { loader.create_debug_utils_messenger(&info, None) }.ok()?;
        Some(Self { loader, raw })
    }
}

impl Drop for ValidationMessenger {
    fn drop(&mut self) {
        // SAFETY: created by this loader; `InstanceShared` drops it before the VkInstance.
        unsafe { self.loader.destroy_debug_utils_messenger(self.raw, None) };
    }
}
