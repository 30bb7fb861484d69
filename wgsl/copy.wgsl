// copy_u32: dst[dst_offset + i] = src[src_offset + i] for i < n, over 32-bit words.

struct CopyParams {
    n: u32,
    src_offset: u32,
    dst_offset: u32,
    _pad: u32,
}

@group(0) @binding(0) var<storage, read> src: array<u32>;
@group(0) @binding(1) var<storage, read_write> dst: array<u32>;
var<immediate> p: CopyParams;

@compute @workgroup_size(256)
fn copy_u32(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let stride = nwg.x * 256u;
    for (var i = gid.x; i < p.n; i += stride) {
        dst[p.dst_offset + i] = src[p.src_offset + i];
    }
}
