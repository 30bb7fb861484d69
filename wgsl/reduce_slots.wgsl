// reduce_slots_f32: phase B of the all-reduce for the f32 wire. dst[dst_offset + i] = the sum
// over members j = 0..members-1, in that order, of slots[j * stride + offset + i], read straight
// from the imported host memory (the binding covers the slots of the round's half). Every device runs the same additions in the same order on the same
// wire values (its own included), so every device ends with bitwise the same sum.

struct Params {
    n: u32,
    members: u32,
    stride: u32,
    offset: u32,
    dst_offset: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<storage, read> slots: array<f32>;
@group(0) @binding(1) var<storage, read_write> dst: array<f32>;
var<immediate> p: Params;

@compute @workgroup_size(256)
fn reduce_slots_f32(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let stride = nwg.x * 256u;
    for (var i = gid.x; i < p.n; i += stride) {
        var acc = slots[p.offset + i];
        for (var j = 1u; j < p.members; j++) {
            acc += slots[j * p.stride + p.offset + i];
        }
        dst[p.dst_offset + i] = acc;
    }
}
