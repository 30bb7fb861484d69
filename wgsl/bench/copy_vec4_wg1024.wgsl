// copy_vec4_wg1024: copy_vec4 with workgroups of 1024 threads (the search of the device-local copy
// bound, `crossgpu bench limits`): dst[i] = src[i] for i < n over 16-byte vectors.

struct CopyVec4Params {
    n: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<storage, read> src: array<vec4<u32>>;
@group(0) @binding(1) var<storage, read_write> dst: array<vec4<u32>>;
var<immediate> p: CopyVec4Params;

@compute @workgroup_size(1024)
fn copy_vec4_wg1024(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let stride = nwg.x * 1024u;
    for (var i = gid.x; i < p.n; i += stride) {
        dst[i] = src[i];
    }
}
