//! The error of reading a model file: which file, and what in it cannot be used.
//!
//! It is kept apart from the crate's own error enum so that the file parsers (`crate::model`'s
//! gguf and quant) stand alone; the crate maps it into its error type at the boundary
//! ([`super::Error::Model`]).

use std::fmt;

/// A model file (or a buffer of model data) that cannot be used.
///
/// `what` names the part that is wrong (the tensor, the metadata key, the byte offset) and why,
/// so that the message alone is enough to find the fault in the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FormatError {
    /// The file the data came from, as the caller named it; [`FormatError::IN_MEMORY`] for data
    /// that was handed over as bytes.
    pub file: String,
    /// What is wrong, naming the tensor or metadata key concerned.
    pub what: String,
}

impl FormatError {
    /// The `file` of an error about bytes that did not come from a file the parser opened (for
    /// example `model::quant::dequantize` on a caller's buffer).
    pub const IN_MEMORY: &'static str = "<in memory>";

    /// An error about `file`.
    pub fn new(file: impl Into<String>, what: impl Into<String>) -> Self {
        FormatError { file: file.into(), what: what.into() }
    }

    /// An error about bytes that are not (or not yet known to be) from a file.
    pub fn in_memory(what: impl Into<String>) -> Self {
        FormatError::new(Self::IN_MEMORY, what)
    }

    /// The same error, attributed to `file`: for an error raised on bytes that the caller then
    /// knows came from `file`.
    pub fn in_file(self, file: impl Into<String>) -> Self {
        FormatError { file: file.into(), what: self.what }
    }
}

impl fmt::Display for FormatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.file, self.what)
    }
}

impl std::error::Error for FormatError {}
