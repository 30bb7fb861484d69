//! A kernel's interface, read from the compiled module ([`Interface`]): what the pipeline layout
//! is made from — storage and uniform buffers of `@group(0)` at bindings `0..n`, at most one
//! `var<immediate>` block.

use naga::valid::GlobalUse;

use super::error::ShaderError;

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
    /// Whether the kernel was compiled with cooperative matrices and subgroups allowed
    /// (`CompileOptions::cooperative_matrix`): it runs only where the device has them.
    pub uses_cooperative_matrix: bool,
    /// Its cooperative matrix types as (side, 0 where not square; role `A`, `B` or `C`; its
    /// elements: `f16`, `f32` or `another type`).
    pub cooperative_matrices: Vec<(u32, char, &'static str)>,
    /// Whether its SPIR-V declares the integer dot product capability (`dot4I8Packed`,
    /// `dot4U8Packed`): it runs only where the device has `shaderIntegerDotProduct`.
    pub uses_integer_dot_product: bool,
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

/// The buffer bindings of `module` (in binding order) and its `var<immediate>` block, for the
/// entry point whose `uses` are given. Refuses an interface crossgpu cannot bind (other groups,
/// textures, a gap in the binding numbers).
pub(super) fn bindings(
    label: &str,
    module: &naga::Module,
    uses: &naga::valid::FunctionInfo,
) -> Result<(Vec<Binding>, Option<Immediates>), ShaderError> {
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
                    immediates = Some(immediate_block(module, &name, var.ty));
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
        let (element, components, runtime_sized) = element_of(module, var.ty);
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
            type_name: type_name(module, var.ty),
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
    Ok((bindings, immediates))
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
