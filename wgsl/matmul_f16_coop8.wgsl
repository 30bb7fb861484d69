// matmul_f16_coop8: the prompt's f16 product on matrix units of 8 × 8 × 8 tiles
// (f16 into f32), as Mesa's lavapipe offers them (where the tests run it): see
// wgsl/include/matmul_coop.wgsl.

enable f16;
enable wgpu_cooperative_matrix;

alias TileA = coop_mat8x8<f16, A>;
alias TileB = coop_mat8x8<f16, B>;
alias TileC = coop_mat8x8<f32, C>;
const UNIT: u32 = 8u;

// #include "matmul_coop.wgsl"

@compute @workgroup_size(128)
fn matmul_f16_coop8(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(subgroup_id) subgroup: u32,
    @builtin(num_subgroups) subgroups: u32,
) {
    matmul_coop(wid, subgroup, subgroups);
}

