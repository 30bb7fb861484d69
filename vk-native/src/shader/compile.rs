//! WGSL compiled by naga into SPIR-V: parsed, validated (`ValidationFlags::all()`), the
//! overrides applied, and written with every buffer and array access bounds-checked (naga's
//! `Restrict` policy). naga 30 panics on some inputs that pass validation, and its lowering
//! recurses without a limit on long flat expressions: compiling runs on a thread of its own with
//! a 256 MiB stack, a panic there is an error, and a source is at most [`MAX_SOURCE_BYTES`] bytes.

use naga::valid::{Capabilities, ValidationFlags, Validator};

use super::error::ShaderError;
use super::reflect::{self, Interface};

/// The largest WGSL source [`Shader::compile`] takes.
///
/// [`Shader::compile`]: super::Shader::compile
pub const MAX_SOURCE_BYTES: usize = 256 << 10;
/// The largest `var<immediate>` block a kernel may have (naga 30's analysis counts its words in
/// a 64-bit mask; devices allow at least 128 bytes, see `maxPushConstantsSize`).
pub const MAX_IMMEDIATE_BYTES: u32 = 256;
const COMPILER_STACK: usize = 256 << 20;

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
    /// Allow `enable wgpu_cooperative_matrix;` (16 × 16 f16 matrices multiplied into f32 by a
    /// subgroup: `coopLoad`, `coopMultiplyAdd`, `coopStore`) and the subgroup built-ins
    /// (`subgroup_id`, `num_subgroups`, …); implies `shader_f16`. The kernel then runs only on
    /// members whose device has `Capabilities::cooperative_matrix_sides`.
    pub cooperative_matrix: bool,
}

/// Compiles `source` (labelled `label` in messages) with `options` on a compiler thread of its
/// own: a source past [`MAX_SOURCE_BYTES`] or a panic inside naga is a [`ShaderError`]. Returns
/// the SPIR-V words and the interface.
/// A shader's SPIR-V, in the two bounds-check variants (see [`super::Shader::spirv_for`]).
pub(super) struct Spirv {
    /// Every buffer and array access clamped (naga's `Restrict`).
    pub(super) checked: Vec<u32>,
    /// Buffer accesses left to the device's robustBufferAccess2; other arrays clamped.
    pub(super) robust: Vec<u32>,
}

pub(super) fn run(
    label: &str,
    source: &str,
    options: &CompileOptions,
) -> Result<(Spirv, Interface), ShaderError> {
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

/// The capabilities kernels may use: immediates and f16 packing always, f16 arithmetic where
/// the device has it.
fn capabilities(options: &CompileOptions) -> Capabilities {
    let mut caps = Capabilities::IMMEDIATES | Capabilities::SHADER_FLOAT16_IN_FLOAT32;
    if options.shader_f16 || options.cooperative_matrix {
        caps |= Capabilities::SHADER_FLOAT16;
    }
    if options.cooperative_matrix {
        caps |= Capabilities::COOPERATIVE_MATRIX | Capabilities::SUBGROUP;
    }
    caps
}

fn compile(label: &str, src: &str, options: &CompileOptions) -> Result<(Spirv, Interface), ShaderError> {
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
    let (bindings, immediates) = reflect::bindings(label, &module, uses)?;
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
    // Every access bounds-checked (`checked`), and a variant for devices with
    // robustBufferAccess2 (`robust`), where the device itself keeps a buffer access inside the
    // bound range (reads past it give zeros, writes are dropped), so naga checks only the
    // accesses to arrays outside buffers: wgpu-hal's choice for the same devices, and one that
    // leaves the matrix-vector products' loads unclamped.
    let write = |buffer: naga::proc::BoundsCheckPolicy| {
        let restrict = naga::proc::BoundsCheckPolicy::Restrict;
        let spv_options = naga::back::spv::Options {
            // Cooperative matrices need the Vulkan memory model, core in SPIR-V 1.5 (Vulkan
            // 1.2, which every device with them has).
            lang_version: if options.cooperative_matrix { (1, 5) } else { (1, 3) },
            flags: naga::back::spv::WriterFlags::empty(),
            bounds_check_policies: naga::proc::BoundsCheckPolicies {
                index: restrict,
                buffer,
                image_load: restrict,
                binding_array: restrict,
            },
            use_storage_input_output_16: false,
            ..Default::default()
        };
        naga::back::spv::write_vec(
            &processed,
            &processed_info,
            &spv_options,
            Some(&naga::back::spv::PipelineOptions {
                shader_stage: naga::ShaderStage::Compute,
                entry_point: entry.clone(),
            }),
        )
        .map_err(|e| ShaderError::plain(label, format!("SPIR-V output failed: {e}")))
    };
    let words = Spirv {
        checked: write(naga::proc::BoundsCheckPolicy::Restrict)?,
        robust: write(naga::proc::BoundsCheckPolicy::Unchecked)?,
    };
    let uses_cooperative_matrix = options.cooperative_matrix;
    let uses_integer_dot_product = declares_capability(&words.checked, SPIRV_DOT_PRODUCT);
    // Each cooperative matrix type as (side, role, scalar), for the device check.
    let cooperative_matrices = processed
        .types
        .iter()
        .filter_map(|(_, t)| match t.inner {
            naga::TypeInner::CooperativeMatrix { columns, rows, scalar, role } => {
                let side = if columns == rows { columns as u32 } else { 0 };
                let role = match role {
                    naga::CooperativeRole::A => 'A',
                    naga::CooperativeRole::B => 'B',
                    naga::CooperativeRole::C => 'C',
                };
                let scalar = match scalar {
                    naga::Scalar::F16 => "f16",
                    naga::Scalar::F32 => "f32",
                    _ => "another type",
                };
                Some((side, role, scalar))
            }
            _ => None,
        })
        .collect();
    Ok((
        words,
        Interface {
            entry,
            workgroup_size,
            bindings,
            immediates,
            workgroup_bytes,
            uses_f16,
            uses_cooperative_matrix,
            cooperative_matrices,
            uses_integer_dot_product,
        },
    ))
}

/// SPIR-V's `DotProduct` capability (SPV_KHR_integer_dot_product, core in 1.6), which naga
/// declares for `dot4I8Packed` and `dot4U8Packed`.
const SPIRV_DOT_PRODUCT: u32 = 6019;

/// Whether the module `words` declares capability `cap` (an `OpCapability`, opcode 17, two
/// words, in the header's run of them after the five-word header).
fn declares_capability(words: &[u32], cap: u32) -> bool {
    const OP_CAPABILITY: u32 = (2 << 16) | 17;
    let mut at = 5;
    while let Some(&first) = words.get(at) {
        let len = (first >> 16) as usize;
        if first & 0xffff != 17 {
            return false;
        }
        if first == OP_CAPABILITY && words.get(at + 1) == Some(&cap) {
            return true;
        }
        at += len.max(1);
    }
    false
}
