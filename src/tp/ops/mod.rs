//! The transformer's kernels on one member's tensors: norms, RoPE, attention over the KV cache,
//! the fused q/k/v and gate/up products, the greedy token's selection, the drawn token, the deterministic
//! weights. The decoder (`model`, `block`) is written in these; they are public for the
//! tests that check each against its CPU twin and for users building other decoders. Same
//! rules as the member's general operations: check everything, then record one dispatch.
//!
//! - `transformer.rs`: [`TransformerOps`] and what its kernels share (checked parameters, the
//!   decode position).
//! - `norm.rs`, `qkv.rs` (RoPE, the q/k/v products, the cache store), `attention.rs`, `mlp.rs`,
//!   `token.rs`: the kernels of each part of a layer.
//! - `sample.rs`: a drawn token (each member's candidates, then the draw from them all).
//! - `prompt.rs`: the same work over many rows of a prompt at once.
//! - `init_weights.rs`: weights generated on the device.
//! - `warm.rs`: the next product's weights fetched into L2 beside a dispatch that leaves the
//!   GPU idle.

mod attention;
mod init_weights;
mod mlp;
mod norm;
mod prompt;
mod qkv;
mod sample;
mod token;
mod transformer;
mod warm;

pub use attention::{attention_partials_len, AttentionShape, ATTENTION_CHUNK};
pub use prompt::{PromptShape, PROMPT_MAX_HEAD_DIM};
pub use sample::{sampling_chunk_floats, SAMPLING_CHUNK, SAMPLING_MAX_MEMBERS, SAMPLING_SETTINGS_WORDS};
pub(crate) use transformer::Position;
pub use transformer::{pending_norm_squares, ProductInput, TransformerOps};
pub use warm::{WARM_L2_KEY, WARM_MAX_BYTES};
