//! The transformer's kernels on one member's tensors: norms, RoPE, attention over the KV cache,
//! the fused q/k/v and gate/up products, the greedy token's selection, the deterministic
//! weights. The decoder (`model`, `block`) is written in these; they are public for the
//! tests that check each against its CPU twin and for users building other decoders. Same
//! rules as the member's general operations: check everything, then record one dispatch.
//!
//! - `transformer.rs`: [`TransformerOps`] and what its kernels share (checked parameters, the
//!   decode position).
//! - `norm.rs`, `attention.rs`, `mlp.rs`, `token.rs`: the kernels of each part of a layer.
//! - `prompt.rs`: the same work over many rows of a prompt at once.
//! - `init_weights.rs`: weights generated on the device.

mod attention;
mod init_weights;
mod mlp;
mod norm;
mod prompt;
mod token;
mod transformer;

pub use attention::AttentionShape;
pub use prompt::{PromptShape, PROMPT_MAX_HEAD_DIM};
pub(crate) use transformer::Position;
pub use transformer::TransformerOps;
