//! Choosing the next token from a step's logits: greedy, or a draw from the softmax at a
//! temperature, restricted to the `top_k` most likely tokens and to the smallest set whose
//! probability reaches `top_p` (nucleus sampling), repeatable from a seed ([`Sampling`]).
//!
//! Every draw is the Gumbel-max trick: the token with the largest `logit / T + g`, where `g =
//! -ln(-ln u)` and `u` is a uniform number hashed from (the seed, the position, the token id)
//! (`draw.rs`). That is an exact draw from the softmax over whichever set the maximum is taken,
//! and it needs no running random stream: a token's noise depends only on where it is drawn.
//! So the decoder draws on the devices (each member perturbs only its own slice of the
//! vocabulary; the members then compare values exactly and agree bitwise), and the host's
//! [`Sampler`] draws the same tokens from logits read back, up to the devices' rounding of the
//! logits and of `ln` (a draw moves only where two tokens' perturbed values are that close).
//!
//! - `sampling.rs`: the settings, checked, and the words the device kernels read.
//! - `draw.rs`: the hash, the uniform numbers and the Gumbel noise (the kernels' twin,
//!   `wgsl/include/sample_draw.wgsl`).
//! - `sampler.rs`: the draw on the host, over a whole logits vector.

mod draw;
mod sampler;
mod sampling;

pub use sampler::Sampler;
pub use sampling::Sampling;
pub(crate) use sampling::{DeviceSampling, MAX_CANDIDATES};
