//! Kernels: compute programs in WGSL that run on a member's tensors. A [`Kernel`] is compiled
//! from WGSL at run time (naga; bad WGSL is an [`crate::Error::Shader`] with the line and
//! column), its interface reflected ([`Kernel::interface`]), and dispatched on a member with
//! [`crate::Member::dispatch`] or on every member with [`crate::DeviceGroup::dispatch_each`]:
//! checked against the interface first, then recorded into the member's stream like the
//! library's own kernels, which are kernels of the same kind (the `wgsl/` files, checked at
//! build time, compiled at first use: [`KERNELS`]).
//!
//! - `kernel.rs`: [`Kernel`] and its options ([`KernelBuilder`]).
//! - `args.rs`: what a dispatch takes ([`Arg`], [`Immediates`], [`Value`]) and its checks.
//! - `dispatch.rs`: [`crate::Member::dispatch`] and [`crate::DeviceGroup::dispatch_each`].
//! - `pipelines.rs`: one VkDevice's pipelines, made at first use.
//! - `builtin.rs`: the library's kernels, named inside the crate by typed handles.
//!
//! What it must never do: hand the driver SPIR-V that naga did not write, or record a dispatch
//! whose arguments it did not check against the kernel's interface and the device's limits.

mod args;
mod builtin;
mod dispatch;
mod kernel;
mod pipelines;

pub use args::{Arg, Immediates, Value};
pub use builtin::{spec, KernelSpec, KERNELS};
pub use dispatch::MemberDispatch;
pub use kernel::{Kernel, KernelBuilder};
pub use vk_native::shader::{Binding, BindingKind, ImmediateField, Interface, Scalar};
pub use vk_native::ShaderError;

pub(crate) use builtin::*;
pub(crate) use pipelines::Pipelines;
