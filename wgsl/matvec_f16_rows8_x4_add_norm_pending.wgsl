// matvec_f16_rows8_x4_add_norm_pending: matvec_f16_vec8_rows8_x4's product added into the
// residual stream (its bits, as matvec_accumulate stores them) with the next RMSNorm left
// pending: y * nw and each workgroup's sum of squares (wgsl/include/matvec_add_norm_pending.wgsl).
// The decoder's output projections on one member with its norms folded
// (`Decoder::set_fold_norms`). cols % 8 == 0.

const ROWS: u32 = 8u;
const PAIRED: bool = true;
const UNROLL: u32 = 4u;

// #include "matvec_f16_rows.wgsl"
// #include "matvec_f16_group.wgsl"
// #include "matvec_add_norm_pending.wgsl"

@compute @workgroup_size(256)
fn matvec_f16_rows8_x4_add_norm_pending(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    add_norm_pending(wid, nwg, lid);
}
