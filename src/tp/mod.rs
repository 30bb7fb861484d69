//! Tensor parallelism: one model's layers split across the members of a group, each doing part
//! of every matrix product, the partial results summed by the all-reduce.
//!
//! - [`split`]: how features are shared out (even, weighted, granularity).
//! - [`linear`]: [`ColumnParallelLinear`] (no communication) and [`RowParallelLinear`]
//!   (matrix–vector product, then all-reduce).
//! - [`Sharded`]: an activation held across the members as one value.
//! - [`Reducer`]: what the row-parallel products sum with — a [`crate::comm::Comm`], or the
//!   communicator across MPI ranks (feature `mpi`).
//! - [`TransformerOps`]: the transformer's kernels on one member's tensors (norms, RoPE,
//!   attention, the fused products, the greedy token), reached with `Member::transformer`.
//! - `block`: the decoder block's attention and MLP halves as tensor-parallel layers.
//! - `residual`: the residual stream's norms between the halves (written out, or left to the
//!   products that read them).
//! - `config`, `plan`: a decoder-only transformer's shape, and how it is cut across the
//!   members (and whether they can hold it).
//! - `weights`: where the weights come from ([`WeightSource`]: generated from a seed, or read
//!   from a checkpoint), each member's slices only.
//! - `decoder`: the [`Decoder`] built from them, for greedy decoding.
//! - `init`: deterministic weights generated on the device, and their CPU twin (public with
//!   the `test-hooks` feature, for the tests' references).
//!
//! What it must never do: let replicated activations drift apart. Every replicated tensor is
//! produced by the same kernels from bitwise-equal inputs, and the all-reduce returns bitwise
//! equal sums, so every member's copy stays identical.

mod block;
mod config;
mod decoder;
// The weights' CPU twin is for the tests' references (feature `test-hooks`), not the API.
#[cfg(feature = "test-hooks")]
pub mod init;
#[cfg(not(feature = "test-hooks"))]
mod init;
pub mod linear;
mod matrix;
mod ops;
mod plan;
mod reduce;
pub(crate) mod residual;
mod sharded;
pub mod split;
mod weights;

pub use config::DecoderConfig;
pub use decoder::{DecodeStats, Decoder, PROMPT_CHUNK, PROMPT_CHUNK_ON_UNITS, WARM_L2_DISCRETE};
pub use linear::{ColumnParallelLinear, RowParallelLinear};
pub use matrix::Matrix;
pub use ops::{
    attention_partials_len, pending_norm_squares, sampling_chunk_floats, AttentionShape, ProductInput,
    PromptShape, TransformerOps, ATTENTION_CHUNK, PROMPT_MAX_HEAD_DIM, SAMPLING_CHUNK, SAMPLING_MAX_MEMBERS,
    SAMPLING_SETTINGS_WORDS, WARM_L2_KEY, WARM_MAX_BYTES,
};
pub use plan::{check_fits, check_fits_with, Footprint, Plan};
pub use reduce::Reducer;
pub use sharded::Sharded;
pub use split::{split_ranges, SplitSpec};
pub use weights::{Norm, Seeded, Weight, WeightSource};
