//! The native layer of crossgpu: every `unsafe` call and every raw Vulkan (ash) call of the
//! project lives in this crate, so the `crossgpu` crate above it can be `#![forbid(unsafe_code)]`.
//!
//! What it does that wgpu does not expose:
//! - opens wgpu-hal Vulkan devices with extra extensions (VK_EXT_external_memory_host,
//!   VK_KHR_external_semaphore_fd) and extra queues of family 0 ([`Device::open`]);
//! - imports page-aligned host memory into a device as a storage buffer ([`HostAllocation`],
//!   [`ImportedBuffer`]), whose words the host reads atomically ([`HostAllocation::word`]);
//! - words of device-local memory the host stores to while a kernel polls them ([`MappedWords`]);
//! - timeline semaphores signalled and waited from the host ([`TimelineSemaphore`]) and binary
//!   semaphores whose payload travels as a SYNC_FD ([`SyncFdSemaphore`]);
//! - records compute dispatches, copies and global memory barriers through wgpu-hal command
//!   encoders and submits them raw on any of the device's queues ([`Recorder`]).
//!
//! Ownership rule (STYLE.md 2): each Vulkan object created here is owned by exactly one Rust value
//! whose `Drop` destroys it, and every such value keeps an `Arc` to its device, so a device is
//! destroyed after the last object made from it. Objects that the GPU may still use are only
//! destroyed after the owner has waited for the work that uses them (see [`Device::wait_idle_queues`]).

#![warn(missing_docs)]

mod access;
mod buffer;
mod command;
mod conv;
mod device;
mod embed;
mod error;
mod host;
mod instance;
mod kernel;
mod live;
mod mapped;
mod profile;
mod semaphore;
pub mod shader;
mod validation;

pub use access::Access;
/// Vulkan's result codes, as [`NativeError::Vulkan`] carries them.
pub use ash::vk::Result as VkResult;
#[doc(hidden)]
pub use buffer::GpuUse;
pub use buffer::{Buffer, BufferId, BufferUsage, GpuBuffer, StagingBuffer};
pub use command::{Recorder, Replay, SubmitInfo, DEFAULT_MAX_PENDING};
pub use device::{Device, DeviceId};
pub use embed::{request_wgpu_device, BufferRange, EmbeddedDispatch, EmbeddedMember, EmbeddedSlots};
pub use error::{NativeError, Result};
pub use host::{HostAllocation, ImportedBuffer};
pub use instance::{AdapterInfo, Capabilities, DeviceType, Instance, InstanceOptions};
pub use kernel::{BindGroup, BindRange, Kernel};
pub use live::{live_objects, LiveObjects};
pub use mapped::MappedWords;
pub use semaphore::{SyncFd, SyncFdSemaphore, TimelineSemaphore};
pub use shader::{CompileOptions, Shader, ShaderError};
pub use validation::{
    take_suppressed_validation_count, validation_messages, ValidationMessage, KNOWN_LAYER_FALSE_POSITIVES,
    NEWER_THAN_THE_LAYER,
};
