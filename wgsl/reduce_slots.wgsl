// reduce_slots_f32: phase B of the all-reduce for the f32 wire. dst[dst_offset + i] = the sum
// over members j = 0..members-1, in that order, of slots[j * stride + offset + i], read straight
// from the imported host memory (the binding covers the slots of the round's half). The
// member's own term is taken from its tensor instead (the same bits it copied into its slot in
// phase A), so each member reads N-1 slots, not N, over the bus. Every device runs the same additions in the same order on the same
// wire values (its own included), so every device ends with bitwise the same sum.

struct Params {
    n: u32,
    members: u32,
    stride: u32,
    offset: u32,
    dst_offset: u32,
    self_index: u32,
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
        let own = dst[p.dst_offset + i];
        var acc = select(slots[p.offset + i], own, p.self_index == 0u);
        for (var j = 1u; j < p.members; j++) {
            acc += select(slots[j * p.stride + p.offset + i], own, j == p.self_index);
        }
        dst[p.dst_offset + i] = acc;
    }
}
