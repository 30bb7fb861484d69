// matvec_f16_vec8_rows8: eight rows per workgroup of 256: 32 threads per row. `matvec` uses it
// from 4096 columns, where it beats four rows per workgroup, four rows below, and its four-loads
// form (matvec_f16_vec8_rows8_x4) from 8192 (docs/BENCHMARKS.md, "Matrix–vector products").
// cols % 8 == 0.

const ROWS: u32 = 8u;
const PAIRED: bool = true;
const UNROLL: u32 = 1u;

// #include "matvec_f16_rows.wgsl"
// #include "matvec_f16_group.wgsl"

@compute @workgroup_size(256)
fn matvec_f16_vec8_rows8(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    matvec_rows(wid, nwg, lid);
}
