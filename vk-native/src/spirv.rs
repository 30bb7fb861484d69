//! What Vulkan requires of a compute pipeline's SPIR-V, checked before any Vulkan call sees it:
//! `vkCreateShaderModule` and `vkCreateComputePipelines` take invalid SPIR-V, or a module whose
//! resources the pipeline layout does not provide, as undefined behaviour. [`check`] parses
//! and validates the module with naga and compares its interface with the layout the caller
//! declares; each distinct input is checked once per process.

use std::collections::HashSet;
use std::sync::{Mutex, OnceLock};

use crate::error::{NativeError, Result};

/// Checks that `spirv` is a valid module (naga parses and validates it, using nothing beyond
/// immediates and f16 packing) with a compute entry point `entry`, whose resources are storage
/// buffers at set 0, bindings `0..read_only.len()` (never writing one declared read-only:
/// the hazard tracking relies on it), and at most `immediate_bytes` of push constants.
pub(crate) fn check(spirv: &[u32], entry: &str, read_only: &[bool], immediate_bytes: u32) -> Result<()> {
    type Key = (Vec<u32>, String, Vec<bool>, u32);
    static CHECKED: OnceLock<Mutex<HashSet<Key>>> = OnceLock::new();
    let key: Key = (spirv.to_vec(), entry.to_string(), read_only.to_vec(), immediate_bytes);
    let checked = CHECKED.get_or_init(|| Mutex::new(HashSet::new()));
    if checked.lock().unwrap_or_else(|p| p.into_inner()).contains(&key) {
        return Ok(());
    }
    check_uncached(spirv, entry, read_only, immediate_bytes)?;
    checked.lock().unwrap_or_else(|p| p.into_inner()).insert(key);
    Ok(())
}

fn check_uncached(spirv: &[u32], entry: &str, read_only: &[bool], immediate_bytes: u32) -> Result<()> {
    use naga::{AddressSpace, ShaderStage, StorageAccess};
    let bad = |why: String| Err(NativeError::Unsupported(format!("kernel {entry}: {why}")));
    let module = match naga::front::spv::Frontend::new(spirv.iter().copied(), &Default::default()).parse() {
        Ok(m) => m,
        Err(e) => return bad(format!("not a SPIR-V module naga can read: {e}")),
    };
    let caps = naga::valid::Capabilities::IMMEDIATES | naga::valid::Capabilities::SHADER_FLOAT16_IN_FLOAT32;
    if let Err(e) = naga::valid::Validator::new(naga::valid::ValidationFlags::all(), caps).validate(&module) {
        return bad(format!("the SPIR-V module is not valid: {}", e.as_inner()));
    }
    if !module.entry_points.iter().any(|ep| ep.name == entry && ep.stage == ShaderStage::Compute) {
        return bad("no compute entry point of that name in the module".into());
    }
    for (_, var) in module.global_variables.iter() {
        match var.space {
            AddressSpace::Storage { access } => {
                let Some(b) = &var.binding else { return bad("a storage buffer without a binding".into()) };
                if b.group != 0 || b.binding as usize >= read_only.len() {
                    return bad(format!(
                        "binds set {} binding {}; the layout has set 0, bindings 0..{}",
                        b.group,
                        b.binding,
                        read_only.len()
                    ));
                }
                if read_only[b.binding as usize] && access.contains(StorageAccess::STORE) {
                    return bad(format!("writes binding {}, which the layout declares read-only", b.binding));
                }
            }
            AddressSpace::Immediate => {
                let size = module.types[var.ty].inner.size(module.to_ctx());
                if size > immediate_bytes {
                    return bad(format!(
                        "takes {size} bytes of immediates; the layout has {immediate_bytes}"
                    ));
                }
            }
            AddressSpace::Function | AddressSpace::Private | AddressSpace::WorkGroup => {}
            other => return bad(format!("uses a {other:?} resource; kernels bind storage buffers only")),
        }
    }
    Ok(())
}
