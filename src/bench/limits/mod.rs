//! The limits the all-reduce and the kernels are measured against, on one member's device:
//! copy bandwidth between device memory and imported host memory (both ways), device-local
//! bandwidth through a WGSL copy kernel and through vkCmdCopyBuffer, the round trip of a
//! host-signalled timeline semaphore, DevicePoll's wake (a kernel polling mapped device memory
//! that the host stores to), the CPU cost of one empty submit, and the GPU cost of a submit
//! boundary.
//!
//! - `measure.rs`: [`measure`] and what it finds ([`Limits`]).
//! - `timing.rs`: the gated chains, submit batches and the copy kernel's rate.
//! - `poll.rs`: DevicePoll's wake and the relay's step.

mod measure;
mod poll;
mod timing;

pub use measure::{measure, Limits, MIN_BYTES};
pub use poll::relay_step;
pub use timing::{copy_kernel_gbps, copy_variants, CopyVariant, CHAIN, RECORDED};
