// matvec_f16_vec8_rows8_t4: matvec_f16_vec8_rows8's products (its bits) with each of 64 threads
// working on 4 of the eight rows, loading x once for them. cols % 8 == 0.

const ROWS_PER_THREAD: u32 = 4u;
const UNROLL: u32 = 1u;

// #include "matvec_f16_group.wgsl"
// #include "matvec_f16_rows_shared_x.wgsl"

@compute @workgroup_size(64)
fn matvec_f16_vec8_rows8_t4(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    matvec_rows_shared_x(wid, nwg, lid);
}
