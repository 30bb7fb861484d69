//! The one error type of crossgpu: variants a caller can act on, messages that say what to do.

mod format;

pub use format::FormatError;

use vk_native::NativeError;

use crate::dtype::DType;

/// Everything that can go wrong in crossgpu. No public function panics on bad input.
#[derive(Debug, Clone, thiserror::Error, PartialEq)]
pub enum Error {
    /// No Vulkan loader or driver.
    #[error("no Vulkan driver found: install mesa-vulkan-drivers (lavapipe, the CPU driver) or a GPU driver, and libvulkan1 ({0})")]
    NoDriver(String),
    /// A device selector matched no adapter.
    #[error("no adapter matches '{selector}'; adapters are: {available}")]
    NoSuchAdapter {
        /// The selector as given: an adapter number or a name.
        selector: String,
        /// The adapters the instance lists, to choose from.
        available: String,
    },
    /// An environment variable or option has a value crossgpu cannot use.
    #[error("bad value '{value}' for {name}: {why}")]
    BadConfig {
        /// The environment variable (or, through [`Error::for_setting`], the flag) that was set.
        name: &'static str,
        /// The value it was set to.
        value: String,
        /// Why the value cannot be used, and what is accepted.
        why: String,
    },
    /// An index past the end of what it indexes: `what` names the index (e.g. "member index",
    /// "token id"), `of` what there are `len` of (e.g. "members in the group").
    #[error("{what} {index} out of range: there are {len} {of}")]
    IndexOutOfRange {
        /// What the index is, e.g. "member index".
        what: &'static str,
        /// The index given.
        index: usize,
        /// How many there are: valid indices are `0..len`.
        len: usize,
        /// What there are `len` of, e.g. "members in the group".
        of: &'static str,
    },
    /// The call itself is wrong (a bad shape, size, option or combination), whatever the
    /// devices: the message says what and how to call it instead.
    #[error("{0}")]
    InvalidArgument(String),
    /// Element counts or shapes that must agree do not.
    #[error("length mismatch in {what}: expected {expected}, got {got}")]
    LengthMismatch {
        /// The call or operand that has the wrong length.
        what: String,
        /// The length it needs (elements, unless the message says otherwise).
        expected: usize,
        /// The length it has.
        got: usize,
    },
    /// A tensor of the wrong element type.
    #[error("dtype mismatch in {what}: expected {expected}, got {got}")]
    DtypeMismatch {
        /// The call or operand that has the wrong element type.
        what: String,
        /// The element type it needs.
        expected: DType,
        /// The element type it has.
        got: DType,
    },
    /// A tensor used with a member, group or communicator it does not belong to.
    #[error("{what}: tensor belongs to {got}, expected {expected}")]
    WrongOwner {
        /// The call or operand that has the wrong owner.
        what: String,
        /// The member or group it should belong to.
        expected: String,
        /// The member or group it belongs to.
        got: String,
    },
    /// Device memory ran out.
    #[error("out of device memory on {device}{detail}")]
    OutOfDeviceMemory {
        /// The device (member) that ran out.
        device: String,
        /// What was being allocated, when known (may be empty).
        detail: String,
    },
    /// Host memory ran out.
    #[error("out of host memory{0}")]
    OutOfHostMemory(String),
    /// A device lacks an extension or feature that the operation needs.
    #[error("{device} lacks {what}")]
    MissingExtension {
        /// The device (member) that lacks it.
        device: String,
        /// The extension or feature, e.g. "timeline semaphores".
        what: String,
    },
    /// The device was lost; it cannot be used again.
    #[error("device lost: {device}")]
    DeviceLost {
        /// The device (member) that was lost.
        device: String,
    },
    /// A wait ran past its bound (`CROSSGPU_TIMEOUT_MS`).
    #[error("timed out after {ms} ms waiting for {what}")]
    Timeout {
        /// What was being waited for and on which device (or only the device).
        what: String,
        /// The bound that passed, in ms.
        ms: u64,
    },
    /// An earlier error left this object unusable: the object (e.g. "the communicator"), then the
    /// earlier error's message.
    #[error("{0} is poisoned by an earlier error: {1}")]
    Poisoned(String, String),
    /// A request the devices (or this build of crossgpu) cannot do, although the call is
    /// well-formed: a missing capability, a size past a device limit.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// A WGSL kernel naga could not compile, or whose interface crossgpu cannot bind: naga's
    /// message, the line and column it points at, and the source around them.
    #[error("{0}")]
    Shader(vk_native::ShaderError),
    /// A model file that cannot be used: the file, and the tensor or metadata key at fault.
    #[error("model file {0}")]
    Model(#[from] FormatError),
    /// Any other Vulkan failure, with the native error (and through it the `vk::Result` or
    /// wgpu-hal error) as its source.
    #[error("vulkan: {device}: {source}")]
    Vulkan {
        /// The device (member) it happened on.
        device: String,
        /// The native layer's error.
        #[source]
        source: NativeError,
    },
}

/// crossgpu's result type: `E` defaults to [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// `index` is not a member of a group of `len`.
    pub(crate) fn member_index(index: usize, len: usize) -> Self {
        Self::IndexOutOfRange { what: "member index", index, len, of: "members in the group" }
    }

    /// The same error, but a [`Error::BadConfig`] names `name` (e.g. the command-line flag the
    /// user typed, `--split`) instead of the environment variable the parser reads.
    pub fn for_setting(self, name: &'static str) -> Self {
        match self {
            Self::BadConfig { value, why, .. } => Self::BadConfig { name, value, why },
            other => other,
        }
    }

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
            source @ (NativeError::Vulkan { .. } | NativeError::Hal { .. }) => {
                Self::Vulkan { device: device.into(), source }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vk_native::VkResult;

    /// A caller can reach the `vk::Result` behind a Vulkan failure through `source()`.
    #[test]
    fn vulkan_errors_keep_the_result_code_as_their_source() {
        let code = VkResult::ERROR_INITIALIZATION_FAILED;
        let e = Error::native("member 0", NativeError::Vulkan { call: "vkCreateBuffer", code });
        let msg = e.to_string();
        assert!(
            msg.contains("member 0")
                && msg.contains("vkCreateBuffer")
                && msg.contains("ERROR_INITIALIZATION_FAILED"),
            "{msg}"
        );
        let native = std::error::Error::source(&e).expect("the native error is the source");
        let vk = native.source().expect("the vk::Result is the native error's source");
        assert_eq!(vk.downcast_ref::<VkResult>(), Some(&code));
    }
}
