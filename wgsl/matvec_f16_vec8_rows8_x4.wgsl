// matvec_f16_vec8_rows8_x4: matvec_f16_vec8_rows8 with four weight loads in flight per thread,
// issued before the first is used (the same additions, so its bits). `matvec` uses it from 8192
// columns: the 27B-class decode's 17408-column `down` product took 54.5 µs against 57.7 on one
// H200, where a loop of one load at a time leaves the memory system short of requests
// (docs/BENCHMARKS.md, "Matrix–vector products"). cols % 8 == 0.

const ROWS: u32 = 8u;
const PAIRED: bool = true;
const UNROLL: u32 = 4u;

// #include "matvec_f16_rows.wgsl"
// #include "matvec_f16_group.wgsl"

@compute @workgroup_size(256)
fn matvec_f16_vec8_rows8_x4(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    matvec_rows(wid, nwg, lid);
}
