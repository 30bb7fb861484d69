//! [`GgufFile`]: an open GGUF file, its metadata and tensor directory, and reads of tensor data.

use std::collections::HashMap;
use std::fs::File;
use std::io::BufReader;
use std::path::Path;

use super::header;
use super::metadata::{MetaArray, MetaValue};
use super::tensor::TensorInfo;
use crate::error::FormatError;

/// The metadata key of the model architecture (`"llama"`, `"qwen2"`, ...).
pub const KEY_ARCHITECTURE: &str = "general.architecture";

/// An open GGUF file: its metadata and tensor directory, and the means to read tensor data.
///
/// Reads take `&self` and use positioned reads, so one `GgufFile` can serve several threads.
#[derive(Debug)]
pub struct GgufFile {
    pub(super) file: File,
    pub(super) name: String,
    pub(super) len: u64,
    pub(super) version: u32,
    pub(super) alignment: u64,
    pub(super) data_start: u64,
    pub(super) metadata: Vec<(String, MetaValue)>,
    pub(super) metadata_index: HashMap<String, usize>,
    pub(super) tensors: Vec<TensorInfo>,
    pub(super) tensor_index: HashMap<String, usize>,
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

    pub(super) fn err(&self, what: impl Into<String>) -> FormatError {
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

    pub(super) fn missing(&self, key: &str) -> FormatError {
        self.err(format!("metadata key '{key}' is missing"))
    }

    pub(super) fn wrong_type(&self, key: &str, value: &MetaValue, expected: &str) -> FormatError {
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

    pub(super) fn optional_array(&self, key: &str) -> Option<&MetaArray> {
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
