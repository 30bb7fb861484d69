// matvec_gate_up_silu_x2: matvec_gate_up_silu's result (its bits) from workgroups of 128 threads, 2
// rows each, a thread computing gate and up of its row and loading x once for both
// (include/matvec_gate_up_silu_shared_x.wgsl).

const ROWS: u32 = 2u;
// #include "matvec_gate_up_silu_shared_x.wgsl"

@compute @workgroup_size(128)
fn matvec_gate_up_silu_x2(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    gate_up_silu_shared_x(wid, nwg, lid);
}
