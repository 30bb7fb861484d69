//! Hugging Face checkpoints: a directory with `config.json`, `model.safetensors` (or shards
//! listed by `model.safetensors.index.json`) and `tokenizer.json`, read as [`LlamaSafetensors`].
//!
//! What it must never do: trust the files. The safetensors headers are checked by the
//! `safetensors` crate (offsets contiguous, sizes matching shapes) and against each file's
//! length before any tensor is read; shard names are files of the directory, never paths; every
//! tensor's shape is checked against `config.json`; config keys that would change the
//! computation (`rope_scaling`, biases, another activation, sliding windows) are refused by name.

mod config;
mod file;
mod llama;
#[cfg(test)]
mod tests;

pub use config::{HfConfig, MODEL_TYPES};
pub use file::{SafetensorsFile, StDtype, StTensor};
pub use llama::LlamaSafetensors;
