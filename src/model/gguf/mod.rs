//! Reading GGUF model files (the format of llama.cpp and ggml): metadata, tensor directory, and
//! tensor data by row and column range.
//!
//! What it reads: GGUF versions 2 and 3, little-endian; metadata values of every GGUF type
//! (integers of 8 to 64 bits, `f32`, `f64`, `bool`, UTF-8 strings, arrays of any of these,
//! arrays of arrays up to [`MAX_ARRAY_NESTING`] deep); `general.alignment` (32 when absent);
//! tensors of every type ggml defines (see [`crate::model::GgmlType`]), up to 4 dimensions. Only the header
//! (metadata and tensor directory) is read at [`GgufFile::open`]; tensor data is read later on
//! request with positioned reads (`pread`), so a file of many gigabytes costs no more memory than
//! its metadata. No memory mapping: reading stays safe code even if the file changes on disk.
//!
//! What it refuses, each with a [`crate::error::FormatError`] that names the file and the tensor or metadata key
//! at fault, before allocating anything for it: a file that does not start with `GGUF`; version 1
//! (the 2023 pre-release layout with 32-bit counts) and versions above 3; big-endian files; any
//! count or length (tensors, metadata entries, array elements, string bytes) that cannot fit in
//! the bytes left in the file; strings that are not UTF-8; unknown metadata value types;
//! a `bool` that is neither 0 nor 1; duplicate metadata keys or tensor names; a
//! `general.alignment` that is not a `u32` power of two; more than 4 dimensions, or a
//! dimension above `i64::MAX` (ggml's limit); an unknown tensor type id; a row length that is not
//! a whole number of the type's blocks; a shape whose element count or byte size overflows `u64`;
//! a tensor offset that is not a multiple of the alignment; tensor data past the end of the file;
//! and a tensor layout other than the one llama.cpp writes and requires: in offset order, the
//! first tensor at data offset 0 and each next one at the end of the one before it rounded up to
//! the alignment (so a shape that disagrees with the size of the data, larger or smaller, is
//! caught as an overlap or a gap).
//!
//! It does not judge the model: whether the architecture, the tensor types (see
//! [`GgufFile::check_supported`]) or the metadata suit crossgpu is for the model loader to say.
//!
//! Dimensions are kept in GGUF order: `dims[0]` is the innermost one, the length of a row in
//! memory (for a weight matrix of `n_out × n_in`, `dims == [n_in, n_out]`).

mod file;
mod header;
mod metadata;
mod reads;
mod tensor;

pub use file::{GgufFile, KEY_ARCHITECTURE};
pub use header::{DEFAULT_ALIGNMENT, KEY_ALIGNMENT, MAX_ARRAY_NESTING, MAX_DIMS};
pub use metadata::{MetaArray, MetaValue};
pub use tensor::TensorInfo;

#[cfg(test)]
mod tests;
