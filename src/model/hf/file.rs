//! [`SafetensorsFile`]: one `.safetensors` file, its header parsed and checked by the
//! `safetensors` crate (every tensor's offsets contiguous and of its shape's size) and the
//! data's extent checked against the file's length; tensor data is read by positioned reads,
//! never the whole file.

use std::collections::HashMap;
use std::fs::File;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::Path;

use safetensors::tensor::Metadata;
use safetensors::Dtype;

use crate::error::FormatError;
use crate::model::rect::Rect;

/// The header length a file may declare: the `safetensors` crate's own limit (100 MB).
const MAX_HEADER_BYTES: u64 = 100_000_000;

/// The element types crossgpu reads from safetensors files.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StDtype {
    /// IEEE half.
    F16,
    /// bfloat16: the top half of an f32.
    BF16,
    /// IEEE single.
    F32,
}

impl StDtype {
    /// Bytes per element.
    pub fn bytes(self) -> u64 {
        match self {
            StDtype::F16 | StDtype::BF16 => 2,
            StDtype::F32 => 4,
        }
    }

    fn from_dtype(d: Dtype) -> Option<Self> {
        match d {
            Dtype::F16 => Some(StDtype::F16),
            Dtype::BF16 => Some(StDtype::BF16),
            Dtype::F32 => Some(StDtype::F32),
            _ => None,
        }
    }

    /// `raw` (little-endian elements of this type) as f32, exactly (every f16 and bf16 is an f32).
    pub fn to_f32(self, raw: &[u8]) -> Vec<f32> {
        match self {
            StDtype::F16 => {
                raw.chunks_exact(2).map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32()).collect()
            }
            StDtype::BF16 => {
                raw.chunks_exact(2).map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32()).collect()
            }
            StDtype::F32 => {
                raw.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()
            }
        }
    }
}

impl std::fmt::Display for StDtype {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            StDtype::F16 => "F16",
            StDtype::BF16 => "BF16",
            StDtype::F32 => "F32",
        })
    }
}

/// A tensor of a safetensors file: its name, type and shape, and where its data lies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StTensor {
    /// Its name in the file.
    pub name: String,
    /// Its element type, or the name of one crossgpu does not read (refused when it is used).
    pub dtype: Result<StDtype, String>,
    /// Its shape, outermost first (`[rows, cols]` for a matrix).
    pub shape: Vec<usize>,
    /// Absolute file offset of its data.
    offset: u64,
    /// Bytes of its data.
    bytes: u64,
}

impl StTensor {
    /// Rows (every dimension but the last, flattened) and the elements of one row.
    pub fn rows_cols(&self) -> (u64, u64) {
        match self.shape.split_last() {
            Some((&cols, rest)) => (rest.iter().map(|&d| d as u64).product(), cols as u64),
            None => (1, 1),
        }
    }
}

/// An open safetensors file.
#[derive(Debug)]
pub struct SafetensorsFile {
    file: File,
    name: String,
    tensors: HashMap<String, StTensor>,
}

impl SafetensorsFile {
    /// Opens `path` and reads and checks its header (not the tensor data): the header's length
    /// within the file and the crate's limit, its JSON and every tensor's offsets (the
    /// `safetensors` crate's checks), and the data's extent equal to what follows the header.
    pub fn open(path: &Path) -> Result<Self, FormatError> {
        let name = path.display().to_string();
        let err = |what: String| FormatError::new(&name, what);
        let file = File::open(path).map_err(|e| err(format!("cannot open: {e}")))?;
        let len = file.metadata().map_err(|e| err(format!("cannot read the file size: {e}")))?.len();
        let mut n = [0u8; 8];
        if len < 8 {
            return Err(err(format!("{len} bytes: too short for a safetensors header")));
        }
        file.read_exact_at(&mut n, 0).map_err(|e| err(format!("reading the header length: {e}")))?;
        let n = u64::from_le_bytes(n);
        if n > MAX_HEADER_BYTES || n > len - 8 {
            return Err(err(format!(
                "the header says it is {n} bytes; the file has {} after the length (and at most {MAX_HEADER_BYTES} are allowed)",
                len - 8
            )));
        }
        let mut header = vec![0u8; n as usize];
        file.read_exact_at(&mut header, 8).map_err(|e| err(format!("reading the header: {e}")))?;
        let metadata: Metadata =
            serde_json::from_slice(&header).map_err(|e| err(format!("the header is not valid: {e}")))?;
        let data_start = 8 + n;
        if metadata.data_len() as u64 != len - data_start {
            return Err(err(format!(
                "the header's tensors end at data byte {}, but the file holds {} bytes of data (truncated or padded?)",
                metadata.data_len(),
                len - data_start
            )));
        }
        let tensors = metadata
            .tensors()
            .into_iter()
            .map(|(tname, info)| {
                let (s, e) = info.data_offsets;
                let t = StTensor {
                    name: tname.clone(),
                    dtype: StDtype::from_dtype(info.dtype).ok_or_else(|| format!("{:?}", info.dtype)),
                    shape: info.shape.clone(),
                    offset: data_start + s as u64,
                    bytes: (e - s) as u64,
                };
                (tname, t)
            })
            .collect();
        Ok(Self { file, name, tensors })
    }

    /// The file's path, as errors name it.
    pub fn file_name(&self) -> &str {
        &self.name
    }

    /// Every tensor's name.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tensors.keys().map(String::as_str)
    }

    /// The tensor `name`, if the file has it.
    pub fn get(&self, name: &str) -> Option<&StTensor> {
        self.tensors.get(name)
    }

    fn err(&self, what: String) -> FormatError {
        FormatError::new(&self.name, what)
    }

    /// `t`'s type, or an error naming the tensor and the type crossgpu does not read.
    pub fn dtype(&self, t: &StTensor) -> Result<StDtype, FormatError> {
        t.dtype.clone().map_err(|d| {
            self.err(format!("tensor '{}' has type {d}; crossgpu reads F32, F16 and BF16", t.name))
        })
    }

    /// Reads rows `rows` and columns `cols` of the tensor `name` (rows over every dimension but
    /// the last), packed row after row in the file's type, into `out`, which must be exactly
    /// that size.
    pub fn read_rows(
        &self,
        name: &str,
        rows: Range<u64>,
        cols: Range<u64>,
        out: &mut [u8],
    ) -> Result<(), FormatError> {
        let t = self.tensors.get(name).ok_or_else(|| self.err(format!("no tensor named '{name}'")))?;
        let elem = self.dtype(t)?.bytes();
        let (n_rows, n_cols) = t.rows_cols();
        if rows.start > rows.end || rows.end > n_rows || cols.start > cols.end || cols.end > n_cols {
            return Err(self.err(format!(
                "tensor '{name}': rows {rows:?} and columns {cols:?} are outside its shape {:?}",
                t.shape
            )));
        }
        let out_len = out.len();
        let overflow = || {
            self.err(format!(
                "tensor '{name}': rows {rows:?} × columns {cols:?} do not fit the buffer of {out_len} bytes"
            ))
        };
        // Within the tensor, whose extent the header's check bounded by the file's length.
        let row_bytes = n_cols * elem;
        if row_bytes.checked_mul(n_rows) != Some(t.bytes) {
            return Err(
                self.err(format!("tensor '{name}': shape {:?} is not its {} bytes", t.shape, t.bytes))
            );
        }
        let rect = Rect {
            first: t.offset + rows.start * row_bytes + cols.start * elem,
            row_bytes,
            col_bytes: (cols.end - cols.start) * elem,
            rows: rows.end - rows.start,
        };
        rect.read(
            out,
            |at, buf| {
                self.file.read_exact_at(buf, at).map_err(|e| {
                    self.err(format!(
                        "tensor '{name}': reading {} bytes at file offset {at} failed (has the file changed since it was opened?): {e}",
                        buf.len()
                    ))
                })
            },
            overflow,
        )
    }

    /// Rows `rows` (every column) of the tensor `name` as f32.
    pub fn values(&self, name: &str, rows: Range<u64>) -> Result<Vec<f32>, FormatError> {
        let t = self.tensors.get(name).ok_or_else(|| self.err(format!("no tensor named '{name}'")))?;
        let dtype = self.dtype(t)?;
        let (_, cols) = t.rows_cols();
        let bytes = (rows.end.saturating_sub(rows.start))
            .checked_mul(cols * dtype.bytes())
            .and_then(|b| usize::try_from(b).ok())
            .ok_or_else(|| self.err(format!("tensor '{name}': rows {rows:?} overflow")))?;
        let mut raw = vec![0u8; bytes.min(t.bytes as usize)];
        self.read_rows(name, rows, 0..cols, &mut raw)?;
        Ok(dtype.to_f32(&raw))
    }
}
