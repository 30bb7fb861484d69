//! Compute pipelines made from [`Shader`]s (WGSL compiled by naga), and their bind groups.
//!
//! Every kernel binds storage or uniform buffers at group 0, bindings 0..n, and takes its small
//! parameters as immediates (push constants): a kernel's bind group is made once per buffer set
//! and reused. A pipeline is made only from a [`Shader`], whose SPIR-V naga wrote, validated and
//! bounds-checked, after its workgroup size, shared memory, immediates and f16 use were checked
//! against the device; a bind group only over ranges that fit the interface and the device's
//! limits. So no dispatch, whatever its workgroups and immediates, reaches past a binding.
//!
//! crossgpu's own kernels ([`Kernel`]) are Vulkan objects made here with ash, so that a command
//! buffer can bind them by handle and be recorded once and replayed
//! (`Recorder::begin_capture`): wgpu-hal keeps its pipeline and descriptor-set handles
//! private and records one-time command buffers only. The wgpu embedding, which records into a
//! borrowed wgpu device, keeps wgpu-hal's objects ([`PipelineObjects`]).
//!
//! - `compute.rs`: [`Kernel`], a compute pipeline made from a checked [`Shader`].
//! - `pipeline.rs`: the ash objects of a [`Kernel`]: shader module, layouts and pipeline.
//! - `limits.rs`: a shader checked against the device's limits before a pipeline is made.
//! - `bind_group.rs`: [`BindGroup`]s over checked [`BindRange`]s, and their descriptor sets.
//! - `hal_pipeline.rs`: the wgpu-hal objects of the embedding's pipeline ([`PipelineObjects`]).

mod bind_group;
mod compute;
mod hal_pipeline;
mod limits;
mod pipeline;

pub use bind_group::{BindGroup, BindRange};
pub use compute::Kernel;
pub(crate) use hal_pipeline::PipelineObjects;
