//! A compute kernel from WGSL, compiled once per process by vk-native's compiler and made into a
//! pipeline once per VkDevice at its first dispatch there: the user's kernels and the library's
//! own (`builtin.rs`) alike.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use vk_native::shader::Interface;
use vk_native::{CompileOptions, Shader};

use crate::error::{Error, Result};

static NEXT_KERNEL: AtomicU64 = AtomicU64::new(1);

/// Identity of a [`Kernel`], unique in the process: the key of every member's pipeline and
/// bind-group caches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct KernelId(pub(crate) u64);

struct KernelInner {
    id: KernelId,
    shader: Shader,
    /// Per binding: the kernel never writes it (naga's analysis), for hazard tracking.
    reads_only: Vec<bool>,
}

/// A compute kernel written in WGSL: compiled by naga when it is made (an error then carries
/// naga's message, line and column), its interface reflected ([`Kernel::interface`]), and run
/// on any member with `Member::dispatch` — recorded into the member's stream in order
/// with its other work, barriers placed from the kernel's own bindings, usable in a step that is
/// recorded once and replayed (`Step`) and between all-reduce rounds. Cheap to clone.
///
/// What a kernel may use: storage buffers (`var<storage, read>` or `read_write`) and uniform
/// buffers of `@group(0)` at bindings `0..n`, one `var<immediate>` block (push constants, at
/// most 256 bytes and the device's `maxPushConstantsSize`), `override` constants
/// ([`KernelBuilder::constant`]) and, with [`KernelBuilder::f16`] on a device that has it, f16
/// arithmetic. Every buffer and array access is bounds-checked in the compiled code (an index
/// past the end reads or writes the last element), so no dispatch reaches past its bindings.
///
/// ```
/// # fn main() -> crossgpu::Result<()> {
/// use crossgpu::dispatch::{Arg, Immediates};
/// use crossgpu::kernels::Kernel;
/// let kernel = Kernel::from_wgsl("twice", "
///     struct P { n: u32 }
///     @group(0) @binding(0) var<storage, read_write> x: array<f32>;
///     var<immediate> p: P;
///     @compute @workgroup_size(64)
///     fn twice(@builtin(global_invocation_id) id: vec3<u32>) {
///         if id.x < p.n { x[id.x] = 2.0 * x[id.x]; }
///     }")?;
/// # let instance = crossgpu::Instance::new()?;
/// # let group = crossgpu::DeviceGroup::open(&instance, &crossgpu::GroupSpec::parse("0")?)?;
/// let member = &group.members()[0];
/// let x = member.upload_f32(&[1.0, 2.0, 3.0])?;
/// member.dispatch(&kernel, &[Arg::write(&x)], &Immediates::new().set("n", 3u32), [1, 1, 1])?;
/// assert_eq!(x.read()?, [2.0, 4.0, 6.0]);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Kernel(Arc<KernelInner>);

impl std::fmt::Debug for Kernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kernel").field("name", &self.name()).field("entry", &self.interface().entry).finish()
    }
}

impl Kernel {
    /// Compiles the only `@compute` entry point of `source`, named `name` in messages.
    pub fn from_wgsl(name: &str, source: &str) -> Result<Self> {
        Self::builder(name, source).build()
    }

    /// Compiles the WGSL file at `path` (its only `@compute` entry point), named by the file.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let source = std::fs::read_to_string(path)
            .map_err(|e| Error::InvalidArgument(format!("reading the kernel {}: {e}", path.display())))?;
        Self::builder(&path.display().to_string(), &source).build()
    }

    /// A kernel with options: the entry point, `override` values, f16 arithmetic.
    pub fn builder(name: &str, source: &str) -> KernelBuilder {
        KernelBuilder {
            name: name.to_string(),
            source: source.to_string(),
            options: CompileOptions::default(),
        }
    }

    /// Wraps a compiled shader (the library's own kernels).
    pub(crate) fn from_shader(shader: Shader) -> Self {
        let reads_only = shader.interface().bindings.iter().map(|b| !b.written).collect();
        Self(Arc::new(KernelInner {
            id: KernelId(NEXT_KERNEL.fetch_add(1, Ordering::Relaxed)),
            shader,
            reads_only,
        }))
    }

    /// The name it was made with.
    pub fn name(&self) -> &str {
        self.0.shader.label()
    }

    /// Its interface as the compiled module has it: entry point, workgroup size, bindings
    /// (kind, element type, the fewest bytes a bound range may have, whether it is written), the
    /// `var<immediate>` block's fields, and `var<workgroup>` bytes.
    pub fn interface(&self) -> &Interface {
        self.0.shader.interface()
    }

    /// The interface as text, one binding or field per line (what [`Kernel::interface`] holds).
    pub fn describe(&self) -> String {
        self.interface().to_string()
    }

    pub(crate) fn id(&self) -> KernelId {
        self.0.id
    }

    pub(crate) fn shader(&self) -> &Shader {
        &self.0.shader
    }

    /// Per binding: whether the kernel only reads it.
    pub(crate) fn reads_only(&self) -> &[bool] {
        &self.0.reads_only
    }
}

/// Options of a [`Kernel`] ([`Kernel::builder`]).
#[derive(Debug, Clone)]
pub struct KernelBuilder {
    name: String,
    source: String,
    options: CompileOptions,
}

impl KernelBuilder {
    /// The `@compute` entry point to compile (needed where the source has several).
    pub fn entry(mut self, entry: &str) -> Self {
        self.options.entry = entry.to_string();
        self
    }

    /// The value of the `override` named `name` (or the decimal `@id` of one that has an id):
    /// an integer override takes an exact integer, a `bool` one 0 or 1.
    pub fn constant(mut self, name: &str, value: impl Into<f64>) -> Self {
        self.options.overrides.push((name.to_string(), value.into()));
        self
    }

    /// Allows `enable f16;` (f16 arithmetic and storage): the kernel then runs only on members
    /// whose device has `shaderFloat16` and 16-bit storage (`Capabilities::shader_float16`).
    /// Without it f16 data is still usable, packed two per `u32` and read with
    /// `unpack2x16float`.
    pub fn f16(mut self, allowed: bool) -> Self {
        self.options.shader_f16 = allowed;
        self
    }

    /// Allows `enable wgpu_cooperative_matrix;` (square f16 tiles multiplied into f32 by a
    /// subgroup: `coopLoad`, `coopMultiplyAdd`, `coopStore`) and the subgroup built-ins; the
    /// kernel then runs only on members whose device offers tiles of the sides it uses
    /// (`Capabilities::cooperative_matrix_sides`: 16 on NVIDIA, 8 on lavapipe), f16 inputs
    /// summed into f32 — anything else is refused before it is dispatched. The WGSL must keep
    /// each cooperative load's and store's index and stride in a `let` of its own (naga 30's
    /// SPIR-V writer fails otherwise, reported as an [`Error::Shader`]).
    pub fn cooperative_matrix(mut self, allowed: bool) -> Self {
        self.options.cooperative_matrix = allowed;
        self
    }

    /// Compiles it. Bad WGSL, a missing override value, or an interface crossgpu cannot bind
    /// is an [`Error::Shader`] with naga's message and the line and column it points at.
    pub fn build(self) -> Result<Kernel> {
        let shader = Shader::compile(&self.name, &self.source, &self.options).map_err(Error::Shader)?;
        Ok(Kernel::from_shader(shader))
    }
}
