//! The native layer's error type and the small functions that translate `vk::Result` codes.

use ash::vk;

/// Errors of the native layer. `crossgpu::Error` wraps these with more context.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum NativeError {
    /// The Vulkan loader or any driver is missing.
    #[error("no Vulkan driver found ({0}): install mesa-vulkan-drivers (lavapipe, the CPU driver) or a GPU driver, and libvulkan1")]
    NoDriver(String),
    /// Host memory ran out (VK_ERROR_OUT_OF_HOST_MEMORY or a failed allocation).
    #[error("out of host memory{0}")]
    OutOfHostMemory(String),
    /// Device memory ran out.
    #[error("out of device memory{0}")]
    OutOfDeviceMemory(String),
    /// The device was lost: every later call on it fails too.
    #[error("device lost")]
    DeviceLost,
    /// The device lacks an extension or feature this operation needs.
    #[error("the device lacks {0}")]
    MissingExtension(&'static str),
    /// A wait ran past its bound.
    #[error("timed out after {0} ms")]
    Timeout(u64),
    /// A request this device cannot do (e.g. more queues than its family has).
    #[error("{0}")]
    Unsupported(String),
    /// A Vulkan call failed with a code the caller cannot act on.
    #[error("{call} failed: {code:?}")]
    Vulkan {
        /// The Vulkan function that failed, e.g. `vkCreateBuffer`.
        call: &'static str,
        /// The result code it returned (its name in the message, e.g.
        /// `ERROR_INITIALIZATION_FAILED`).
        #[source]
        code: vk::Result,
    },
    /// A wgpu-hal call failed with an error the caller cannot act on.
    #[error("{call} failed: {error}")]
    Hal {
        /// The wgpu-hal function (or the Vulkan call behind it) that failed.
        call: &'static str,
        /// wgpu-hal's error.
        #[source]
        error: wgpu_hal::DeviceError,
    },
}

/// The native layer's result type: `E` defaults to [`NativeError`].
pub type Result<T, E = NativeError> = std::result::Result<T, E>;

/// Translates the codes a creation or submit call can return: out of host or device memory,
/// device lost; anything else becomes [`NativeError::Vulkan`] naming the call.
pub(crate) fn map_vk(call: &'static str) -> impl Fn(vk::Result) -> NativeError {
    move |code| match code {
        vk::Result::ERROR_OUT_OF_HOST_MEMORY => NativeError::OutOfHostMemory(format!(" in {call}")),
        vk::Result::ERROR_OUT_OF_DEVICE_MEMORY => NativeError::OutOfDeviceMemory(format!(" in {call}")),
        vk::Result::ERROR_DEVICE_LOST => NativeError::DeviceLost,
        code => NativeError::Vulkan { call, code },
    }
}

/// Translates wgpu-hal's device errors: out of memory, device lost; anything else becomes
/// [`NativeError::Hal`] naming the call.
pub(crate) fn map_hal_device(call: &'static str) -> impl Fn(wgpu_hal::DeviceError) -> NativeError {
    move |e| match e {
        wgpu_hal::DeviceError::OutOfMemory => NativeError::OutOfDeviceMemory(format!(" in {call}")),
        wgpu_hal::DeviceError::Lost => NativeError::DeviceLost,
        error => NativeError::Hal { call, error },
    }
}
