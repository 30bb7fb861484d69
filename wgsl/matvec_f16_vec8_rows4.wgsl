// matvec_f16_vec8_rows4: four rows per workgroup of 256: 64 threads per row, so each thread
// does four times the 16-byte weight loads of the one-row kernel (which gives every thread only
// 2.5 loads for 5120 columns) and the tree reduction is 6 steps, not 8. The fused q/k/v and
// gate/up kernels add in its order, so they give its bits. cols % 8 == 0.

const ROWS: u32 = 4u;
const PAIRED: bool = false;
const UNROLL: u32 = 1u;

// #include "matvec_f16_rows.wgsl"
// #include "matvec_f16_group.wgsl"

@compute @workgroup_size(256)
fn matvec_f16_vec8_rows4(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    matvec_rows(wid, nwg, lid);
}
