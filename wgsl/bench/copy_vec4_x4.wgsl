// copy_vec4_x4: dst[i] = src[i] for i < n over 16-byte vectors, as copy_vec4, but each thread
// issues four loads (64 bytes) before its four stores: more bytes in flight per thread, for the
// search of the device-local copy bound (`crossgpu bench limits`).

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
fn copy_vec4_x4(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let stride = nwg.x * 256u;
    var i = gid.x;
    while (i + 3u * stride < p.n) {
        let a = src[i];
        let b = src[i + stride];
        let c = src[i + 2u * stride];
        let d = src[i + 3u * stride];
        dst[i] = a;
        dst[i + stride] = b;
        dst[i + 2u * stride] = c;
        dst[i + 3u * stride] = d;
        i += 4u * stride;
    }
    while (i < p.n) {
        dst[i] = src[i];
        i += stride;
    }
}
