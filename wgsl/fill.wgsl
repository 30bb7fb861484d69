// fill_u32: dst[offset + i] = value for i < n, over 32-bit words. Fills f32 tensors with a bit
// pattern and packed-f16 tensors with the half repeated in both halves of each word.

struct FillParams {
    n: u32,
    value: u32,
    offset: u32,
    _pad: u32,
}

@group(0) @binding(0) var<storage, read_write> dst: array<u32>;
var<immediate> p: FillParams;

@compute @workgroup_size(256)
fn fill_u32(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let stride = nwg.x * 256u;
    for (var i = gid.x; i < p.n; i += stride) {
        dst[p.offset + i] = p.value;
    }
}
