//! crossgpu: compute on several Vulkan devices at once — of any vendor, in one process — and
//! sum tensors across them.
//!
//! crossgpu opens several Vulkan devices (two discrete GPUs, an iGPU beside a dGPU, Mesa's
//! lavapipe beside a GPU, or queues of one device standing in for separate GPUs) as one group,
//! runs WGSL kernels on each member's tensors, and all-reduces f32 tensors across the members
//! through host memory imported into every device: every member ends with bitwise the same sum.
//! On top of that it offers tensor-parallel layers and a decoder ([`tp`]), and the all-reduce
//! of a wgpu application's own buffers ([`embed`]).
//!
//! # Example
//!
//! Add two vectors on every member, then sum the results across the members:
//!
//! ```
//! use crossgpu::{AllReduceOptions, Comm, DeviceGroup, Instance};
//!
//! fn main() -> crossgpu::Result<()> {
//!     let instance = Instance::new()?; // every Vulkan adapter: dGPU, iGPU, lavapipe
//!     let group = DeviceGroup::from_env(&instance)?; // the members CROSSGPU_DEVICES names
//!     let mut parts = Vec::new();
//!     for member in group.members() {
//!         let a = member.upload_f32(&[1.0, 2.0, 3.0])?;
//!         let b = member.upload_f32(&[10.0, 20.0, 30.0])?;
//!         member.add(&a, &b)?; // a += b, recorded into this member's stream
//!         parts.push(a);
//!     }
//!     // Sum over every member, in place, through host memory imported into each device.
//!     let mut comm = Comm::new(&group)?;
//!     comm.all_reduce(&mut parts, &AllReduceOptions::default())?;
//!     println!("{:?} ({})", parts[0].read()?, comm.mode()); // [22.0, 44.0, 66.0] on two members
//!
//!     // Each member contributed [11, 22, 33]; every member holds the sum over all of them.
//!     let n = group.len() as f32;
//!     let expected = vec![11.0 * n, 22.0 * n, 33.0 * n];
//!     assert_eq!(parts[0].read()?, expected);
//!     for part in &parts {
//!         assert_eq!(part.read()?, expected);
//!     }
//!     Ok(())
//! }
//! ```
//!
//! # The types, in the order you meet them
//!
//! 1. [`Instance`] loads Vulkan and lists every adapter ([`Instance::adapters`]: [`AdapterInfo`]
//!    and its [`Capabilities`]; [`adapter_table`] prints them as `crossgpu devices` does).
//! 2. [`DeviceGroup`] opens the members, from `CROSSGPU_DEVICES` ([`DeviceGroup::from_env`]) or
//!    from a [`GroupSpec`] ([`DeviceGroup::open`]). A [`Member`] is one queue of a VkDevice with
//!    its own stream, buffers and semaphores: what the rest of the crate calls a device.
//! 3. A [`Tensor`] is a device-local buffer of f32, f16, bf16, u32 or i32 elements ([`DType`]) on one
//!    member, made with [`Member::upload_f32`], [`Member::upload`], [`Member::empty`] or
//!    [`Member::full`] and read back with [`Tensor::read`]. [`Member`]'s operations (fill, copy,
//!    add, scale, f32→f16 conversion, matvec) and the transformer's kernels
//!    ([`Member::transformer`]) record into the member's stream, which submits once per flush; [`Tensor::read`] and
//!    [`Member::synchronize`] submit and wait.
//! 4. [`Comm`] all-reduces across a group: [`Comm::all_reduce`] sums one f32 tensor per member
//!    in place, as [`AllReduceOptions`] say. The [`Mode`] is chosen at [`Comm::new`]
//!    ([`Comm::mode`], [`Comm::reason`]). The wire [`Precision`] is f32 below 1 MiB of payload
//!    and f16 from there, where each partial is rounded to f16 and values beyond ±65504
//!    saturate to ±65504: pass [`Precision::F32`] for data that may exceed the f16 range.
//! 5. [`tp`]: tensor parallelism: column- and row-parallel linear layers, splits
//!    ([`tp::SplitSpec`]) and a decoder ([`tp::Decoder`]) whose weights are generated on the
//!    devices.
//! 6. [`embed`]: the all-reduce inside a wgpu application, over its own `wgpu::Buffer`s.
//!
//! 7. [`kernels`]: kernels of your own, in WGSL, compiled at run time, their interface
//!    reflected; the library's kernels (`wgsl/`) are kernels of the same kind. [`dispatch`]
//!    runs one on a member ([`Member::dispatch`]) or on every member
//!    ([`DeviceGroup::dispatch_each`]), its arguments checked against that interface.
//! 8. [`Step`]: work that runs many times the same way (kernels and all-reduces), recorded once
//!    and replayed where the all-reduce mode allows it.
//!
//! All unsafe code and every raw Vulkan call lives in the `vk-native` crate; this crate is safe
//! Rust, and the only SPIR-V a pipeline is made from is what vk-native's compiler wrote.
//!
//! # Environment variables
//!
//! `CROSSGPU_DEVICES` (the members), `CROSSGPU_VALIDATION`, `CROSSGPU_TIMEOUT_MS` and
//! `CROSSGPU_MAX_IN_FLIGHT` configure the group; `CROSSGPU_ALLREDUCE`,
//! `CROSSGPU_ALLREDUCE_SPIN_US`, `CROSSGPU_JOINT_SUBMIT`, `CROSSGPU_F16_WIRE_BYTES` and
//! `CROSSGPU_PHASE_A_KERNEL_BYTES` the all-reduce; `CROSSGPU_SPLIT` the tensor-parallel split.
//! The README's table and the module docs of `src/config.rs` give each one's meaning and
//! default. Every one is parsed in `src/config.rs`; a value crossgpu cannot use is an
//! [`Error::BadConfig`] naming the variable, and [`check_environment`] parses them all at once so
//! that a typo fails before any work. From code, [`GroupSpec`], [`CommOptions`] and
//! [`tp::SplitSpec`] take the same settings.
//!
//! # Errors
//!
//! Every fallible function returns [`Result`], with the one [`Error`] enum:
//! - [`Error::InvalidArgument`]: the call is wrong (a bad shape, size, option or combination),
//!   whatever the devices; so are [`Error::LengthMismatch`], [`Error::DtypeMismatch`],
//!   [`Error::WrongOwner`] and [`Error::IndexOutOfRange`], which say what disagrees;
//! - [`Error::Unsupported`]: the call is well-formed but the devices cannot do it (a missing
//!   capability, a size past a device limit); [`Error::MissingExtension`] names the extension;
//! - [`Error::BadConfig`]: an environment variable or command-line flag has a value crossgpu
//!   cannot use; it names the variable or flag;
//! - [`Error::NoDriver`], [`Error::NoSuchAdapter`]: no Vulkan driver, or no adapter matches a
//!   `CROSSGPU_DEVICES` item;
//! - [`Error::OutOfDeviceMemory`], [`Error::OutOfHostMemory`], [`Error::DeviceLost`],
//!   [`Error::Timeout`] (every wait is bounded by `CROSSGPU_TIMEOUT_MS`) and [`Error::Vulkan`]:
//!   the device or the driver failed;
//! - [`Error::Poisoned`]: an earlier failure after work was submitted left the object (a
//!   communicator) unusable.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

#[cfg(feature = "bench")]
pub mod bench;
pub mod comm;
mod config;
pub mod dispatch;
mod dtype;
pub mod embed;
mod error;
mod group;
mod instance;
pub mod kernels;
pub mod model;
mod ops;
#[cfg(feature = "mpi")]
pub mod ranks;
mod sample;
pub mod step;
mod stream;
mod tensor;
pub mod tp;

pub use comm::{AllReduceOptions, BridgeStats, Comm, CommOptions, Mode, ModeRequest, Precision, ReduceOp};
pub use error::{Error, Result};
pub use group::{
    AdapterSelector, DeviceGroup, DeviceSpec, GroupId, GroupOptions, GroupSpec, Member, MemberStats,
};
pub use instance::{adapter_table, Instance};
pub use ops::{
    matvec_f16_kernel, Q8Vector, QuantFormat, QuantMatrix, MATVEC_F16_EIGHT_ROWS_FROM_COLS,
    MATVEC_F16_FOUR_LOADS_FROM_COLS, MATVEC_F16_KERNELS, Q8_BLOCK_ELEMS, Q8_BLOCK_WORDS,
};
pub use step::Step;
pub use tensor::{bf16_rounded, f16_saturating, DType, Tensor, TensorView, MAX_ELEMENTS};
pub use vk_native::{
    live_objects, take_suppressed_validation_count, validation_messages, AdapterInfo, Capabilities,
    DeviceType, LiveObjects, ValidationMessage, KNOWN_LAYER_FALSE_POSITIVES,
};

/// Parses every variable crossgpu reads (the environment table in README.md) and returns the first value it
/// cannot use, naming the variable. Programs call it before any work, so a typo in a variable
/// read late (the all-reduce's, the split) fails at once instead of after minutes of work.
pub fn check_environment() -> Result<()> {
    config::validation_from_env()?;
    config::max_in_flight_from_env()?;
    config::timeout_ms_from_env()?;
    if let Some(spec) = config::devices_from_env() {
        GroupSpec::parse(&spec)?;
    }
    CommOptions::from_env()?;
    tp::SplitSpec::from_env()?;
    Ok(())
}
