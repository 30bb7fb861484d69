// The bindings of the quantized matrix–vector kernels that take x in f32
// (wgsl/include/matvec_quant.wgsl, matvec_quant_wide.wgsl): W is the GGUF tensor's bytes as
// stored, x f32 as vec4s, y f32; and the reading of ggml blocks held as u32 words.

@group(0) @binding(0) var<storage, read> w: array<u32>;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
var<immediate> p: MatvecParams;
// #include "matvec_store.wgsl"
// #include "ggml_words.wgsl"

// The contiguous x of a unit: elements UNIT·u .. UNIT·(u + 1) (the includer sets UNIT_X and
// XUnit, wgsl/include/matvec_quant.wgsl).
fn load_x_run(u: u32, xs: ptr<function, XUnit>) {
    for (var i = 0u; i < UNIT_X; i++) {
        (*xs)[i] = x[UNIT_X * u + i];
    }
}
