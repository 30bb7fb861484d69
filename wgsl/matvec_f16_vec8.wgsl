// matvec_f16_vec8: the matvec_f16 fast path for cols % 8 == 0, one row per workgroup of 256
// (kept as the benchmark's reference for the kernels below).

const ROWS: u32 = 1u;
const PAIRED: bool = false;
const UNROLL: u32 = 1u;

// #include "matvec_f16_rows.wgsl"
// #include "matvec_f16_group.wgsl"

@compute @workgroup_size(256)
fn matvec_f16_vec8(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    matvec_rows(wid, nwg, lid);
}
