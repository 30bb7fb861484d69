//! What a dispatch of a [`Kernel`] is given: one [`Arg`] per binding (a tensor or a view of one,
//! read or written) and its [`Immediates`] (by field name, or a whole `bytemuck::Pod` block),
//! each checked against the kernel's reflected interface before anything is recorded.

use vk_native::shader::{BindingKind, ImmediateField, Scalar};

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::kernels::Kernel;
use crate::tensor::TensorView;

/// One binding's argument: a tensor (or a view of one) the kernel reads, or one it writes.
#[derive(Clone, Copy, Debug)]
pub struct Arg<'a> {
    pub(crate) view: TensorView<'a>,
    pub(crate) write: bool,
}

impl<'a> Arg<'a> {
    /// A tensor or view the kernel only reads (a `read` storage binding, a uniform, or a
    /// `read_write` binding the kernel never stores to).
    pub fn read(t: impl Into<TensorView<'a>>) -> Self {
        Self { view: t.into(), write: false }
    }

    /// A tensor or view the kernel writes (a `read_write` storage binding).
    pub fn write(t: impl Into<TensorView<'a>>) -> Self {
        Self { view: t.into(), write: true }
    }
}

/// One immediate value: a 4-byte scalar or a vector of two to four.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value {
    /// A `u32`.
    U32(u32),
    /// An `i32`.
    I32(i32),
    /// An `f32`.
    F32(f32),
    /// A `vecN<u32>` (`len` of the four used).
    VecU32([u32; 4], u32),
    /// A `vecN<i32>`.
    VecI32([i32; 4], u32),
    /// A `vecN<f32>`.
    VecF32([f32; 4], u32),
}

impl Value {
    fn scalar(&self) -> (Scalar, u32) {
        match *self {
            Self::U32(_) => (Scalar::U32, 1),
            Self::I32(_) => (Scalar::I32, 1),
            Self::F32(_) => (Scalar::F32, 1),
            Self::VecU32(_, n) => (Scalar::U32, n),
            Self::VecI32(_, n) => (Scalar::I32, n),
            Self::VecF32(_, n) => (Scalar::F32, n),
        }
    }

    fn words(&self) -> Vec<u32> {
        match *self {
            Self::U32(v) => vec![v],
            Self::I32(v) => vec![v as u32],
            Self::F32(v) => vec![v.to_bits()],
            Self::VecU32(v, n) => v[..n as usize].to_vec(),
            Self::VecI32(v, n) => v[..n as usize].iter().map(|&x| x as u32).collect(),
            Self::VecF32(v, n) => v[..n as usize].iter().map(|x| x.to_bits()).collect(),
        }
    }

    fn type_name(&self) -> String {
        let (s, n) = self.scalar();
        if n == 1 {
            s.to_string()
        } else {
            format!("vec{n}<{s}>")
        }
    }
}

impl From<u32> for Value {
    fn from(v: u32) -> Self {
        Self::U32(v)
    }
}
impl From<i32> for Value {
    fn from(v: i32) -> Self {
        Self::I32(v)
    }
}
impl From<f32> for Value {
    fn from(v: f32) -> Self {
        Self::F32(v)
    }
}
macro_rules! vectors {
    ($($n:literal),*) => {$(
        impl From<[u32; $n]> for Value {
            fn from(v: [u32; $n]) -> Self {
                let mut w = [0; 4];
                w[..$n].copy_from_slice(&v);
                Self::VecU32(w, $n)
            }
        }
        impl From<[i32; $n]> for Value {
            fn from(v: [i32; $n]) -> Self {
                let mut w = [0; 4];
                w[..$n].copy_from_slice(&v);
                Self::VecI32(w, $n)
            }
        }
        impl From<[f32; $n]> for Value {
            fn from(v: [f32; $n]) -> Self {
                let mut w = [0.0; 4];
                w[..$n].copy_from_slice(&v);
                Self::VecF32(w, $n)
            }
        }
    )*};
}
vectors!(2, 3, 4);

/// A dispatch's immediates (its `var<immediate>` block): fields set by name
/// ([`Immediates::set`], each checked against the field's type, every field without a leading
/// `_` required), or the whole block as a `#[repr(C)]` Pod struct ([`Immediates::from_pod`],
/// its size checked against the block's).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Immediates {
    fields: Vec<(String, Value)>,
    raw: Option<Vec<u8>>,
}

impl Immediates {
    /// No immediates (for a kernel without a `var<immediate>` block), or a start for
    /// [`Immediates::set`].
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets field `name` of the block (for a block that is not a struct, `name` is the
    /// variable's). The type must be the field's: `u32`, `i32`, `f32`, or an array of two to
    /// four of one of them for a vector.
    pub fn set(mut self, name: &str, value: impl Into<Value>) -> Self {
        self.fields.push((name.to_string(), value.into()));
        self
    }

    /// The whole block from a `bytemuck::Pod` value laid out as the WGSL struct is (a
    /// `#[repr(C)]` struct of the same fields; padding included): its size must be the block's.
    pub fn from_pod<T: bytemuck::Pod>(value: &T) -> Self {
        Self { fields: Vec::new(), raw: Some(bytemuck::bytes_of(value).to_vec()) }
    }

    /// The block's words for `kernel`, or an error naming the field that is missing, unknown or
    /// of the wrong type.
    pub(crate) fn encode(&self, kernel: &Kernel) -> Result<Vec<u32>> {
        let name = kernel.name();
        let bad = |why: String| Err(Error::InvalidArgument(format!("kernel {name}: immediates: {why}")));
        let Some(block) = &kernel.interface().immediates else {
            if self.fields.is_empty() && self.raw.as_ref().is_none_or(Vec::is_empty) {
                return Ok(Vec::new());
            }
            return bad("the kernel has no var<immediate> block, so it takes none".into());
        };
        let size = block.size as usize;
        if let Some(raw) = &self.raw {
            if !self.fields.is_empty() {
                return bad("both a Pod block and fields by name: give one".into());
            }
            if raw.len() != size {
                return bad(format!(
                    "the Pod value is {} bytes; var<immediate> {}: {} is {size}",
                    raw.len(),
                    block.name,
                    block.type_name.as_deref().unwrap_or("(a block)")
                ));
            }
            return Ok(raw.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect());
        }
        let is_struct =
            block.type_name.is_some() && !(block.fields.len() == 1 && block.fields[0].name.is_empty());
        let field_of = |given: &str| -> Option<&ImmediateField> {
            if is_struct {
                block.fields.iter().find(|f| f.name == given)
            } else {
                (given == block.name || given.is_empty()).then(|| &block.fields[0])
            }
        };
        let names = || {
            if is_struct {
                block.fields.iter().map(|f| f.name.as_str()).collect::<Vec<_>>().join(", ")
            } else {
                block.name.clone()
            }
        };
        let mut words = vec![0u32; size.div_ceil(4)];
        let mut set: Vec<&str> = Vec::new();
        for (given, value) in &self.fields {
            let Some(f) = field_of(given) else {
                return bad(format!("no field {given:?} (the block has: {})", names()));
            };
            if set.contains(&given.as_str()) {
                return bad(format!("field {given} set twice"));
            }
            if f.components == 0 {
                return bad(format!(
                    "field {given} is a {}: pass the whole block with Immediates::from_pod",
                    f.type_name
                ));
            }
            if value.scalar() != (f.scalar, f.components) {
                return bad(format!("field {given} is {}, given {}", f.type_name, value.type_name()));
            }
            let at = f.offset as usize / 4;
            for (k, w) in value.words().into_iter().enumerate() {
                words[at + k] = w;
            }
            set.push(given.as_str());
        }
        let fields: Vec<&ImmediateField> =
            if is_struct { block.fields.iter().collect() } else { vec![&block.fields[0]] };
        for f in fields {
            let shown = if is_struct { f.name.as_str() } else { block.name.as_str() };
            let given = set.iter().any(|s| *s == shown || (!is_struct && s.is_empty()));
            if !given && !f.name.starts_with('_') {
                return bad(format!("field {shown} ({}) is not set", f.type_name));
            }
        }
        Ok(words)
    }
}

/// Whether a tensor of `dtype` may be bound where the kernel's binding holds `element`: f32 to
/// f32, u32 to u32, i32 to i32; f16 and bf16 tensors (two halves packed per 32-bit word) to
/// `u32` words, and f16 also to `f16` (a kernel with `enable f16;`).
pub(crate) fn binds_as(dtype: DType, element: Scalar) -> bool {
    matches!(
        (dtype, element),
        (DType::F32, Scalar::F32)
            | (DType::U32, Scalar::U32)
            | (DType::I32, Scalar::I32)
            | (DType::F16, Scalar::U32 | Scalar::F16)
            | (DType::BF16, Scalar::U32)
    )
}

/// The dtype a binding of `element` holds, for messages.
pub(crate) fn dtype_for(element: Scalar) -> Option<DType> {
    match element {
        Scalar::F32 => Some(DType::F32),
        Scalar::U32 => Some(DType::U32),
        Scalar::I32 => Some(DType::I32),
        Scalar::F16 => Some(DType::F16),
        _ => None,
    }
}

/// Whether a binding of `kind` that the kernel writes (`written`) may take `arg`: written
/// bindings need [`Arg::write`], others [`Arg::read`]. The error says which to pass.
pub(crate) fn check_access(kernel: &str, binding: &vk_native::shader::Binding, arg: &Arg<'_>) -> Result<()> {
    let what = format!("kernel {kernel}, binding {} ({})", binding.binding, binding.name);
    match (binding.kind, binding.written, arg.write) {
        (BindingKind::StorageRead | BindingKind::Uniform, _, true) => Err(Error::InvalidArgument(format!(
            "{what} is var<{}>: the kernel cannot write it; pass it with Arg::read",
            binding.kind
        ))),
        (BindingKind::StorageReadWrite, true, false) => {
            Err(Error::InvalidArgument(format!("{what}: the kernel writes it; pass it with Arg::write")))
        }
        _ => Ok(()),
    }
}
