//! A WGSL error is a [`ShaderError`] with naga's message, the line and column, and naga's
//! rendering of the source around it.

/// A WGSL kernel that naga could not compile, or whose interface crossgpu cannot bind.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.rendered)]
pub struct ShaderError {
    /// The label the source was given (a file name, or the kernel's name).
    pub label: String,
    /// naga's message, or crossgpu's for an interface it cannot bind, on one line.
    pub message: String,
    /// 1-based line of the first place the error points at, where it points at one.
    pub line: Option<u32>,
    /// 1-based column (in bytes) on that line.
    pub column: Option<u32>,
    /// The message with the source around the place (naga's rendering), or `label: message`.
    pub rendered: String,
}

impl ShaderError {
    pub(super) fn plain(label: &str, message: String) -> Self {
        Self {
            label: label.into(),
            rendered: format!("{label}: {message}"),
            message,
            line: None,
            column: None,
        }
    }

    pub(super) fn at(
        label: &str,
        message: String,
        location: Option<naga::SourceLocation>,
        rendered: String,
    ) -> Self {
        Self {
            label: label.into(),
            message,
            line: location.map(|l| l.line_number),
            column: location.map(|l| l.line_position),
            rendered,
        }
    }
}
