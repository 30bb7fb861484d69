// matvec_f16_rows8_add_rmsnorm: matvec_f16_vec8_rows8's product added into the residual stream
// (y += W x, matvec_accumulate's bits), then the stream's RMSNorm by the workgroup that
// finishes last (wgsl/include/matvec_norm_last.wgsl): `matvec_accumulate` then `add_rmsnorm`'s
// bits in one dispatch. The decoder's output projections on one member from 4096 to 8191 columns.
// cols % 8 == 0.

const ROWS: u32 = 8u;
const PAIRED: bool = true;
const UNROLL: u32 = 1u;
const NORM_IN_HALVES: bool = false;
alias MatvecImmediates = MatvecNormParams;

// #include "matvec_f16_rows.wgsl"
// #include "matvec_f16_group.wgsl"
// #include "norm_tail.wgsl"
// #include "norm_scale.wgsl"
// #include "matvec_norm_last.wgsl"

@compute @workgroup_size(256)
fn matvec_f16_rows8_add_rmsnorm(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    matvec_rows(wid, nwg, lid);
    norm_by_last(nwg, lid);
}
