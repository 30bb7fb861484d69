// silu_mul: a[i] = silu(gate[i]) * up[i] = gate / (1 + exp(-gate)) * up, for i < n.

struct SiluMulParams {
    n: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<storage, read> gate: array<f32>;
@group(0) @binding(1) var<storage, read> up: array<f32>;
@group(0) @binding(2) var<storage, read_write> a: array<f32>;
var<immediate> p: SiluMulParams;

@compute @workgroup_size(256)
fn silu_mul(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let stride = nwg.x * 256u;
    for (var i = gid.x; i < p.n; i += stride) {
        let g = gate[i];
        a[i] = g / (1.0 + exp(-g)) * up[i];
    }
}
