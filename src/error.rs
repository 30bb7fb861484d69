//! The one error type of crossgpu: variants a caller can act on, messages that say what to do.

use vk_native::NativeError;

use crate::tensor::DType;

/// Everything that can go wrong in crossgpu. No public function panics on bad input.
#[derive(Debug, Clone, thiserror::Error, PartialEq)]
pub enum Error {
    /// No Vulkan loader or driver.
    #[error("no Vulkan driver found: install mesa-vulkan-drivers (lavapipe, the CPU driver) or a GPU driver, and libvulkan1 ({0})")]
    NoDriver(String),
    /// A device selector matched no adapter.
    #[error("no adapter matches '{selector}'; adapters are: {available}")]
    NoSuchAdapter { selector: String, available: String },
    /// An environment variable or option has a value crossgpu cannot use.
    #[error("bad value '{value}' for {name}: {why}")]
    BadConfig { name: &'static str, value: String, why: String },
    /// A member index past the end of the group.
    #[error("member index {index} out of range: the group has {len} members")]
    IndexOutOfRange { index: usize, len: usize },
    /// Element counts or shapes that must agree do not.
    #[error("length mismatch in {what}: expected {expected}, got {got}")]
    LengthMismatch { what: String, expected: usize, got: usize },
    /// A tensor of the wrong element type.
    #[error("dtype mismatch in {what}: expected {expected}, got {got}")]
    DtypeMismatch { what: String, expected: DType, got: DType },
    /// A tensor used with a member, group or communicator it does not belong to.
    #[error("{what}: tensor belongs to {got}, expected {expected}")]
    WrongOwner { what: String, expected: String, got: String },
    /// Device memory ran out.
    #[error("out of device memory on {device}{detail}")]
    OutOfDeviceMemory { device: String, detail: String },
    /// Host memory ran out.
    #[error("out of host memory{0}")]
    OutOfHostMemory(String),
    /// A device lacks an extension or feature that the operation needs.
    #[error("{device} lacks {what}")]
    MissingExtension { device: String, what: String },
    /// The device was lost; it cannot be used again.
    #[error("device lost: {device}")]
    DeviceLost { device: String },
    /// A wait ran past its bound (`CROSSGPU_TIMEOUT_MS`).
    #[error("timed out after {ms} ms waiting for {what}")]
    Timeout { what: String, ms: u64 },
    /// An earlier error left this object unusable.
    #[error("{0} is poisoned by an earlier error: {1}")]
    Poisoned(String, String),
    /// A request the devices cannot do.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// Any other Vulkan failure.
    #[error("vulkan: {0}")]
    Vulkan(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Converts a native-layer error, naming the device it happened on.
    pub(crate) fn native(device: &str, e: NativeError) -> Self {
        match e {
            NativeError::NoDriver(s) => Self::NoDriver(s),
            NativeError::OutOfHostMemory(s) => Self::OutOfHostMemory(s),
            NativeError::OutOfDeviceMemory(s) => Self::OutOfDeviceMemory { device: device.into(), detail: s },
            NativeError::DeviceLost => Self::DeviceLost { device: device.into() },
            NativeError::MissingExtension(w) => {
                Self::MissingExtension { device: device.into(), what: w.into() }
            }
            NativeError::Timeout(ms) => Self::Timeout { what: device.into(), ms },
            NativeError::Unsupported(s) => Self::Unsupported(format!("{device}: {s}")),
            e @ NativeError::Vulkan { .. } => Self::Vulkan(format!("{device}: {e}")),
        }
    }
}
