//! Model checkpoints as they are stored: the GGUF format of llama.cpp and ggml (`gguf`:
//! metadata, the tensor directory, tensor data read by rows with positioned reads, never a
//! whole copy of the file), and ggml's tensor types and quantization blocks (`quant`: block
//! layouts, and the CPU dequantization every device kernel is checked against), and a
//! llama-family GGUF file as a decoder's weights (`llama`: [`LlamaGguf`]); Hugging Face
//! checkpoint directories (`hf`: `config.json` and safetensors, [`LlamaSafetensors`]); either
//! opened by its path ([`Checkpoint`]), with its tokenizer and chat template ([`Tokenizer`]);
//! the choice of the next token ([`Sampling`], drawn on the devices by the decoder or on the
//! host by a [`Sampler`]); and a checkpoint loaded onto a
//! group with its tokenizer, text in and text out ([`Model`]).
//!
//! What it must never do: trust the file. Every count, length, offset and shape is checked
//! against the file's size and the format's rules before anything is allocated for it, and a
//! fault is a [`FormatError`] naming the file and the tensor or key, never a panic.

mod checkpoint;
mod generation;
pub mod gguf;
mod halves;
pub mod hf;
mod llama;
mod loaded;
pub mod quant;
mod rect;
mod tokenizer;

pub use crate::error::FormatError;
pub use crate::sample::{Sampler, Sampling};
pub use checkpoint::Checkpoint;
pub use generation::Generation;
pub use gguf::{GgufFile, MetaArray, MetaValue, TensorInfo};
pub use hf::LlamaSafetensors;
pub use llama::{LlamaGguf, ARCHITECTURES};
pub use loaded::{Model, TextStream};
pub use quant::GgmlType;
pub use tokenizer::{Message, Tokenizer};
