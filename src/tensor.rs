//! Tensors: device-local storage buffers of f32, f16, bf16, u32 or i32 on one member, with a
//! shape; and views of them ([`TensorView`]: a bounds-checked range, bound to a kernel as
//! itself).
//!
//! f16 and bf16 tensors are stored packed, two halves per 32-bit word (element 2w in the low
//! half), so kernels read them as `u32` words (`unpack2x16float` for f16, a shift and a bitcast
//! for bf16) and need neither shaderFloat16 nor 16-bit storage: the same kernels run on every
//! Vulkan device.

use std::sync::Arc;

use vk_native::{Buffer, BufferId, BufferUsage, GpuBuffer, StagingBuffer};

pub use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::group::{FillRows, Member, MemberShared};

/// A tensor on one member of a group. Not `Clone`: one owner; dropping it frees the buffer
/// once the work that uses it has finished.
pub struct Tensor {
    pub(crate) member: Arc<MemberShared>,
    pub(crate) buffer: Buffer,
    dtype: DType,
    shape: Vec<usize>,
    len: usize,
}

impl std::fmt::Debug for Tensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tensor")
            .field("member", &self.member.index)
            .field("dtype", &self.dtype)
            .field("shape", &self.shape)
            .finish()
    }
}

impl Drop for Tensor {
    fn drop(&mut self) {
        self.member.forget_buffer(self.buffer.id());
    }
}

/// f32 → f16 as everywhere in crossgpu: round to nearest, values beyond ±65504 (infinities
/// too) saturate to ±65504, NaN stays NaN. The GPU conversion (`wgsl/convert_f16.wgsl`) does
/// the same.
pub fn f16_saturating(v: f32) -> half::f16 {
    if v.is_nan() {
        half::f16::from_f32(v)
    } else {
        half::f16::from_f32(v.clamp(-65504.0, 65504.0))
    }
}

/// f32 → bf16 as everywhere in crossgpu: round to nearest even (NaN stays NaN, values past the
/// bf16 range become infinities, as an f32 would).
pub fn bf16_rounded(v: f32) -> half::bf16 {
    half::bf16::from_f32(v)
}

/// The largest element count a tensor may hold: kernels index with 32-bit integers.
pub const MAX_ELEMENTS: usize = (u32::MAX / 2) as usize;

/// A range of a tensor's elements with a shape, bound to a kernel as itself
/// ([`crate::dispatch::Arg`]): made by [`Tensor::view`] (checked against the tensor), and from a
/// `&Tensor` for all of it.
#[derive(Clone, Copy)]
pub struct TensorView<'a> {
    tensor: &'a Tensor,
    offset: usize,
    len: usize,
}

impl std::fmt::Debug for TensorView<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TensorView")
            .field("tensor", self.tensor)
            .field("offset", &self.offset)
            .field("len", &self.len)
            .finish()
    }
}

impl<'a> From<&'a Tensor> for TensorView<'a> {
    fn from(tensor: &'a Tensor) -> Self {
        Self { tensor, offset: 0, len: tensor.len }
    }
}

impl<'a> TensorView<'a> {
    /// The tensor it views.
    pub fn tensor(&self) -> &'a Tensor {
        self.tensor
    }

    /// Its first element's index in the tensor.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// Its elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it has no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Byte offset of its storage in the tensor's buffer.
    pub fn byte_offset(&self) -> u64 {
        self.tensor.dtype.storage_bytes(self.offset)
    }

    /// Bytes of its storage (f16 and bf16 round up to whole words).
    pub fn bytes(&self) -> u64 {
        self.tensor.dtype.storage_bytes(self.offset + self.len) - self.byte_offset()
    }
}

impl Tensor {
    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The shape given at creation, in elements per dimension (row-major).
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the tensor has no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The member that holds the tensor.
    pub fn member_index(&self) -> usize {
        self.member.index
    }

    pub(crate) fn id(&self) -> BufferId {
        self.buffer.id()
    }

    /// A view of `shape` (its element count) from element `offset`: refused past the end,
    /// and, for f16 and bf16 (two elements per word), at an odd offset.
    pub fn view(&self, offset: usize, shape: &[usize]) -> Result<TensorView<'_>> {
        let len = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d)).unwrap_or(usize::MAX);
        let end = offset.saturating_add(len);
        if end > self.len {
            return Err(Error::LengthMismatch {
                what: format!("view of shape {shape:?} from element {offset} (elements to its end)"),
                expected: self.len,
                got: end,
            });
        }
        if self.dtype.is_half() && offset % 2 == 1 {
            return Err(Error::InvalidArgument(format!(
                "a view of a {} tensor from element {offset}: two elements share a word, so a view starts at an even element",
                self.dtype
            )));
        }
        Ok(TensorView { tensor: self, offset, len })
    }

    /// Reads the tensor back as f32 (f16 and bf16 elements are widened exactly; integers are
    /// converted, exact below 2^24). Submits the member's pending work and waits for it.
    pub fn read(&self) -> Result<Vec<f32>> {
        let raw = self.read_bytes()?;
        let halves = || raw.chunks_exact(2).take(self.len).map(|c| u16::from_le_bytes([c[0], c[1]]));
        Ok(match self.dtype {
            DType::F32 => bytemuck::pod_collect_to_vec::<u8, f32>(&raw),
            DType::U32 => {
                bytemuck::pod_collect_to_vec::<u8, u32>(&raw).into_iter().map(|v| v as f32).collect()
            }
            DType::I32 => {
                bytemuck::pod_collect_to_vec::<u8, i32>(&raw).into_iter().map(|v| v as f32).collect()
            }
            DType::F16 => halves().map(|h| half::f16::from_bits(h).to_f32()).collect(),
            DType::BF16 => halves().map(|h| half::bf16::from_bits(h).to_f32()).collect(),
        })
    }

    /// Reads a u32 tensor back exactly.
    pub fn read_u32(&self) -> Result<Vec<u32>> {
        self.check_dtype(DType::U32, "read_u32")?;
        Ok(bytemuck::pod_collect_to_vec::<u8, u32>(&self.read_bytes()?))
    }

    /// Reads an i32 tensor back exactly.
    pub fn read_i32(&self) -> Result<Vec<i32>> {
        self.check_dtype(DType::I32, "read_i32")?;
        Ok(bytemuck::pod_collect_to_vec::<u8, i32>(&self.read_bytes()?))
    }

    /// Reads an f16 or bf16 tensor back as its 16-bit patterns, exactly.
    pub fn read_halves(&self) -> Result<Vec<u16>> {
        if !self.dtype.is_half() {
            return Err(Error::DtypeMismatch {
                what: "read_halves".into(),
                expected: DType::F16,
                got: self.dtype,
            });
        }
        let raw = self.read_bytes()?;
        Ok(raw.chunks_exact(2).take(self.len).map(|c| u16::from_le_bytes([c[0], c[1]])).collect())
    }

    /// Reads the tensor's storage back as 32-bit words, exactly (for the collectives' host path).
    pub(crate) fn read_words(&self) -> Result<Vec<u32>> {
        Ok(bytemuck::pod_collect_to_vec::<u8, u32>(&self.read_bytes()?))
    }

    fn read_bytes(&self) -> Result<Vec<u8>> {
        let m = &self.member;
        let bytes = self.dtype.storage_bytes(self.len);
        if self.len == 0 {
            return Ok(Vec::new());
        }
        let staging = StagingBuffer::new(&m.device, bytes, false).map_err(|e| m.err(e))?;
        let v = m.read_back(&self.buffer, &staging, bytes)?;
        m.wait_value(&mut m.stream(), v, "a tensor read-back")?;
        let mut raw = vec![0u8; bytes as usize];
        staging.read(0, &mut raw).map_err(|e| m.err(e))?;
        Ok(raw)
    }

    /// Checks that the tensor is on member `m`.
    pub(crate) fn check_on(&self, m: &MemberShared, what: &str) -> Result<()> {
        if self.member.group != m.group || self.member.index != m.index {
            return Err(Error::WrongOwner {
                what: what.to_string(),
                expected: m.label.clone(),
                got: format!("{} of group {:?}", self.member.label, self.member.group),
            });
        }
        Ok(())
    }

    pub(crate) fn check_dtype(&self, dtype: DType, what: &str) -> Result<()> {
        if self.dtype != dtype {
            return Err(Error::DtypeMismatch { what: what.to_string(), expected: dtype, got: self.dtype });
        }
        Ok(())
    }
}

impl Tensor {
    /// `(rows, cols)` of a 2-D tensor, or an error naming `what` (e.g. "matvec w").
    pub(crate) fn matrix_dims(&self, what: &str) -> Result<(usize, usize)> {
        match *self.shape() {
            [rows, cols] => Ok((rows, cols)),
            _ => Err(Error::LengthMismatch {
                what: format!("{what} must be 2-D, dimensions"),
                expected: 2,
                got: self.shape().len(),
            }),
        }
    }
}

impl Member {
    /// A tensor of `shape` whose contents are unspecified until written.
    pub fn empty(&self, shape: &[usize], dtype: DType) -> Result<Tensor> {
        let len = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d)).filter(|&n| n <= MAX_ELEMENTS);
        let len = len.ok_or_else(|| {
            Error::Unsupported(format!("shape {shape:?} has more than {MAX_ELEMENTS} elements"))
        })?;
        let m = &self.shared;
        let bytes = dtype.storage_bytes(len);
        let limit = m.device.info().caps.max_storage_buffer_range;
        if bytes > limit {
            return Err(Error::Unsupported(format!(
                "a {dtype} tensor of shape {shape:?} needs {bytes} bytes, more than {}'s maxStorageBufferRange ({limit} bytes) that one kernel binding may cover; split it across tensors",
                m.label
            )));
        }
        let usage = BufferUsage { copy_src: true, copy_dst: true };
        let buffer = Buffer::new(&m.device, dtype.storage_bytes(len), usage, "crossgpu tensor")
            .map_err(|e| m.err(e))?;
        Ok(Tensor { member: m.clone(), buffer, dtype, shape: shape.to_vec(), len })
    }

    /// A tensor of `shape` filled with `value`.
    pub fn full(&self, shape: &[usize], dtype: DType, value: f32) -> Result<Tensor> {
        let t = self.empty(shape, dtype)?;
        self.fill(&t, value)?;
        Ok(t)
    }

    /// Uploads `data` as a tensor of `shape` (`data.len()` must equal the shape's element
    /// count). For `DType::F16` values are rounded to nearest f16 on the CPU, saturating
    /// beyond ±65504 ([`f16_saturating`]); for `DType::BF16` rounded to nearest even
    /// ([`bf16_rounded`]); integer dtypes take `v as u32` / `v as i32` (use
    /// [`Member::upload_u32`] and [`Member::upload_i32`] for exact integers).
    pub fn upload(&self, data: &[f32], shape: &[usize], dtype: DType) -> Result<Tensor> {
        let len = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
        if len != Some(data.len()) {
            return Err(Error::LengthMismatch {
                what: format!("upload: data vs shape {shape:?}"),
                expected: len.unwrap_or(usize::MAX),
                got: data.len(),
            });
        }
        let t = self.empty(shape, dtype)?;
        if t.len != data.len() {
            return Err(Error::LengthMismatch {
                what: "upload: data vs shape".into(),
                expected: t.len,
                got: data.len(),
            });
        }
        self.write(&t, data)?;
        Ok(t)
    }

    /// Uploads a 1-D u32 tensor (token ids).
    pub fn upload_u32(&self, data: &[u32]) -> Result<Tensor> {
        let t = self.empty(&[data.len()], DType::U32)?;
        self.write_bytes(&t, bytemuck::cast_slice(data))?;
        Ok(t)
    }

    /// Uploads a 1-D i32 tensor.
    pub fn upload_i32(&self, data: &[i32]) -> Result<Tensor> {
        let t = self.empty(&[data.len()], DType::I32)?;
        self.write_bytes(&t, bytemuck::cast_slice(data))?;
        Ok(t)
    }

    /// Overwrites all of a u32 tensor with `data`, exactly (recorded into the stream).
    pub fn write_u32(&self, t: &Tensor, data: &[u32]) -> Result<()> {
        t.check_on(&self.shared, "write_u32")?;
        t.check_dtype(DType::U32, "write_u32")?;
        if t.len != data.len() {
            return Err(Error::LengthMismatch { what: "write_u32".into(), expected: t.len, got: data.len() });
        }
        self.write_bytes(t, bytemuck::cast_slice(data))
    }

    /// Overwrites all of an i32 tensor with `data`, exactly (recorded into the stream).
    pub fn write_i32(&self, t: &Tensor, data: &[i32]) -> Result<()> {
        t.check_on(&self.shared, "write_i32")?;
        t.check_dtype(DType::I32, "write_i32")?;
        if t.len != data.len() {
            return Err(Error::LengthMismatch { what: "write_i32".into(), expected: t.len, got: data.len() });
        }
        self.write_bytes(t, bytemuck::cast_slice(data))
    }

    /// Uploads a 1-D f32 tensor.
    pub fn upload_f32(&self, data: &[f32]) -> Result<Tensor> {
        self.upload(data, &[data.len()], DType::F32)
    }

    /// Overwrites all of `t` with `data` (recorded into the stream; the copy happens in order
    /// with the member's other work).
    pub fn write(&self, t: &Tensor, data: &[f32]) -> Result<()> {
        t.check_on(&self.shared, "write")?;
        if t.len != data.len() {
            return Err(Error::LengthMismatch { what: "write".into(), expected: t.len, got: data.len() });
        }
        if data.is_empty() {
            return Ok(());
        }
        let bytes: Vec<u8> = match t.dtype {
            DType::F32 => bytemuck::cast_slice(data).to_vec(),
            DType::U32 => data.iter().flat_map(|&v| (v as u32).to_le_bytes()).collect(),
            DType::I32 => data.iter().flat_map(|&v| (v as i32).to_le_bytes()).collect(),
            DType::F16 => {
                let mut b: Vec<u8> = data.iter().flat_map(|&v| f16_saturating(v).to_le_bytes()).collect();
                b.resize(t.dtype.storage_bytes(t.len) as usize, 0);
                b
            }
            DType::BF16 => {
                let mut b: Vec<u8> = data.iter().flat_map(|&v| bf16_rounded(v).to_le_bytes()).collect();
                b.resize(t.dtype.storage_bytes(t.len) as usize, 0);
                b
            }
        };
        self.write_bytes(t, &bytes)
    }

    /// A `[rows, cols]` f16 tensor whose bytes (little-endian halves, rows back to back) are
    /// written by `fill(rows, dst)` straight into staging memory, a run of rows at a time (a
    /// checkpoint reader reads the file into `dst`).
    pub(crate) fn upload_f16_with(
        &self,
        rows: usize,
        cols: usize,
        fill: &mut FillRows<'_>,
    ) -> Result<Tensor> {
        let t = self.empty(&[rows, cols], DType::F16)?;
        // The shape was accepted, so its element count and bytes fit.
        let data = rows * cols * 2;
        let pad = DType::F16.storage_bytes(rows * cols) as usize - data;
        self.shared.upload_rows(&t.buffer, rows, cols * 2, pad, fill)?;
        Ok(t)
    }

    /// Copies `bytes` into `t` from its start (through a staging buffer; nothing waits).
    pub(crate) fn write_bytes(&self, t: &Tensor, bytes: &[u8]) -> Result<()> {
        let m = &self.shared;
        if bytes.is_empty() {
            return Ok(());
        }
        let mut staging = StagingBuffer::new(&m.device, bytes.len() as u64, true).map_err(|e| m.err(e))?;
        staging.write(0, bytes).map_err(|e| m.err(e))?;
        let mut s = m.stream();
        s.access(&[staging.id()], &[t.id()]).map_err(|e| m.err(e))?;
        s.rec.copy(&staging, 0, &t.buffer, 0, bytes.len() as u64).map_err(|e| m.err(e))
    }
}
