//! WGSL compiled by naga into SPIR-V that the driver can be given: the only way a [`Shader`]
//! comes to exist, so [`crate::Kernel::new`] can make a pipeline from one in safe code.
//!
//! What makes the SPIR-V safe to run, whatever the WGSL and whatever a dispatch passes:
//! - naga parsed and validated the module (`ValidationFlags::all()`) and wrote the SPIR-V
//!   itself; nothing else reaches `vkCreateShaderModule`.
//! - Every access to a buffer or an array is bounds-checked in the SPIR-V (naga's `Restrict`
//!   policy, as wgpu uses it: an index past the end reads or writes the last element), and
//!   [`crate::Kernel::bind_ranges`] refuses a binding smaller than its type's fixed part plus
//!   one element ([`Binding::min_bytes`]), so no index reaches past a bound range. Loops are
//!   bounded the way naga bounds them (`force_loop_bounding`).
//! - The interface is what the pipeline layout is made from ([`Interface`]): storage and
//!   uniform buffers of `@group(0)` at bindings `0..n`, at most one `var<immediate>` block.
//! - naga 30 panics on some inputs that pass validation, and its lowering recurses without a
//!   limit on long flat expressions: compiling runs on a thread of its own with a 256 MiB stack,
//!   a panic there is an error, and a source is at most [`MAX_SOURCE_BYTES`] bytes.
//!
//! A WGSL error is a [`ShaderError`] with naga's message, the line and column, and naga's
//! rendering of the source around it.

use std::sync::Arc;

use naga::valid::{Capabilities, GlobalUse, ValidationFlags, Validator};

/// The largest WGSL source [`Shader::compile`] takes.
pub const MAX_SOURCE_BYTES: usize = 256 << 10;
/// The largest `var<immediate>` block a kernel may have (naga 30's analysis counts its words in
/// a 64-bit mask; devices allow at least 128 bytes, see `maxPushConstantsSize`).
pub const MAX_IMMEDIATE_BYTES: u32 = 256;
const COMPILER_STACK: usize = 256 << 20;

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
    fn plain(label: &str, message: String) -> Self {
        Self {
            label: label.into(),
            rendered: format!("{label}: {message}"),
            message,
            line: None,
            column: None,
        }
    }

    fn at(label: &str, message: String, location: Option<naga::SourceLocation>, rendered: String) -> Self {
        Self {
            label: label.into(),
            message,
            line: location.map(|l| l.line_number),
            column: location.map(|l| l.line_position),
            rendered,
        }
    }
}

/// How to compile a kernel: which entry point, the values of its WGSL `override` constants,
/// and whether the source may `enable f16;`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CompileOptions {
    /// The `@compute` entry point; empty: the module's only one.
    pub entry: String,
    /// Values of `override` declarations, by name (or by the decimal `@id` where the override
    /// has one). Integers must be exact; every override without a default needs one.
    pub overrides: Vec<(String, f64)>,
    /// Allow `enable f16;` (f16 arithmetic): only for devices with `shaderFloat16` and 16-bit
    /// storage.
    pub shader_f16: bool,
}

/// Element type of a scalar or vector in a kernel's interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scalar {
    /// `f32`.
    F32,
    /// `f16` (with `enable f16;`).
    F16,
    /// `u32`.
    U32,
    /// `i32`.
    I32,
    /// `bool` (only in types that never touch host memory).
    Bool,
    /// Another scalar naga knows (f64, 64- or 16-bit integers).
    Other,
}

impl std::fmt::Display for Scalar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::F32 => "f32",
            Self::F16 => "f16",
            Self::U32 => "u32",
            Self::I32 => "i32",
            Self::Bool => "bool",
            Self::Other => "other",
        })
    }
}

/// What a binding is, as the pipeline layout declares it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BindingKind {
    /// `var<storage, read>`.
    StorageRead,
    /// `var<storage, read_write>`.
    StorageReadWrite,
    /// `var<uniform>`.
    Uniform,
}

impl std::fmt::Display for BindingKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::StorageRead => "storage, read",
            Self::StorageReadWrite => "storage, read_write",
            Self::Uniform => "uniform",
        })
    }
}

/// One buffer binding of `@group(0)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding {
    /// Its `@binding` number (bindings are `0..n`, each once).
    pub binding: u32,
    /// The variable's name in the WGSL.
    pub name: String,
    /// Storage (read or read-write) or uniform.
    pub kind: BindingKind,
    /// The element type of its array (the runtime-sized or last array of the type, else the
    /// type's first scalar): what a tensor bound to it should hold.
    pub element: Scalar,
    /// Components of that element (1 for a scalar, 2 to 4 for a vector, rows × columns for a
    /// matrix).
    pub components: u32,
    /// Whether the type ends in a runtime-sized array.
    pub runtime_sized: bool,
    /// The fewest bytes a bound range may have: the type's size with a runtime-sized array
    /// counted as one element.
    pub min_bytes: u64,
    /// Whether the entry point writes it (a store or an atomic), as naga's analysis finds.
    pub written: bool,
    /// The type as the WGSL writes it, for messages (`array<vec4<f32>>`).
    pub type_name: String,
}

/// One field of the `var<immediate>` block (a struct's member, or the block itself when it
/// is a plain scalar or vector).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImmediateField {
    /// The member's name (`""` for a block that is not a struct).
    pub name: String,
    /// Byte offset in the block.
    pub offset: u32,
    /// Bytes it takes.
    pub size: u32,
    /// Element type.
    pub scalar: Scalar,
    /// Components (1 for a scalar, 2 to 4 for a vector; 0 for a nested struct or array).
    pub components: u32,
    /// The type as the WGSL writes it.
    pub type_name: String,
}

/// The `var<immediate>` block of a kernel (push constants).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Immediates {
    /// The variable's name.
    pub name: String,
    /// The struct's name, where the block is a struct.
    pub type_name: Option<String>,
    /// Bytes of the block (a multiple of 4).
    pub size: u32,
    /// Its fields in offset order.
    pub fields: Vec<ImmediateField>,
}

/// A kernel's interface, read from the compiled module.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interface {
    /// The entry point.
    pub entry: String,
    /// `@workgroup_size`, with overrides applied.
    pub workgroup_size: [u32; 3],
    /// Bindings `0..n` of `@group(0)`, in binding order.
    pub bindings: Vec<Binding>,
    /// The `var<immediate>` block, if any.
    pub immediates: Option<Immediates>,
    /// Bytes of `var<workgroup>` memory the entry point uses.
    pub workgroup_bytes: u32,
    /// Whether the kernel uses f16 arithmetic (`enable f16;`).
    pub uses_f16: bool,
}

impl Interface {
    /// Bytes of immediates the kernel takes (0 without a block).
    pub fn immediate_bytes(&self) -> u32 {
        self.immediates.as_ref().map_or(0, |i| i.size)
    }
}

impl std::fmt::Display for Interface {
    /// The interface as a short listing, one binding or field per line.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let [x, y, z] = self.workgroup_size;
        writeln!(f, "@compute @workgroup_size({x}, {y}, {z}) fn {}", self.entry)?;
        for b in &self.bindings {
            writeln!(
                f,
                "  @binding({}) var<{}> {}: {} ({}{}, at least {} bytes{})",
                b.binding,
                b.kind,
                b.name,
                b.type_name,
                b.element,
                if b.components > 1 { format!(" x{}", b.components) } else { String::new() },
                b.min_bytes,
                if b.written { ", written" } else { "" }
            )?;
        }
        if let Some(im) = &self.immediates {
            writeln!(
                f,
                "  var<immediate> {}: {} ({} bytes)",
                im.name,
                im.type_name.as_deref().unwrap_or("(not a struct)"),
                im.size
            )?;
            for field in &im.fields {
                writeln!(f, "    @offset({}) {}: {}", field.offset, field.name, field.type_name)?;
            }
        }
        if self.workgroup_bytes > 0 {
            writeln!(f, "  var<workgroup>: {} bytes", self.workgroup_bytes)?;
        }
        Ok(())
    }
}

struct ShaderInner {
    label: String,
    words: Vec<u32>,
    interface: Interface,
}

/// A compute kernel compiled from WGSL by naga: its SPIR-V (written and validated by naga, every
/// buffer and array access bounds-checked) and its interface. Clones share it; pipelines are
/// made from it per device ([`crate::Kernel::new`]).
#[derive(Clone)]
pub struct Shader(Arc<ShaderInner>);

impl std::fmt::Debug for Shader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shader")
            .field("label", &self.0.label)
            .field("entry", &self.0.interface.entry)
            .finish()
    }
}

impl Shader {
    /// Compiles `source` (labelled `label` in messages) with `options`. Never panics: a WGSL
    /// error, an interface crossgpu cannot bind (other groups, textures, a gap in the binding
    /// numbers, an immediate block past [`MAX_IMMEDIATE_BYTES`]), a source past
    /// [`MAX_SOURCE_BYTES`] or a panic inside naga is a [`ShaderError`].
    pub fn compile(label: &str, source: &str, options: &CompileOptions) -> Result<Self, ShaderError> {
        if source.len() > MAX_SOURCE_BYTES {
            return Err(ShaderError::plain(
                label,
                format!("the source is {} bytes; a kernel may have at most {MAX_SOURCE_BYTES}", source.len()),
            ));
        }
        let (label_owned, src, opts) = (label.to_string(), source.to_string(), options.clone());
        let worker = std::thread::Builder::new()
            .name("crossgpu-wgsl".into())
            .stack_size(COMPILER_STACK)
            .spawn(move || {
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| compile(&label_owned, &src, &opts)))
                    .unwrap_or_else(|p| {
                        let why = p
                            .downcast_ref::<&str>()
                            .map(|s| s.to_string())
                            .or_else(|| p.downcast_ref::<String>().cloned())
                            .unwrap_or_default();
                        Err(ShaderError::plain(
                            &label_owned,
                            format!("naga failed on this source (an internal error of naga: {why}); simplify the expression it chokes on"),
                        ))
                    })
            })
            .map_err(|e| ShaderError::plain(label, format!("cannot start the compiler thread: {e}")))?;
        worker
            .join()
            .unwrap_or_else(|_| Err(ShaderError::plain(label, "the compiler thread ended abnormally".into())))
    }

    /// The label it was compiled with.
    pub fn label(&self) -> &str {
        &self.0.label
    }

    /// Its interface (bindings, immediates, workgroup size).
    pub fn interface(&self) -> &Interface {
        &self.0.interface
    }

    /// The SPIR-V words, as `vkCreateShaderModule` takes them.
    pub fn spirv(&self) -> &[u32] {
        &self.0.words
    }
}

/// The capabilities kernels may use: immediates and f16 packing always, f16 arithmetic where
/// the device has it.
fn capabilities(options: &CompileOptions) -> Capabilities {
    let mut caps = Capabilities::IMMEDIATES | Capabilities::SHADER_FLOAT16_IN_FLOAT32;
    if options.shader_f16 {
        caps |= Capabilities::SHADER_FLOAT16;
    }
    caps
}

fn compile(label: &str, src: &str, options: &CompileOptions) -> Result<Shader, ShaderError> {
    let caps = capabilities(options);
    let module = naga::front::wgsl::Frontend::new_with_options(naga::front::wgsl::Options {
        parse_doc_comments: false,
        capabilities: caps,
    })
    .parse(src)
    .map_err(|e| {
        let message = std::iter::once(e.message().to_string())
            .chain(e.notes().map(|n| n.to_string()))
            .collect::<Vec<_>>()
            .join("; ");
        ShaderError::at(label, message, e.location(src), e.emit_to_string_with_path(src, label))
    })?;
    // naga 30's analysis panics (with overflow checks) on an immediate block past 256 bytes:
    // refuse it before validation.
    for (_, var) in module.global_variables.iter() {
        if var.space == naga::AddressSpace::Immediate {
            let size = module.types[var.ty].inner.try_size(module.to_ctx()).unwrap_or(u32::MAX);
            if size > MAX_IMMEDIATE_BYTES {
                return Err(ShaderError::plain(
                    label,
                    format!(
                        "var<immediate> {} is {size} bytes; a kernel may have at most {MAX_IMMEDIATE_BYTES}",
                        var.name.as_deref().unwrap_or("")
                    ),
                ));
            }
        }
    }
    let info = Validator::new(ValidationFlags::all(), caps).validate(&module).map_err(|e| {
        let mut chain = vec![e.to_string()];
        let mut cur: &dyn std::error::Error = &e;
        while let Some(next) = cur.source() {
            chain.push(next.to_string());
            cur = next;
        }
        ShaderError::at(label, chain.join(": "), e.location(src), e.emit_to_string_with_path(src, label))
    })?;
    let computes: Vec<(usize, &naga::EntryPoint)> = module
        .entry_points
        .iter()
        .enumerate()
        .filter(|(_, ep)| ep.stage == naga::ShaderStage::Compute)
        .collect();
    let names = || computes.iter().map(|(_, ep)| ep.name.as_str()).collect::<Vec<_>>().join(", ");
    let (ep_index, ep) = if options.entry.is_empty() {
        match computes.as_slice() {
            [one] => *one,
            [] => return Err(ShaderError::plain(label, "the module has no @compute entry point".into())),
            _ => {
                return Err(ShaderError::plain(
                    label,
                    format!("the module has several @compute entry points ({}): name one", names()),
                ))
            }
        }
    } else {
        *computes.iter().find(|(_, ep)| ep.name == options.entry).ok_or_else(|| {
            ShaderError::plain(
                label,
                format!("no @compute entry point named {:?} (the module has: {})", options.entry, names()),
            )
        })?
    };
    let uses = info.get_entry_point(ep_index);
    let ctx = module.to_ctx();
    let mut bindings: Vec<Binding> = Vec::new();
    let mut immediates = None;
    for (h, var) in module.global_variables.iter() {
        let used: GlobalUse = uses[h];
        let name = var.name.clone().unwrap_or_default();
        let kind = match var.space {
            naga::AddressSpace::Storage { access } if access.contains(naga::StorageAccess::STORE) => {
                BindingKind::StorageReadWrite
            }
            naga::AddressSpace::Storage { .. } => BindingKind::StorageRead,
            naga::AddressSpace::Uniform => BindingKind::Uniform,
            naga::AddressSpace::Immediate => {
                if !used.is_empty() || immediates.is_none() {
                    immediates = Some(immediate_block(&module, &name, var.ty));
                }
                continue;
            }
            naga::AddressSpace::Private | naga::AddressSpace::WorkGroup | naga::AddressSpace::Function => continue,
            naga::AddressSpace::Handle => {
                return Err(ShaderError::plain(
                    label,
                    format!("{name} is a texture or sampler; crossgpu kernels bind buffers only"),
                ))
            }
            other => {
                return Err(ShaderError::plain(
                    label,
                    format!("variable {name}: address space {other:?} is not supported in crossgpu kernels (storage and uniform buffers only)"),
                ))
            }
        };
        let rb = var
            .binding
            .as_ref()
            .ok_or_else(|| ShaderError::plain(label, format!("buffer {name} has no @group/@binding")))?;
        if rb.group != 0 {
            return Err(ShaderError::plain(
                label,
                format!("buffer {name} is in @group({}); crossgpu kernels bind @group(0) only", rb.group),
            ));
        }
        let (element, components, runtime_sized) = element_of(&module, var.ty);
        let min_bytes = u64::from(module.types[var.ty].inner.try_size(ctx).ok_or_else(|| {
            ShaderError::plain(label, format!("buffer {name}: its type has no size naga can compute"))
        })?);
        bindings.push(Binding {
            binding: rb.binding,
            name,
            kind,
            element,
            components,
            runtime_sized,
            min_bytes,
            written: used.contains(GlobalUse::WRITE),
            type_name: type_name(&module, var.ty),
        });
    }
    bindings.sort_by_key(|b| b.binding);
    for (i, b) in bindings.iter().enumerate() {
        if b.binding != i as u32 {
            return Err(ShaderError::plain(
                label,
                format!(
                    "buffer {} is at @binding({}), but the bindings must be 0..{} without gaps ({})",
                    b.name,
                    b.binding,
                    bindings.len(),
                    if i > 0 && bindings[i - 1].binding == b.binding {
                        "two buffers share it".to_string()
                    } else {
                        format!("@binding({i}) is missing")
                    }
                ),
            ));
        }
    }
    let mut pc = naga::back::PipelineConstants::default();
    for (k, v) in &options.overrides {
        pc.insert(k.clone(), *v);
    }
    for (k, v) in &options.overrides {
        let o = module.overrides.iter().find(|(_, o)| {
            o.id.map(|id| id.to_string()).as_deref() == Some(k.as_str())
                || (o.id.is_none() && o.name.as_deref() == Some(k.as_str()))
        });
        if let Some((_, o)) = o {
            let integer = matches!(
                module.types[o.ty].inner,
                naga::TypeInner::Scalar(naga::Scalar {
                    kind: naga::ScalarKind::Uint | naga::ScalarKind::Sint,
                    ..
                })
            );
            if integer && v.fract() != 0.0 {
                return Err(ShaderError::plain(
                    label,
                    format!("override {k} is an integer; {v} is not (naga would truncate it)"),
                ));
            }
        }
    }
    let entry = ep.name.clone();
    let (processed, processed_info) = naga::back::pipeline_constants::process_overrides(
        &module,
        &info,
        Some((naga::ShaderStage::Compute, &entry)),
        &pc,
    )
    .map_err(|e| match e {
        naga::back::pipeline_constants::PipelineConstantError::ValidationError(ref v) => ShaderError::at(
            label,
            format!("after the overrides: {v}"),
            v.location(src),
            v.emit_to_string_with_path(src, label),
        ),
        other => ShaderError::plain(label, format!("overrides: {other}")),
    })?;
    let pep = processed
        .entry_points
        .iter()
        .find(|p| p.name == entry)
        .ok_or_else(|| ShaderError::plain(label, "the entry point vanished with the overrides".into()))?;
    let workgroup_size = pep.workgroup_size;
    let pctx = processed.to_ctx();
    let workgroup_bytes = processed
        .global_variables
        .iter()
        .filter(|(_, v)| v.space == naga::AddressSpace::WorkGroup)
        .map(|(_, v)| processed.types[v.ty].inner.try_size(pctx).unwrap_or(u32::MAX))
        .fold(0u32, u32::saturating_add);
    let uses_f16 = processed.types.iter().any(|(_, t)| match t.inner {
        naga::TypeInner::Scalar(s) | naga::TypeInner::Vector { scalar: s, .. } => s == naga::Scalar::F16,
        _ => false,
    });
    let policy = naga::proc::BoundsCheckPolicy::Restrict;
    let spv_options = naga::back::spv::Options {
        lang_version: (1, 3),
        flags: naga::back::spv::WriterFlags::empty(),
        bounds_check_policies: naga::proc::BoundsCheckPolicies {
            index: policy,
            buffer: policy,
            image_load: policy,
            binding_array: policy,
        },
        use_storage_input_output_16: false,
        ..Default::default()
    };
    let words = naga::back::spv::write_vec(
        &processed,
        &processed_info,
        &spv_options,
        Some(&naga::back::spv::PipelineOptions {
            shader_stage: naga::ShaderStage::Compute,
            entry_point: entry.clone(),
        }),
    )
    .map_err(|e| ShaderError::plain(label, format!("SPIR-V output failed: {e}")))?;
    Ok(Shader(Arc::new(ShaderInner {
        label: label.to_string(),
        words,
        interface: Interface { entry, workgroup_size, bindings, immediates, workgroup_bytes, uses_f16 },
    })))
}

fn scalar_of(s: naga::Scalar) -> Scalar {
    match (s.kind, s.width) {
        (naga::ScalarKind::Float, 4) => Scalar::F32,
        (naga::ScalarKind::Float, 2) => Scalar::F16,
        (naga::ScalarKind::Uint, 4) => Scalar::U32,
        (naga::ScalarKind::Sint, 4) => Scalar::I32,
        (naga::ScalarKind::Bool, _) => Scalar::Bool,
        _ => Scalar::Other,
    }
}

/// The element of a buffer's type: its (last) array's element, else the first scalar found;
/// with its component count and whether the array is runtime-sized.
fn element_of(module: &naga::Module, ty: naga::Handle<naga::Type>) -> (Scalar, u32, bool) {
    match &module.types[ty].inner {
        naga::TypeInner::Scalar(s) | naga::TypeInner::Atomic(s) => (scalar_of(*s), 1, false),
        naga::TypeInner::Vector { size, scalar } => (scalar_of(*scalar), *size as u32, false),
        naga::TypeInner::Matrix { columns, rows, scalar } => {
            (scalar_of(*scalar), *columns as u32 * *rows as u32, false)
        }
        naga::TypeInner::Array { base, size, .. } => {
            let (s, c, _) = element_of(module, *base);
            (s, c, matches!(size, naga::ArraySize::Dynamic))
        }
        naga::TypeInner::Struct { members, .. } => {
            members.last().map_or((Scalar::Other, 0, false), |m| element_of(module, m.ty))
        }
        _ => (Scalar::Other, 0, false),
    }
}

fn type_name(module: &naga::Module, ty: naga::Handle<naga::Type>) -> String {
    let t = &module.types[ty];
    if let Some(name) = &t.name {
        return name.clone();
    }
    match &t.inner {
        naga::TypeInner::Scalar(s) => scalar_of(*s).to_string(),
        naga::TypeInner::Atomic(s) => format!("atomic<{}>", scalar_of(*s)),
        naga::TypeInner::Vector { size, scalar } => format!("vec{}<{}>", *size as u32, scalar_of(*scalar)),
        naga::TypeInner::Matrix { columns, rows, scalar } => {
            format!("mat{}x{}<{}>", *columns as u32, *rows as u32, scalar_of(*scalar))
        }
        naga::TypeInner::Array { base, size, .. } => match size {
            naga::ArraySize::Constant(n) => format!("array<{}, {n}>", type_name(module, *base)),
            _ => format!("array<{}>", type_name(module, *base)),
        },
        _ => "?".into(),
    }
}

fn immediate_block(module: &naga::Module, name: &str, ty: naga::Handle<naga::Type>) -> Immediates {
    let ctx = module.to_ctx();
    let t = &module.types[ty];
    let size = t.inner.try_size(ctx).unwrap_or(0);
    let field = |name: String, offset: u32, ty: naga::Handle<naga::Type>| {
        let inner = &module.types[ty].inner;
        let (scalar, components) = match inner {
            naga::TypeInner::Scalar(s) => (scalar_of(*s), 1),
            naga::TypeInner::Vector { size, scalar } => (scalar_of(*scalar), *size as u32),
            _ => (Scalar::Other, 0),
        };
        ImmediateField {
            name,
            offset,
            size: inner.try_size(ctx).unwrap_or(0),
            scalar,
            components,
            type_name: type_name(module, ty),
        }
    };
    let fields = match &t.inner {
        naga::TypeInner::Struct { members, .. } => {
            members.iter().map(|m| field(m.name.clone().unwrap_or_default(), m.offset, m.ty)).collect()
        }
        _ => vec![field(String::new(), 0, ty)],
    };
    Immediates { name: name.into(), type_name: t.name.clone(), size, fields }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ADD: &str = "
        struct Params { n: u32, scale: f32 }
        @group(0) @binding(0) var<storage, read> src: array<f32>;
        @group(0) @binding(1) var<storage, read_write> dst: array<vec4<f32>>;
        var<immediate> p: Params;
        override block: u32 = 64;
        @compute @workgroup_size(block)
        fn add(@builtin(global_invocation_id) id: vec3<u32>) {
            if id.x < p.n { dst[id.x] = vec4<f32>(src[id.x] * p.scale); }
        }";

    #[test]
    fn reflects_bindings_immediates_and_overrides() {
        let s = Shader::compile("add.wgsl", ADD, &CompileOptions::default()).unwrap();
        let i = s.interface();
        assert_eq!(i.entry, "add");
        assert_eq!(i.workgroup_size, [64, 1, 1]);
        assert_eq!(i.bindings.len(), 2);
        assert_eq!(
            (i.bindings[0].kind, i.bindings[0].element, i.bindings[0].written),
            (BindingKind::StorageRead, Scalar::F32, false)
        );
        assert_eq!(
            (i.bindings[1].element, i.bindings[1].components, i.bindings[1].min_bytes),
            (Scalar::F32, 4, 16)
        );
        assert!(i.bindings[1].written && i.bindings[1].runtime_sized);
        let im = i.immediates.as_ref().unwrap();
        assert_eq!(
            (im.size, im.fields.len(), im.fields[1].name.as_str(), im.fields[1].offset),
            (8, 2, "scale", 4)
        );
        let opts = CompileOptions { overrides: vec![("block".into(), 128.0)], ..Default::default() };
        assert_eq!(Shader::compile("add.wgsl", ADD, &opts).unwrap().interface().workgroup_size, [128, 1, 1]);
        assert!(format!("{i}").contains("@binding(1) var<storage, read_write> dst"));
    }

    #[test]
    fn errors_carry_line_and_column() {
        let e = Shader::compile(
            "bad.wgsl",
            "@compute @workgroup_size(1)\nfn f() { let x = 1 +; }",
            &Default::default(),
        )
        .unwrap_err();
        assert_eq!((e.line, e.column), (Some(2), Some(21)), "{e}");
        assert!(e.rendered.contains("bad.wgsl:2:21"), "{e}");
        let bad_override = CompileOptions { overrides: vec![("block".into(), 2.5)], ..Default::default() };
        assert!(Shader::compile("add.wgsl", ADD, &bad_override).unwrap_err().message.contains("integer"));
        let gap = ADD.replace("@binding(1)", "@binding(2)");
        assert!(Shader::compile("gap.wgsl", &gap, &Default::default())
            .unwrap_err()
            .message
            .contains("@binding(1) is missing"));
        let big = "var<immediate> p: array<u32, 100>;\n@compute @workgroup_size(1) fn f() { _ = p[0]; }";
        assert!(Shader::compile("big.wgsl", big, &Default::default())
            .unwrap_err()
            .message
            .contains("at most 256"));
        // A naga panic found by its fuzzers (wgpu#10266) is an error, not a panic.
        let panics = "fn g(p: ptr<function, i32>) {}\n@compute @workgroup_size(1) fn f() { var v: array<array<array<i32, 2>, 2>, 2>; let i = 1; g(&v[i][0][i]); }";
        assert!(Shader::compile("panic.wgsl", panics, &Default::default()).is_err());
    }
}
