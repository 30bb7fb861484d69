// copy_vec4: dst[i] = src[i] for i < n, over 16-byte vectors: the device-local bandwidth
// reference of the benchmarks (vkCmdCopyBuffer reaches far less than the HBM on the H200).

struct CopyVec4Params {
    n: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<storage, read> src: array<vec4<u32>>;
@group(0) @binding(1) var<storage, read_write> dst: array<vec4<u32>>;
var<immediate> p: CopyVec4Params;

@compute @workgroup_size(256)
fn copy_vec4(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let stride = nwg.x * 256u;
    for (var i = gid.x; i < p.n; i += stride) {
        dst[i] = src[i];
    }
}
