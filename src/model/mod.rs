//! Model checkpoints as they are stored: the GGUF format of llama.cpp and ggml (`gguf`:
//! metadata, the tensor directory, tensor data read by rows with positioned reads, never a
//! whole copy of the file), and ggml's tensor types and quantization blocks (`quant`: block
//! layouts, and the CPU dequantization every device kernel is checked against), and a
//! llama-family GGUF file as a decoder's weights (`llama`: [`LlamaGguf`]), with its tokenizer
//! and chat template ([`Tokenizer`]).
//!
//! What it must never do: trust the file. Every count, length, offset and shape is checked
//! against the file's size and the format's rules before anything is allocated for it, and a
//! fault is a [`FormatError`] naming the file and the tensor or key, never a panic.

pub mod gguf;
mod llama;
pub mod quant;
mod tokenizer;

pub use crate::error::FormatError;
pub use gguf::{GgufFile, MetaArray, MetaValue, TensorInfo};
pub use llama::{LlamaGguf, ARCHITECTURES};
pub use quant::GgmlType;
pub use tokenizer::{Message, Tokenizer};
