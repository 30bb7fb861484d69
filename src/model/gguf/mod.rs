//! Reading GGUF model files (the format of llama.cpp and ggml): metadata, tensor directory, and
//! tensor data by row and column range.
//!
//! What it reads: GGUF versions 2 and 3, little-endian; metadata values of every GGUF type
//! (integers of 8 to 64 bits, `f32`, `f64`, `bool`, UTF-8 strings, arrays of any of these,
//! arrays of arrays up to [`MAX_ARRAY_NESTING`] deep); `general.alignment` (32 when absent);
//! tensors of every type ggml defines (see [`GgmlType`]), up to 4 dimensions. Only the header
//! (metadata and tensor directory) is read at [`GgufFile::open`]; tensor data is read later on
//! request with positioned reads (`pread`), so a file of many gigabytes costs no more memory than
//! its metadata. No memory mapping: reading stays safe code even if the file changes on disk.
//!
//! What it refuses, each with a [`FormatError`] that names the file and the tensor or metadata key
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

mod header;
mod metadata;
mod tensor;

pub use metadata::{MetaArray, MetaValue};
pub use tensor::TensorInfo;

use std::collections::HashMap;
use std::fs::File;
use std::io::BufReader;
use std::path::Path;

use super::format_error::FormatError;
use super::quant::{self, GgmlType};

/// The alignment of tensor data when the file has no `general.alignment`.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// ggml's `GGML_MAX_DIMS`.
pub const MAX_DIMS: usize = 4;
/// How deep arrays of arrays may nest: the spec allows nesting, no known model uses it, and a
/// bound keeps a hostile file from exhausting the stack.
pub const MAX_ARRAY_NESTING: usize = 8;

/// The metadata key of the tensor data alignment.
pub const KEY_ALIGNMENT: &str = "general.alignment";
/// The metadata key of the model architecture (`"llama"`, `"qwen2"`, ...).
pub const KEY_ARCHITECTURE: &str = "general.architecture";

/// An open GGUF file: its metadata and tensor directory, and the means to read tensor data.
///
/// Reads take `&self` and use positioned reads, so one `GgufFile` can serve several threads.
#[derive(Debug)]
pub struct GgufFile {
    file: File,
    name: String,
    len: u64,
    version: u32,
    alignment: u64,
    data_start: u64,
    metadata: Vec<(String, MetaValue)>,
    metadata_index: HashMap<String, usize>,
    tensors: Vec<TensorInfo>,
    tensor_index: HashMap<String, usize>,
}

impl GgufFile {
    /// Opens `path` and reads and checks its header: metadata, tensor directory, layout. See the
    /// module documentation for what is refused. Tensor data is not read.
    pub fn open(path: &Path) -> Result<GgufFile, FormatError> {
        let name = path.display().to_string();
        let file = File::open(path).map_err(|e| FormatError::new(&name, format!("cannot open: {e}")))?;
        let len = file
            .metadata()
            .map_err(|e| FormatError::new(&name, format!("cannot read the file size: {e}")))?
            .len();
        let header = header::parse(BufReader::new(&file), len, &name)?;
        Ok(GgufFile {
            file,
            name,
            len,
            version: header.version,
            alignment: header.alignment,
            data_start: header.data_start,
            metadata: header.metadata,
            metadata_index: header.metadata_index,
            tensors: header.tensors,
            tensor_index: header.tensor_index,
        })
    }

    /// The file's path, as errors name it.
    pub fn file_name(&self) -> &str {
        &self.name
    }

    /// The file size in bytes, as it was at open.
    pub fn file_len(&self) -> u64 {
        self.len
    }

    /// The GGUF version: 2 or 3.
    pub fn version(&self) -> u32 {
        self.version
    }

    /// The alignment of tensor data in bytes: `general.alignment`, or 32.
    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// Where the tensor data section starts, in bytes from the start of the file.
    pub fn data_start(&self) -> u64 {
        self.data_start
    }

    fn err(&self, what: impl Into<String>) -> FormatError {
        FormatError::new(&self.name, what)
    }

    // ---- metadata ----

    /// Every metadata entry, in file order.
    pub fn metadata(&self) -> &[(String, MetaValue)] {
        &self.metadata
    }

    /// The value of metadata `key`, if the file has it.
    pub fn get(&self, key: &str) -> Option<&MetaValue> {
        let i = *self.metadata_index.get(key)?;
        self.metadata.get(i).map(|(_, v)| v)
    }

    fn missing(&self, key: &str) -> FormatError {
        self.err(format!("metadata key '{key}' is missing"))
    }

    fn wrong_type(&self, key: &str, value: &MetaValue, expected: &str) -> FormatError {
        self.err(format!("metadata key '{key}' is a {}, expected {expected}", value.type_name()))
    }

    /// `key` as a `u64`: any integer type is accepted if the value is not negative, because
    /// converters disagree on the width of counts (most write `u32`, some `u64` or `i32`).
    pub fn optional_u64(&self, key: &str) -> Result<Option<u64>, FormatError> {
        let Some(v) = self.get(key) else { return Ok(None) };
        match v.as_u64() {
            Some(n) => Ok(Some(n)),
            None if v.is_integer() => Err(self.err(format!("metadata key '{key}' is {v}, expected a count"))),
            None => Err(self.wrong_type(key, v, "an unsigned integer")),
        }
    }

    /// `key` as a `u64`; an error if it is missing (see [`Self::optional_u64`]).
    pub fn u64(&self, key: &str) -> Result<u64, FormatError> {
        self.optional_u64(key)?.ok_or_else(|| self.missing(key))
    }

    /// `key` as a `u32`: any integer type whose value fits.
    pub fn optional_u32(&self, key: &str) -> Result<Option<u32>, FormatError> {
        match self.optional_u64(key)? {
            None => Ok(None),
            Some(n) => u32::try_from(n)
                .map(Some)
                .map_err(|_| self.err(format!("metadata key '{key}' is {n}, which does not fit in a u32"))),
        }
    }

    /// `key` as a `u32`; an error if it is missing.
    pub fn u32(&self, key: &str) -> Result<u32, FormatError> {
        self.optional_u32(key)?.ok_or_else(|| self.missing(key))
    }

    /// `key` as an `f32`: an `f32`, or an `f64` rounded to `f32` (some converters write
    /// hyperparameters such as `rope.freq_base` as `f64`).
    pub fn optional_f32(&self, key: &str) -> Result<Option<f32>, FormatError> {
        match self.get(key) {
            None => Ok(None),
            Some(MetaValue::F32(v)) => Ok(Some(*v)),
            Some(MetaValue::F64(v)) => Ok(Some(*v as f32)),
            Some(v) => Err(self.wrong_type(key, v, "an f32")),
        }
    }

    /// `key` as an `f32`; an error if it is missing.
    pub fn f32(&self, key: &str) -> Result<f32, FormatError> {
        self.optional_f32(key)?.ok_or_else(|| self.missing(key))
    }

    /// `key` as a string.
    pub fn optional_str(&self, key: &str) -> Result<Option<&str>, FormatError> {
        match self.get(key) {
            None => Ok(None),
            Some(MetaValue::Str(s)) => Ok(Some(s)),
            Some(v) => Err(self.wrong_type(key, v, "a string")),
        }
    }

    /// `key` as a string; an error if it is missing.
    pub fn str(&self, key: &str) -> Result<&str, FormatError> {
        self.optional_str(key)?.ok_or_else(|| self.missing(key))
    }

    /// `key` as a `bool`.
    pub fn optional_bool(&self, key: &str) -> Result<Option<bool>, FormatError> {
        match self.get(key) {
            None => Ok(None),
            Some(MetaValue::Bool(b)) => Ok(Some(*b)),
            Some(v) => Err(self.wrong_type(key, v, "a bool")),
        }
    }

    /// `key` as a `bool`; an error if it is missing.
    pub fn bool(&self, key: &str) -> Result<bool, FormatError> {
        self.optional_bool(key)?.ok_or_else(|| self.missing(key))
    }

    fn optional_array(&self, key: &str) -> Option<&MetaArray> {
        match self.get(key) {
            Some(MetaValue::Array(a)) => Some(a),
            _ => None,
        }
    }

    /// `key` as an array of strings (a vocabulary, merge rules).
    pub fn optional_str_array(&self, key: &str) -> Result<Option<&[String]>, FormatError> {
        match (self.get(key), self.optional_array(key)) {
            (None, _) => Ok(None),
            (_, Some(MetaArray::Str(v))) => Ok(Some(v)),
            (Some(v), _) => Err(self.wrong_type(key, v, "an array of string")),
        }
    }

    /// `key` as an array of strings; an error if it is missing.
    pub fn str_array(&self, key: &str) -> Result<&[String], FormatError> {
        self.optional_str_array(key)?.ok_or_else(|| self.missing(key))
    }

    /// `key` as an array of `f32` (token scores).
    pub fn optional_f32_array(&self, key: &str) -> Result<Option<&[f32]>, FormatError> {
        match (self.get(key), self.optional_array(key)) {
            (None, _) => Ok(None),
            (_, Some(MetaArray::F32(v))) => Ok(Some(v)),
            (Some(v), _) => Err(self.wrong_type(key, v, "an array of f32")),
        }
    }

    /// `key` as an array of `f32`; an error if it is missing.
    pub fn f32_array(&self, key: &str) -> Result<&[f32], FormatError> {
        self.optional_f32_array(key)?.ok_or_else(|| self.missing(key))
    }

    /// `key` as an array of `i32` (token types).
    pub fn optional_i32_array(&self, key: &str) -> Result<Option<&[i32]>, FormatError> {
        match (self.get(key), self.optional_array(key)) {
            (None, _) => Ok(None),
            (_, Some(MetaArray::I32(v))) => Ok(Some(v)),
            (Some(v), _) => Err(self.wrong_type(key, v, "an array of i32")),
        }
    }

    /// `key` as an array of `i32`; an error if it is missing.
    pub fn i32_array(&self, key: &str) -> Result<&[i32], FormatError> {
        self.optional_i32_array(key)?.ok_or_else(|| self.missing(key))
    }

    /// `key` as an array of `u32`.
    pub fn optional_u32_array(&self, key: &str) -> Result<Option<&[u32]>, FormatError> {
        match (self.get(key), self.optional_array(key)) {
            (None, _) => Ok(None),
            (_, Some(MetaArray::U32(v))) => Ok(Some(v)),
            (Some(v), _) => Err(self.wrong_type(key, v, "an array of u32")),
        }
    }

    /// `key` as an array of `u32`; an error if it is missing.
    pub fn u32_array(&self, key: &str) -> Result<&[u32], FormatError> {
        self.optional_u32_array(key)?.ok_or_else(|| self.missing(key))
    }

    /// `general.architecture`: `"llama"`, `"qwen2"`, ..., the prefix of the model's own keys.
    pub fn architecture(&self) -> Result<&str, FormatError> {
        self.str(KEY_ARCHITECTURE)
    }

    /// `general.architecture` if it is one of `supported`; otherwise an error naming it, the
    /// file and the architectures that are supported.
    pub fn architecture_in(&self, supported: &[&str]) -> Result<&str, FormatError> {
        let arch = self.architecture()?;
        if supported.contains(&arch) {
            Ok(arch)
        } else {
            Err(self
                .err(format!("architecture '{arch}' is not supported (supported: {})", supported.join(", "))))
        }
    }
}

#[cfg(test)]
mod tests;
