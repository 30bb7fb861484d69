//! A decoder-only transformer split across a group: one token at a time (chosen on the
//! devices), and a prompt as a batch of positions (`prompt.rs`).
//!
//! Per layer: RMSNorm → Q, K, V (column-parallel, whole KV-head groups per member) → RoPE →
//! KV cache append (each member caches only its heads) → attention → output projection
//! (row-parallel, all-reduce) → residual → RMSNorm → gate and up (column-parallel, cut at 64
//! features) → SiLU(gate)·up → down (row-parallel, all-reduce) → residual. The embedding and
//! the final norm are replicated; the vocabulary projection is column-parallel, and the next
//! token — greedy, or drawn at a temperature with top-k and top-p (`crate::sample`) — is chosen
//! from every member's candidates gathered with an all-gather, so its id never leaves the
//! devices: the host records step after step without waiting.
//!
//! Weights are generated on the devices from a seed, so even the 27B-class preset loads in
//! seconds and every split holds exactly the slices of the one-member model.
//!
//! - `state.rs`: the decoder's state and its read-outs.
//! - `load.rs`: loading it from a weight source.
//! - `run.rs`: decode steps, recorded or replayed.
//! - `settings.rs`: how steps compute (norms folded, inputs quantized), set before the first.
//! - `prompt.rs`: a prompt as a batch (chunks of positions through every layer at once).
//! - `sample.rs`: how the devices draw the next token.

mod load;
mod prompt;
mod run;
mod sample;
mod settings;
mod state;

pub use prompt::{PROMPT_CHUNK, PROMPT_CHUNK_ON_UNITS};
pub use settings::WARM_L2_DISCRETE;
pub use state::{DecodeStats, Decoder};
