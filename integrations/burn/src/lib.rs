//! crossgpu for burn: burn tensors on several wgpu devices — GPUs of any vendor, lavapipe —
//! summed (and gathered, scattered, broadcast) across them by crossgpu's collectives, in their
//! own GPU memory.
//!
//! burn's collectives have no Vulkan transport and cubecl's exist only on CUDA; this crate
//! gives burn's wgpu backend a tensor all-reduce across devices:
//!
//! - [`Comm`] opens one device per member with the extensions crossgpu needs, hands each to
//!   burn's wgpu runtime (cubecl-wgpu's `try_init_device`), and sums one f32 tensor per member
//!   ([`Comm::all_reduce`]), every member ending with bitwise the same result;
//! - the other collectives, on f32, f16 and bf16 tensors: [`Comm::all_reduce_op`] with any
//!   [`ReduceOp`] (burn-collective's sum and mean are `Sum` and `Avg`), [`Comm::broadcast`],
//!   [`Comm::reduce`] to a root, [`Comm::all_gather`] and [`Comm::reduce_scatter`] along the
//!   first dimension — every member's result bitwise the same;
//! - [`Comm::all_reduce_grads`] sums the gradients of data-parallel replicas of a model, for
//!   burn's optimizers;
//! - [`tp`] holds column- and row-parallel linear layers as burn modules.
//!
//! ```no_run
//! use crossgpu_burn::burn::tensor::{Distribution, Tensor};
//! use crossgpu_burn::Comm;
//!
//! let mut comm = Comm::open("0,1", 2)?; // or "llvmpipe" for two lavapipe devices
//! let parts: Vec<Tensor<1>> = comm
//!     .devices()
//!     .iter()
//!     .map(|d| Tensor::<1>::random([1000], Distribution::Default, d))
//!     .collect();
//! let sums = comm.all_reduce(parts)?;
//! assert_eq!(sums[0].to_data(), sums[1].to_data());
//! # Ok::<(), crossgpu_burn::Error>(())
//! ```
//!
//! burn must run on its wgpu backend without fusion (a fused tensor has no memory of its own
//! until its graph runs): depend on `burn` with `default-features = false` and the features
//! `std`, `wgpu` (and `autodiff`, `optim` for training), as this crate does. Without
//! `autotune`, too, where replicas must stay bitwise equal: kernels picked by timing can
//! differ between two devices of one kind.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod collectives;
mod comm;
mod data_parallel;
mod error;
pub mod tp;

pub use burn;
pub use comm::Comm;
pub use comm::BUCKET_ELEMENTS;
pub use crossgpu::ReduceOp;
pub use error::{Error, Result};
