//! Kernels: compute programs in WGSL that run on a member's tensors. A [`Kernel`] is compiled
//! from WGSL at run time (naga; bad WGSL is an [`crate::error::Error::Shader`] with the line
//! and column) and its interface reflected ([`Kernel::interface`]); `crate::dispatch` runs it
//! on a member's tensors, checked against that interface first, then recorded into the
//! member's stream like the library's own kernels, which are kernels of the same kind (the
//! `wgsl/` files, checked at build time, compiled at first use: [`KERNELS`]).
//!
//! - `kernel.rs`: [`Kernel`] and its options ([`KernelBuilder`]).
//! - `pipelines.rs`: one VkDevice's pipelines, made at first use.
//! - `builtin.rs`: the library's kernels, named inside the crate by typed handles.
//!
//! What it must never do: hand the driver SPIR-V that naga did not write, or record a dispatch
//! whose arguments it did not check against the kernel's interface and the device's limits.

mod builtin;
mod kernel;
mod pipelines;

pub use builtin::{spec, KernelSpec, KERNELS};
pub use kernel::{Kernel, KernelBuilder};
pub use vk_native::shader::{Binding, BindingKind, ImmediateField, Interface, Scalar};
pub use vk_native::ShaderError;

pub(crate) use builtin::*;
pub(crate) use pipelines::Pipelines;
