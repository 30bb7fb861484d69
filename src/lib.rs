//! crossgpu: compute on several Vulkan devices at once — of any vendor, in one process — and
//! sum tensors across them.
//!
//! - [`Instance`] lists adapters; [`DeviceGroup`] opens members (a queue of a VkDevice each)
//!   from an adapter list or `CROSSGPU_DEVICES` ([`GroupSpec`]).
//! - [`Tensor`]s live on one member; [`Member`]'s operations (fill, copy, add, scale, convert,
//!   matvec) record into the member's stream, which submits once per flush.
//! - Kernels are WGSL in `wgsl/`, compiled to SPIR-V by naga at build time ([`kernels`]).
//! - All unsafe code and every raw Vulkan call lives in the `vk-native` crate; this crate is
//!   safe Rust.

#![forbid(unsafe_code)]

pub mod bench;
pub mod comm;
mod config;
pub mod embed;
mod error;
mod group;
mod instance;
pub mod kernels;
mod ops;
mod stream;
mod tensor;
pub mod tp;

pub use comm::{AllReduceOptions, BridgeStats, Comm, CommOptions, Mode, ModeRequest, Precision};
pub use error::{Error, Result};
pub use group::{AdapterSelector, DeviceGroup, DeviceSpec, GroupId, GroupSpec, Member};
pub use instance::{adapter_table, Instance};
pub use ops::{matvec_f16_kernel, AttentionShape, MATVEC_F16_EIGHT_ROWS_FROM_COLS, MATVEC_F16_KERNELS};
pub use tensor::{f16_saturating, DType, Tensor, MAX_ELEMENTS};
pub use vk_native::{
    live_objects, validation_messages, AdapterInfo, Capabilities, DeviceType, LiveObjects, ValidationMessage,
};
