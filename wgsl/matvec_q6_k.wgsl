// matvec_q6_k: y = W x for W in ggml's Q6_K (see wgsl/include/matvec_quant.wgsl for the
// structure). A super-block is 256 elements in 210 bytes: ql (128 bytes, low 4 bits) at 0, qh
// (64 bytes, high 2 bits) at 128, scales (16 × i8, one per 16 elements) at 192, d (f16) at 208.
// Two halves of 128; half n uses ql[64n ..], qh[32n ..], scales[8n ..]. For l < 32 with
// h = qh[l]: element l is ql[l] & 15 | (h & 3) << 4, element l + 32 is ql[l + 32] & 15 |
// (h >> 2 & 3) << 4, element l + 64 is ql[l] >> 4 | (h >> 4 & 3) << 4, element l + 96 is
// ql[l + 32] >> 4 | (h >> 6) << 4; each minus 32, times d times the scale of its 16.
//
// The unit of work is 64 elements, (half n, t = 0 or 1): elements 32t + l and 64 + 32t + l of
// the half, the low and high nibbles of ql[32t + l] with qh[l]'s bits 2t and 4 + 2t, so a unit
// reads 8 ql words, 8 qh words, 2 scale words and d, and two runs of 8 vec4 of x. Super-block g
// starts at byte 210g, 2 mod 4 for odd g, where every field is then half a word off: each is
// funnelled out of the words from the one holding the super-block's byte 0 (`straddle`); the
// last word read ends at most 2 bytes past the block (an even one's), in the next or the
// padding. Two rows per workgroup.
//
// Each group of 16 sums Σ (q - 32)·x and multiplies by d·scale: d·scale and d·scale·q are exact
// in f32 (11 + 8 + 6 significant bits at most), so every term is an exact w·x product rounded
// along at most 1 + 15 + 1 + (cols/16 - 1) <= cols operations.

const ROWS: u32 = 2u;
const UNIT: u32 = 64u;
const UNIT_X: u32 = 16u;

alias XUnit = array<vec4<f32>, UNIT_X>;

const WG: u32 = 64u;

// #include "matvec_quant.wgsl"
// #include "matvec_quant_blocks.wgsl"
// #include "q6_k_chunk.wgsl"

@compute @workgroup_size(WG)
fn matvec_q6_k(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    matvec_quant(wid, nwg, lid);
}
