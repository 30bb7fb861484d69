// matmul_f16_coop16: the prompt's f16 product on matrix units of 16 × 16 × 16 tiles
// (f16 into f32), as NVIDIA offers them: see
// wgsl/include/matmul_coop.wgsl.

enable f16;
enable wgpu_cooperative_matrix;

alias TileA = coop_mat16x16<f16, A>;
alias TileB = coop_mat16x16<f16, B>;
alias TileC = coop_mat16x16<f32, C>;
const UNIT: u32 = 16u;

// #include "matmul_coop.wgsl"

@compute @workgroup_size(128)
fn matmul_f16_coop16(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(subgroup_id) subgroup: u32,
    @builtin(num_subgroups) subgroups: u32,
) {
    matmul_coop(wid, subgroup, subgroups);
}

