// matvec_f16_rows8_x4_t2_add_rmsnorm: matvec_f16_vec8_rows8_x4_t2's product added into the
// residual stream (y += W x, matvec_accumulate's bits), then the stream's RMSNorm by the
// workgroup that finishes last (wgsl/include/matvec_norm_last.wgsl): `matvec_accumulate` then
// `add_rmsnorm`'s bits in one dispatch. The decoder's output projections on one member from
// 8192 columns (`down`). cols % 8 == 0.

const ROWS_PER_THREAD: u32 = 2u;
const UNROLL: u32 = 4u;
const NORM_IN_HALVES: bool = true;
alias MatvecImmediates = MatvecNormParams;

// #include "matvec_f16_group.wgsl"
// #include "matvec_f16_rows_shared_x.wgsl"
// #include "norm_tail.wgsl"
// #include "norm_scale.wgsl"
// #include "matvec_norm_last.wgsl"

@compute @workgroup_size(128)
fn matvec_f16_rows8_x4_t2_add_rmsnorm(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    matvec_rows_shared_x(wid, nwg, lid);
    norm_by_last(nwg, lid);
}
