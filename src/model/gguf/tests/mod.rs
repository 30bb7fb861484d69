use super::header::MAGIC;
use super::*;
pub(super) use crate::error::FormatError;
pub(super) use crate::model::quant::{self, GgmlType};
pub(super) use std::path::Path;
use std::path::PathBuf;

mod bad_files;
mod llama_family;
mod reads;
mod round_trip;
mod smollm2;

// ---- a GGUF writer, for tests only ----

/// A tensor as the test writer lays it out; `type_id` and `offset` may be set to anything.
struct TestTensor {
    name: String,
    dims: Vec<u64>,
    type_id: u32,
    data: Vec<u8>,
    /// The data offset to record; `None` lays the tensor out as llama.cpp does.
    offset: Option<u64>,
}

/// A GGUF file to write: header, metadata, tensor infos, aligned data.
struct TestFile {
    magic: [u8; 4],
    version: u32,
    kv: Vec<(String, MetaValue)>,
    tensors: Vec<TestTensor>,
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend((s.len() as u64).to_le_bytes());
    out.extend(s.as_bytes());
}

fn value_type(v: &MetaValue) -> u32 {
    match v {
        MetaValue::U8(_) => 0,
        MetaValue::I8(_) => 1,
        MetaValue::U16(_) => 2,
        MetaValue::I16(_) => 3,
        MetaValue::U32(_) => 4,
        MetaValue::I32(_) => 5,
        MetaValue::F32(_) => 6,
        MetaValue::Bool(_) => 7,
        MetaValue::Str(_) => 8,
        MetaValue::Array(_) => 9,
        MetaValue::U64(_) => 10,
        MetaValue::I64(_) => 11,
        MetaValue::F64(_) => 12,
    }
}

fn array_type(a: &MetaArray) -> u32 {
    match a {
        MetaArray::U8(_) => 0,
        MetaArray::I8(_) => 1,
        MetaArray::U16(_) => 2,
        MetaArray::I16(_) => 3,
        MetaArray::U32(_) => 4,
        MetaArray::I32(_) => 5,
        MetaArray::F32(_) => 6,
        MetaArray::Bool(_) => 7,
        MetaArray::Str(_) => 8,
        MetaArray::Array(_) => 9,
        MetaArray::U64(_) => 10,
        MetaArray::I64(_) => 11,
        MetaArray::F64(_) => 12,
    }
}

/// The payload of a value (without its type).
fn put_value(out: &mut Vec<u8>, v: &MetaValue) {
    match v {
        MetaValue::U8(x) => out.extend(x.to_le_bytes()),
        MetaValue::I8(x) => out.extend(x.to_le_bytes()),
        MetaValue::U16(x) => out.extend(x.to_le_bytes()),
        MetaValue::I16(x) => out.extend(x.to_le_bytes()),
        MetaValue::U32(x) => out.extend(x.to_le_bytes()),
        MetaValue::I32(x) => out.extend(x.to_le_bytes()),
        MetaValue::F32(x) => out.extend(x.to_le_bytes()),
        MetaValue::Bool(x) => out.push(u8::from(*x)),
        MetaValue::Str(x) => put_str(out, x),
        MetaValue::Array(a) => put_array(out, a),
        MetaValue::U64(x) => out.extend(x.to_le_bytes()),
        MetaValue::I64(x) => out.extend(x.to_le_bytes()),
        MetaValue::F64(x) => out.extend(x.to_le_bytes()),
    }
}

/// An array: element type, count, elements.
fn put_array(out: &mut Vec<u8>, a: &MetaArray) {
    out.extend(array_type(a).to_le_bytes());
    out.extend((a.len() as u64).to_le_bytes());
    match a {
        MetaArray::U8(v) => v.iter().for_each(|x| out.extend(x.to_le_bytes())),
        MetaArray::I8(v) => v.iter().for_each(|x| out.extend(x.to_le_bytes())),
        MetaArray::U16(v) => v.iter().for_each(|x| out.extend(x.to_le_bytes())),
        MetaArray::I16(v) => v.iter().for_each(|x| out.extend(x.to_le_bytes())),
        MetaArray::U32(v) => v.iter().for_each(|x| out.extend(x.to_le_bytes())),
        MetaArray::I32(v) => v.iter().for_each(|x| out.extend(x.to_le_bytes())),
        MetaArray::F32(v) => v.iter().for_each(|x| out.extend(x.to_le_bytes())),
        MetaArray::Bool(v) => v.iter().for_each(|x| out.push(u8::from(*x))),
        MetaArray::Str(v) => v.iter().for_each(|x| put_str(out, x)),
        MetaArray::Array(v) => v.iter().for_each(|x| put_array(out, x)),
        MetaArray::U64(v) => v.iter().for_each(|x| out.extend(x.to_le_bytes())),
        MetaArray::I64(v) => v.iter().for_each(|x| out.extend(x.to_le_bytes())),
        MetaArray::F64(v) => v.iter().for_each(|x| out.extend(x.to_le_bytes())),
    }
}

impl TestFile {
    fn new(kv: Vec<(&str, MetaValue)>, tensors: Vec<TestTensor>) -> Self {
        let kv = kv.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
        TestFile { magic: MAGIC, version: 3, kv, tensors }
    }

    fn alignment(&self) -> u64 {
        match self.kv.iter().find(|(k, _)| k == KEY_ALIGNMENT) {
            Some((_, MetaValue::U32(a))) if a.is_power_of_two() => u64::from(*a),
            _ => DEFAULT_ALIGNMENT,
        }
    }

    /// The file's bytes. Tensor data follows in list order, each padded to the alignment
    /// except the last, so that any truncation cuts into data.
    fn encode(&self) -> Vec<u8> {
        let align = self.alignment() as usize;
        let mut out = Vec::new();
        out.extend(self.magic);
        out.extend(self.version.to_le_bytes());
        out.extend((self.tensors.len() as u64).to_le_bytes());
        out.extend((self.kv.len() as u64).to_le_bytes());
        for (k, v) in &self.kv {
            put_str(&mut out, k);
            out.extend(value_type(v).to_le_bytes());
            put_value(&mut out, v);
        }
        let mut at = 0usize;
        for t in &self.tensors {
            put_str(&mut out, &t.name);
            out.extend((t.dims.len() as u32).to_le_bytes());
            t.dims.iter().for_each(|d| out.extend(d.to_le_bytes()));
            out.extend(t.type_id.to_le_bytes());
            out.extend(t.offset.unwrap_or(at as u64).to_le_bytes());
            at = (at + t.data.len()).next_multiple_of(align);
        }
        out.resize(out.len().next_multiple_of(align), 0);
        for (i, t) in self.tensors.iter().enumerate() {
            out.extend(&t.data);
            if i + 1 < self.tensors.len() {
                out.resize(out.len().next_multiple_of(align), 0);
            }
        }
        out
    }
}

fn tensor(name: &str, dims: &[u64], ty: GgmlType, data: Vec<u8>) -> TestTensor {
    TestTensor { name: name.into(), dims: dims.to_vec(), type_id: ty.id(), data, offset: None }
}

/// xorshift64, for test data and mutations without an extra crate.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// A directory of its own for one test, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(test: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("crossgpu-gguf-{}-{test}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("create scratch dir");
        Scratch(dir)
    }
    fn write(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, bytes).expect("write test file");
        path
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Writes `bytes` and opens them, expecting an error whose `file` is the path and whose
/// message mentions every one of `needles`.
fn expect_err(dir: &Scratch, bytes: &[u8], needles: &[&str]) -> FormatError {
    let path = dir.write("bad.gguf", bytes);
    let e = GgufFile::open(&path).expect_err("a bad file must not open");
    assert_eq!(e.file, path.display().to_string());
    for n in needles {
        assert!(e.what.contains(n), "error {e:?} should mention {n:?}");
    }
    assert!(e.to_string().starts_with(&format!("{}: ", path.display())));
    e
}
