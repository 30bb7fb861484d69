//! WGSL compiled by naga into SPIR-V that the driver can be given: the only way a [`Shader`]
//! comes to exist, so [`crate::Kernel::new`] can make a pipeline from one in safe code.
//!
//! What makes the SPIR-V safe to run, whatever the WGSL and whatever a dispatch passes:
//! - naga parsed and validated the module (`ValidationFlags::all()`) and wrote the SPIR-V
//!   itself; nothing else reaches `vkCreateShaderModule`.
//! - Every access to a buffer or an array is bounds-checked in the SPIR-V (naga's `Restrict`
//!   policy, as wgpu uses it: an index past the end reads or writes the last element), except
//!   buffer accesses on a device with robustBufferAccess2, which keeps them inside the bound
//!   range itself (the variant [`Shader::spirv_for`] gives it, as wgpu-hal does), and
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

// The files: `compile.rs`, naga's front end, validation, overrides and SPIR-V output, on a
// thread of its own; `reflect.rs`, the interface read from the compiled module; `error.rs`,
// the error with its place in the source.

mod compile;
mod error;
mod reflect;

use std::sync::Arc;

use compile::Spirv;
pub use compile::{CompileOptions, MAX_IMMEDIATE_BYTES, MAX_SOURCE_BYTES};
pub use error::ShaderError;
pub use reflect::{Binding, BindingKind, ImmediateField, Immediates, Interface, Scalar};

struct ShaderInner {
    label: String,
    words: Spirv,
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
        let (words, interface) = compile::run(label, source, options)?;
        Ok(Shader(Arc::new(ShaderInner { label: label.to_string(), words, interface })))
    }

    /// The label it was compiled with.
    pub fn label(&self) -> &str {
        &self.0.label
    }

    /// Its interface (bindings, immediates, workgroup size).
    pub fn interface(&self) -> &Interface {
        &self.0.interface
    }

    /// The SPIR-V words, as `vkCreateShaderModule` takes them: every access bounds-checked.
    pub fn spirv(&self) -> &[u32] {
        &self.0.words.checked
    }

    /// The SPIR-V for a device: where it has robustBufferAccess2 enabled (`robust`), buffer
    /// accesses are left to the device, which keeps them inside the bound range; every other
    /// access is checked as in [`Shader::spirv`].
    pub fn spirv_for(&self, robust_buffer_access2: bool) -> &[u32] {
        match robust_buffer_access2 {
            true => &self.0.words.robust,
            false => &self.0.words.checked,
        }
    }
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

    /// A kernel with `dot4I8Packed` says so (naga declares SPIR-V's DotProduct capability for
    /// it), so a device without `shaderIntegerDotProduct` refuses it; one without does not.
    #[test]
    fn integer_dot_products_are_reflected() {
        let dot = "@group(0) @binding(0) var<storage, read_write> v: array<u32>;\n@compute @workgroup_size(1) fn f() { v[0] = bitcast<u32>(dot4I8Packed(v[1], v[2])); }";
        let s = Shader::compile("dot.wgsl", dot, &CompileOptions::default()).unwrap();
        assert!(s.interface().uses_integer_dot_product);
        let s = Shader::compile("add.wgsl", ADD, &CompileOptions::default()).unwrap();
        assert!(!s.interface().uses_integer_dot_product);
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
