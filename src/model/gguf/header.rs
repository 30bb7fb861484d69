use std::collections::HashMap;
use std::io::Read;

use super::metadata::{MetaArray, MetaValue};
use super::tensor::shape_string;
use super::tensor::TensorInfo;
use crate::error::FormatError;
use crate::model::quant::GgmlType;

/// The alignment of tensor data when the file has no `general.alignment`.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// ggml's `GGML_MAX_DIMS`.
pub const MAX_DIMS: usize = 4;
/// How deep arrays of arrays may nest: the spec allows nesting, no known model uses it, and a
/// bound keeps a hostile file from exhausting the stack.
pub const MAX_ARRAY_NESTING: usize = 8;

/// The metadata key of the tensor data alignment.
pub const KEY_ALIGNMENT: &str = "general.alignment";
/// The first four bytes of every GGUF file.
pub(super) const MAGIC: [u8; 4] = *b"GGUF";
/// Elements (array elements, metadata entries, tensor infos) reserved up front, whatever count
/// the file claims: the count is already bounded by the bytes left in the file, and this keeps a
/// large but bogus count in a large file from reserving memory for elements that then fail to
/// parse.
const PREALLOC_ELEMS: usize = 1 << 16;
/// The fewest bytes a tensor info can take: name length (8), dimension count (4), type (4),
/// offset (8).
const MIN_TENSOR_INFO_BYTES: u64 = 24;
/// The fewest bytes a metadata entry can take: key length (8), value type (4), a 1-byte value.
const MIN_KV_BYTES: u64 = 13;

/// The name of GGUF value type `id`, or `None` for an unknown one.
fn value_type_name(id: u32) -> Option<&'static str> {
    Some(match id {
        0 => "u8",
        1 => "i8",
        2 => "u16",
        3 => "i16",
        4 => "u32",
        5 => "i32",
        6 => "f32",
        7 => "bool",
        8 => "string",
        9 => "array",
        10 => "u64",
        11 => "i64",
        12 => "f64",
        _ => return None,
    })
}

/// The fewest bytes one value of GGUF type `id` takes: a string is at least its 8-byte length,
/// an array at least its element type and count.
fn min_value_bytes(id: u32) -> Option<u64> {
    Some(match id {
        0 | 1 | 7 => 1,
        2 | 3 => 2,
        4..=6 => 4,
        8 | 10..=12 => 8,
        9 => 12,
        _ => return None,
    })
}

/// What [`parse`] finds in the header.
pub(super) struct Header {
    pub(super) version: u32,
    pub(super) alignment: u64,
    pub(super) data_start: u64,
    pub(super) metadata: Vec<(String, MetaValue)>,
    pub(super) metadata_index: HashMap<String, usize>,
    pub(super) tensors: Vec<TensorInfo>,
    pub(super) tensor_index: HashMap<String, usize>,
}

/// Reads the header fields in order, tracking the position and refusing any read past the end
/// of the file before it allocates.
struct Reader<'a, R> {
    inner: R,
    pos: u64,
    len: u64,
    file: &'a str,
}

/// Describes what is being read, for errors; called only when there is an error.
type What<'w> = &'w dyn Fn() -> String;

impl<R: Read> Reader<'_, R> {
    fn err(&self, what: impl Into<String>) -> FormatError {
        FormatError::new(self.file, what)
    }

    fn remaining(&self) -> u64 {
        self.len.saturating_sub(self.pos)
    }

    /// An error unless `n` more bytes are in the file.
    fn ensure(&self, n: u64, what: What<'_>) -> Result<(), FormatError> {
        if n > self.remaining() {
            return Err(self.err(format!(
                "truncated: {} needs {n} bytes at offset {}, but the file ends at {}",
                what(),
                self.pos,
                self.len
            )));
        }
        Ok(())
    }

    fn fill(&mut self, buf: &mut [u8], what: What<'_>) -> Result<(), FormatError> {
        self.ensure(buf.len() as u64, what)?;
        self.inner.read_exact(buf).map_err(|e| {
            self.err(format!("{}: read failed at offset {} (has the file changed?): {e}", what(), self.pos))
        })?;
        self.pos += buf.len() as u64;
        Ok(())
    }

    /// `n` bytes, after checking that the file has them.
    fn bytes(&mut self, n: u64, what: What<'_>) -> Result<Vec<u8>, FormatError> {
        self.ensure(n, what)?;
        let n = usize::try_from(n)
            .map_err(|_| self.err(format!("{}: {n} bytes do not fit in memory", what())))?;
        let mut buf = vec![0u8; n];
        self.fill(&mut buf, what)?;
        Ok(buf)
    }

    fn fixed<const N: usize>(&mut self, what: What<'_>) -> Result<[u8; N], FormatError> {
        let mut b = [0u8; N];
        self.fill(&mut b, what)?;
        Ok(b)
    }

    fn u32(&mut self, what: What<'_>) -> Result<u32, FormatError> {
        self.fixed(what).map(u32::from_le_bytes)
    }

    fn u64(&mut self, what: What<'_>) -> Result<u64, FormatError> {
        self.fixed(what).map(u64::from_le_bytes)
    }

    /// A GGUF string: a `u64` byte length, then that many bytes of UTF-8.
    fn string(&mut self, what: What<'_>) -> Result<String, FormatError> {
        let at = self.pos;
        let len = self.u64(&|| format!("the length of {}", what()))?;
        if len > self.remaining() {
            return Err(self.err(format!(
                "{}: string length {len} at offset {at} runs past the end of the file ({} bytes)",
                what(),
                self.len
            )));
        }
        let bytes = self.bytes(len, what)?;
        String::from_utf8(bytes).map_err(|e| {
            let lossy = String::from_utf8_lossy(e.as_bytes());
            self.err(format!("{} ({lossy:?}) is not valid UTF-8", what()))
        })
    }

    /// A metadata value of GGUF type `ty` for `key`.
    fn value(&mut self, ty: u32, key: &str) -> Result<MetaValue, FormatError> {
        let what = || format!("the value of metadata key '{key}'");
        Ok(match ty {
            0 => MetaValue::U8(self.fixed::<1>(&what).map(u8::from_le_bytes)?),
            1 => MetaValue::I8(self.fixed::<1>(&what).map(i8::from_le_bytes)?),
            2 => MetaValue::U16(self.fixed(&what).map(u16::from_le_bytes)?),
            3 => MetaValue::I16(self.fixed(&what).map(i16::from_le_bytes)?),
            4 => MetaValue::U32(self.fixed(&what).map(u32::from_le_bytes)?),
            5 => MetaValue::I32(self.fixed(&what).map(i32::from_le_bytes)?),
            6 => MetaValue::F32(self.fixed(&what).map(f32::from_le_bytes)?),
            7 => {
                let [b] = self.fixed::<1>(&what)?;
                MetaValue::Bool(self.bool_byte(b, key, None)?)
            }
            8 => MetaValue::Str(self.string(&what)?),
            9 => MetaValue::Array(self.array(key, 1)?),
            10 => MetaValue::U64(self.fixed(&what).map(u64::from_le_bytes)?),
            11 => MetaValue::I64(self.fixed(&what).map(i64::from_le_bytes)?),
            12 => MetaValue::F64(self.fixed(&what).map(f64::from_le_bytes)?),
            _ => return Err(self.err(format!("metadata key '{key}' has unknown value type {ty}"))),
        })
    }

    fn bool_byte(&self, b: u8, key: &str, index: Option<usize>) -> Result<bool, FormatError> {
        match b {
            0 => Ok(false),
            1 => Ok(true),
            _ => {
                let at = index.map(|i| format!(" element {i}")).unwrap_or_default();
                Err(self.err(format!("metadata key '{key}'{at}: bool byte {b} is neither 0 nor 1")))
            }
        }
    }

    /// `count` fixed-size numbers read in one go (the caller bounded `count` by the file).
    fn numbers<const N: usize, T>(
        &mut self,
        count: u64,
        key: &str,
        from: fn([u8; N]) -> T,
    ) -> Result<Vec<T>, FormatError> {
        let what = || format!("the elements of metadata key '{key}'");
        // N is at most 8 and count * N was checked against the bytes left.
        let n = count.checked_mul(N as u64).ok_or_else(|| self.err(format!("{}: size overflow", what())))?;
        let raw = self.bytes(n, &what)?;
        Ok(raw.chunks_exact(N).filter_map(|c| <[u8; N]>::try_from(c).ok()).map(from).collect())
    }

    /// A metadata array (element type, count, elements) for `key`, `depth` arrays deep.
    fn array(&mut self, key: &str, depth: usize) -> Result<MetaArray, FormatError> {
        if depth > MAX_ARRAY_NESTING {
            return Err(
                self.err(format!("metadata key '{key}': arrays nested more than {MAX_ARRAY_NESTING} deep"))
            );
        }
        let ty = self.u32(&|| format!("the element type of metadata key '{key}'"))?;
        let count = self.u64(&|| format!("the element count of metadata key '{key}'"))?;
        let (Some(type_name), Some(min_bytes)) = (value_type_name(ty), min_value_bytes(ty)) else {
            return Err(self.err(format!("metadata key '{key}': array of unknown value type {ty}")));
        };
        // Bound the count by the bytes left before reserving anything for it.
        match count.checked_mul(min_bytes) {
            Some(need) if need <= self.remaining() => {}
            _ => {
                return Err(self.err(format!(
                    "metadata key '{key}': array of {count} {type_name} elements at offset {} cannot fit in \
                     the {} bytes left in the file",
                    self.pos,
                    self.remaining()
                )))
            }
        }
        let reserve = usize::try_from(count).unwrap_or(usize::MAX).min(PREALLOC_ELEMS);
        Ok(match ty {
            0 => MetaArray::U8(self.numbers(count, key, u8::from_le_bytes)?),
            1 => MetaArray::I8(self.numbers(count, key, i8::from_le_bytes)?),
            2 => MetaArray::U16(self.numbers(count, key, u16::from_le_bytes)?),
            3 => MetaArray::I16(self.numbers(count, key, i16::from_le_bytes)?),
            4 => MetaArray::U32(self.numbers(count, key, u32::from_le_bytes)?),
            5 => MetaArray::I32(self.numbers(count, key, i32::from_le_bytes)?),
            6 => MetaArray::F32(self.numbers(count, key, f32::from_le_bytes)?),
            7 => {
                let raw: Vec<u8> = self.numbers(count, key, u8::from_le_bytes)?;
                let mut v = Vec::with_capacity(raw.len());
                for (i, b) in raw.into_iter().enumerate() {
                    v.push(self.bool_byte(b, key, Some(i))?);
                }
                MetaArray::Bool(v)
            }
            8 => {
                let mut v = Vec::with_capacity(reserve);
                for i in 0..count {
                    v.push(self.string(&|| format!("element {i} of metadata key '{key}'"))?);
                }
                MetaArray::Str(v)
            }
            9 => {
                let mut v = Vec::with_capacity(reserve);
                for _ in 0..count {
                    v.push(self.array(key, depth + 1)?);
                }
                MetaArray::Array(v)
            }
            10 => MetaArray::U64(self.numbers(count, key, u64::from_le_bytes)?),
            11 => MetaArray::I64(self.numbers(count, key, i64::from_le_bytes)?),
            _ => MetaArray::F64(self.numbers(count, key, f64::from_le_bytes)?),
        })
    }
}

/// `x` rounded up to a multiple of `align` (a power of two), or `None` on overflow.
fn align_up(x: u64, align: u64) -> Option<u64> {
    x.checked_next_multiple_of(align)
}

/// Reads and checks the header of a GGUF file of `len` bytes from `inner`, positioned at its
/// start; `file` names it in errors.
pub(super) fn parse<R: Read>(inner: R, len: u64, file: &str) -> Result<Header, FormatError> {
    let mut r = Reader { inner, pos: 0, len, file };
    if len < 4 {
        return Err(r.err(format!("not a GGUF file: it is {len} bytes, too short for the magic \"GGUF\"")));
    }
    let magic: [u8; 4] = r.fixed(&|| "the magic".into())?;
    if magic != MAGIC {
        return Err(r.err(format!(
            "not a GGUF file: it starts with {:02x?} ({:?}), expected \"GGUF\"",
            magic,
            String::from_utf8_lossy(&magic)
        )));
    }
    let version = r.u32(&|| "the version".into())?;
    match version {
        2 | 3 => {}
        1 => {
            return Err(r.err(
                "GGUF version 1 is not supported: it is the 2023 pre-release layout with 32-bit counts; \
                 convert the model again with a current llama.cpp",
            ))
        }
        // A big-endian file (allowed since version 3) has its version bytes swapped.
        v if matches!(v.swap_bytes(), 1..=3) => {
            return Err(r.err(format!(
                "big-endian GGUF (version {}) is not supported: use a little-endian file",
                v.swap_bytes()
            )))
        }
        v => return Err(r.err(format!("GGUF version {v} is not supported (versions 2 and 3 are)"))),
    }
    let tensor_count = r.u64(&|| "the tensor count".into())?;
    let kv_count = r.u64(&|| "the metadata entry count".into())?;
    // Each entry takes at least a few bytes, so a count beyond what the file can hold is wrong
    // (and must not size any allocation).
    if kv_count > r.remaining() / MIN_KV_BYTES {
        return Err(r.err(format!(
            "metadata entry count {kv_count} cannot fit in the {} bytes left in the file",
            r.remaining()
        )));
    }
    if tensor_count > r.remaining() / MIN_TENSOR_INFO_BYTES {
        return Err(r.err(format!(
            "tensor count {tensor_count} cannot fit in the {} bytes left in the file",
            r.remaining()
        )));
    }
    // Both counts are now bounded by the file size over a dozen bytes or more.
    let kv_count = usize::try_from(kv_count).map_err(|_| r.err("metadata entry count too large"))?;
    let tensor_count = usize::try_from(tensor_count).map_err(|_| r.err("tensor count too large"))?;

    // Reserve no more than a real file needs: a bogus count in a large file must not reserve
    // memory for entries that then fail to parse.
    let mut metadata: Vec<(String, MetaValue)> = Vec::with_capacity(kv_count.min(PREALLOC_ELEMS));
    let mut metadata_index = HashMap::with_capacity(kv_count.min(PREALLOC_ELEMS));
    for i in 0..kv_count {
        let key = r.string(&|| format!("the key of metadata entry #{i}"))?;
        let ty = r.u32(&|| format!("the value type of metadata key '{key}'"))?;
        let value = r.value(ty, &key)?;
        if metadata_index.contains_key(&key) {
            return Err(r.err(format!("metadata key '{key}' appears twice")));
        }
        metadata_index.insert(key.clone(), metadata.len());
        metadata.push((key, value));
    }

    let alignment = match metadata_index.get(KEY_ALIGNMENT).and_then(|&i| metadata.get(i)) {
        None => DEFAULT_ALIGNMENT,
        Some((_, MetaValue::U32(a))) if a.is_power_of_two() => u64::from(*a),
        Some((_, MetaValue::U32(a))) => {
            return Err(r.err(format!("metadata key '{KEY_ALIGNMENT}' is {a}, which is not a power of two")))
        }
        Some((_, v)) => {
            return Err(r.err(format!(
                "metadata key '{KEY_ALIGNMENT}' is a {}, but ggml requires a u32",
                v.type_name()
            )))
        }
    };

    // Tensor infos: offsets are relative to the data section until its start is known.
    let mut tensors: Vec<TensorInfo> = Vec::with_capacity(tensor_count.min(PREALLOC_ELEMS));
    let mut tensor_index = HashMap::with_capacity(tensor_count.min(PREALLOC_ELEMS));
    for i in 0..tensor_count {
        let name = r.string(&|| format!("the name of tensor #{i}"))?;
        let n_dims = r.u32(&|| format!("the dimension count of tensor '{name}'"))?;
        if n_dims as usize > MAX_DIMS {
            return Err(
                r.err(format!("tensor '{name}' has {n_dims} dimensions; ggml allows at most {MAX_DIMS}"))
            );
        }
        let mut dims = Vec::with_capacity(n_dims as usize);
        for d in 0..n_dims {
            let dim = r.u64(&|| format!("dimension {d} of tensor '{name}'"))?;
            if dim > i64::MAX as u64 {
                return Err(r.err(format!(
                    "tensor '{name}': dimension {d} is {dim}, above ggml's limit of i64::MAX"
                )));
            }
            dims.push(dim);
        }
        let type_id = r.u32(&|| format!("the type of tensor '{name}'"))?;
        let ty = GgmlType::from_id(type_id).ok_or_else(|| {
            r.err(format!(
                "tensor '{name}' has unknown type id {type_id} (not a ggml type this reader knows)"
            ))
        })?;
        let offset = r.u64(&|| format!("the offset of tensor '{name}'"))?;
        let shape = shape_string(&dims);
        let row_len = dims.first().copied().unwrap_or(1);
        if !row_len.is_multiple_of(ty.block_elems()) {
            return Err(r.err(format!(
                "tensor '{name}' (shape {shape}, type {ty}): its row of {row_len} elements is not a whole number \
                 of {ty} blocks of {}",
                ty.block_elems()
            )));
        }
        let rows = dims.iter().skip(1).try_fold(1u64, |a, &d| a.checked_mul(d));
        let elements = rows.and_then(|n| n.checked_mul(row_len));
        let bytes = rows.and_then(|n| ty.row_bytes(row_len).and_then(|b| n.checked_mul(b)));
        let (Some(_), Some(bytes)) = (elements, bytes) else {
            return Err(r.err(format!(
                "tensor '{name}' (shape {shape}, type {ty}): its element count or byte size overflows u64"
            )));
        };
        if !offset.is_multiple_of(alignment) {
            return Err(r.err(format!(
                "tensor '{name}': data offset {offset} is not a multiple of the alignment {alignment}"
            )));
        }
        if tensor_index.contains_key(&name) {
            return Err(r.err(format!("tensor '{name}' appears twice")));
        }
        tensor_index.insert(name.clone(), tensors.len());
        tensors.push(TensorInfo { name, dims, ty, offset, bytes });
    }

    let data_start =
        align_up(r.pos, alignment).ok_or_else(|| r.err("the data section start overflows u64"))?;
    check_layout(&tensors, alignment, file)?;
    for t in &mut tensors {
        let start = data_start.checked_add(t.offset);
        match (start, start.and_then(|s| s.checked_add(t.bytes))) {
            (Some(start), Some(end)) if end <= len => t.offset = start,
            _ => {
                return Err(FormatError::new(
                    file,
                    format!(
                    "tensor '{}' (shape {}, type {}, {} bytes at file offset {}) runs past the end of the \
                         file ({len} bytes): is the file truncated?",
                    t.name,
                    t.shape(),
                    t.ty,
                    t.bytes,
                    start.map_or_else(|| "past u64::MAX".to_string(), |s| s.to_string()),
                ),
                ))
            }
        }
    }
    Ok(Header { version, alignment, data_start, metadata, metadata_index, tensors, tensor_index })
}

/// Checks that the tensors, taken in offset order, are laid out as llama.cpp writes them and
/// requires: the first at data offset 0, each next one where the previous one ends, rounded up to
/// the alignment. Offsets are still relative to the data section here.
fn check_layout(tensors: &[TensorInfo], alignment: u64, file: &str) -> Result<(), FormatError> {
    let mut order: Vec<&TensorInfo> = tensors.iter().collect();
    order.sort_by_key(|t| (t.offset, t.bytes));
    let mut expected = 0u64;
    let mut prev: Option<&TensorInfo> = None;
    for t in order {
        if t.offset != expected {
            let what = match prev {
                None => format!(
                    "tensor '{}' is the first in the data section but starts at data offset {}, not 0",
                    t.name, t.offset
                ),
                Some(p) => {
                    let how = if t.offset < expected { "overlaps" } else { "leaves a gap after" };
                    format!(
                        "tensor '{}' at data offset {} {how} tensor '{}' (data offsets {}..{}: shape {} of {} is \
                         {} bytes, so the next tensor belongs at {expected}): the size of '{}' disagrees with its \
                         shape, or the offsets are wrong",
                        t.name,
                        t.offset,
                        p.name,
                        p.offset,
                        p.offset.saturating_add(p.bytes),
                        p.shape(),
                        p.ty,
                        p.bytes,
                        p.name
                    )
                }
            };
            return Err(FormatError::new(file, what));
        }
        expected =
            t.offset.checked_add(t.bytes).and_then(|end| align_up(end, alignment)).ok_or_else(|| {
                FormatError::new(file, format!("tensor '{}': its end overflows u64", t.name))
            })?;
        prev = Some(t);
    }
    Ok(())
}
