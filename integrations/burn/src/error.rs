//! What can go wrong between burn and crossgpu: crossgpu's own errors, a device burn would not
//! take, and tensors the all-reduce cannot sum (each named by its member).

/// A crossgpu-burn result.
pub type Result<T> = std::result::Result<T, Error>;

/// Why an operation of this crate failed. Nothing is submitted when a tensor is refused: every
/// tensor of a call is checked before any work starts.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// crossgpu refused or failed: opening a device, the all-reduce itself, a bad argument.
    #[error(transparent)]
    Crossgpu(#[from] crossgpu::Error),
    /// cubecl-wgpu (burn's wgpu runtime) refused a device crossgpu opened.
    #[error("burn's wgpu runtime would not take member {member}'s device: {why}")]
    Register {
        /// The member whose device was refused.
        member: usize,
        /// cubecl-wgpu's reason.
        why: String,
    },
    /// One tensor per member was expected.
    #[error("{what}: expected one tensor per member ({expected}), got {got}")]
    Count {
        /// The operation.
        what: &'static str,
        /// The number of members.
        expected: usize,
        /// The number of tensors given.
        got: usize,
    },
    /// A tensor of a dtype the call does not take: [`Comm::all_reduce`](crate::Comm::all_reduce)
    /// sums f32; the other collectives take f32, f16 or bf16, one dtype for all members.
    #[error("member {member}'s tensor is {got:?}; all_reduce sums f32, the other collectives take f32, f16 or bf16 (member 0's dtype)")]
    DType {
        /// The member.
        member: usize,
        /// The tensor's dtype.
        got: burn::tensor::DType,
    },
    /// A tensor on a device that is not its member's (another member's, or one crossgpu did
    /// not open).
    #[error("member {member}'s tensor is on {got}, not on the member's device {expected}")]
    Device {
        /// The member.
        member: usize,
        /// The tensor's device.
        got: String,
        /// The member's device.
        expected: String,
    },
    /// Tensors of different shapes.
    #[error("member {member}'s tensor has shape {got:?}, member 0's {expected:?}")]
    Shape {
        /// The member.
        member: usize,
        /// The tensor's shape.
        got: Vec<usize>,
        /// Member 0's tensor's shape.
        expected: Vec<usize>,
    },
    /// A tensor that takes part in an autodiff graph: all-reduce the gradients (which have
    /// none) or the tensor's `inner()`.
    #[error("member {member}'s tensor is an autodiff tensor; all-reduce its inner() tensor or a gradient")]
    Autodiff {
        /// The member.
        member: usize,
    },
    /// burn's wgpu runtime failed to hand out a tensor's buffer or to flush its queued work.
    #[error("burn's wgpu runtime on member {member}: {why}")]
    Runtime {
        /// The member.
        member: usize,
        /// cubecl's error.
        why: String,
    },
}
