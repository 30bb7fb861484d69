//! ggml's tensor types: their numeric ids, block layouts and sizes, and the CPU reference
//! dequantization of the types crossgpu computes with.
//!
//! A ggml tensor row is a sequence of *blocks*; each block holds [`GgmlType::block_elems`]
//! elements in [`GgmlType::block_bytes`] bytes, so a row length must be a whole number of blocks.
//! All multi-byte fields are little-endian, and `f16` is IEEE binary16.
//!
//! [`dequantize`] follows ggml's `dequantize_row_*` (ggml-quants.c) operation for operation, in
//! the same order, so it gives the same `f32` values as ggml (a C compiler that fuses `a*b + c`
//! into one FMA can differ in the last bit for Q4_1 and Q4_K). It is the reference the GPU
//! kernels are checked against. [`quantize_reference`] follows ggml's `quantize_row_*_ref` for
//! Q8_0, Q4_0 and Q4_1, so tests can write quantized model files.
//!
//! Block layouts, byte offsets within one block (from ggml-common.h):
//!
//! - `F32`, `F16`, `BF16`: one element per "block" (4, 2, 2 bytes); `BF16` is the top half of
//!   an `f32`.
//! - `Q8_0`, 32 elements in 34 bytes: `d: f16` at 0, `qs: [i8; 32]` at 2; element `j` is
//!   `qs[j] * d`.
//! - `Q4_0`, 32 elements in 18 bytes: `d: f16` at 0, `qs: [u8; 16]` at 2; element `j < 16` is the
//!   low nibble of `qs[j]`, element `j + 16` its high nibble; value `(q - 8) * d`.
//! - `Q4_1`, 32 elements in 20 bytes: `d: f16` at 0, `m: f16` at 2, `qs: [u8; 16]` at 4, nibbles
//!   ordered as in `Q4_0`; value `q * d + m`.
//! - `Q4_K`, 256 elements in 144 bytes: `d: f16` at 0, `dmin: f16` at 2, `scales: [u8; 12]` at 4,
//!   `qs: [u8; 128]` at 16. Eight sub-blocks of 32 elements, each with a 6-bit scale `sc` and a
//!   6-bit min `m` packed in `scales` (see `scale_min_k4`). Elements come in four chunks of 64:
//!   chunk `c` takes `qs[32c..32c + 32]`, its low nibbles are elements `64c..64c + 32` (sub-block
//!   `2c`), its high nibbles elements `64c + 32..64c + 64` (sub-block `2c + 1`); value
//!   `d * sc * q - dmin * m`.
//! - `Q6_K`, 256 elements in 210 bytes: `ql: [u8; 128]` at 0 (low 4 bits), `qh: [u8; 64]` at 128
//!   (high 2 bits), `scales: [i8; 16]` at 192 (one per 16 elements), `d: f16` at 208. Two halves
//!   of 128 elements; half `n` uses `ql[64n..]`, `qh[32n..]`, `scales[8n..]`. For `l < 32`, with
//!   `h = qh[l]`: element `l` is `ql[l] & 15 | (h & 3) << 4`, element `l + 32` is
//!   `ql[l + 32] & 15 | (h >> 2 & 3) << 4`, element `l + 64` is `ql[l] >> 4 | (h >> 4 & 3) << 4`,
//!   element `l + 96` is `ql[l + 32] >> 4 | (h >> 6) << 4`; each minus 32, times `d` times the
//!   scale of its group of 16 (`scales[e / 16]` for element `e` of the half).
//!
//! The other types are known (so a file holding them opens and names them) but not dequantized:
//! `Q5_0` (22 bytes: `d`, `qh: u32`, `qs: [u8; 16]`), `Q5_1` (24: `d`, `m`, `qh`, `qs`), `Q8_1`
//! (36: `d`, `s`, `qs: [i8; 32]`), `Q2_K` (84), `Q3_K` (110), `Q5_K` (176), `Q8_K` (292: `d: f32`,
//! `qs: [i8; 256]`, `bsums: [i16; 16]`), the `IQ*` and `TQ*` codebook types, `MXFP4`, and the
//! integer and `F64` element types.

mod dequant;
mod ggml_type;
mod quantize;

pub use dequant::dequantize;
pub use ggml_type::{supported_type_names, GgmlType, SUPPORTED_TYPES};
pub use quantize::quantize_reference;

#[cfg(test)]
mod tests;
