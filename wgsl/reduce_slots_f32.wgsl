// reduce_slots_f32: phase B of the all-reduce for the f32 wire. dst[dst_offset + i] = the sum
// over members j = 0..members-1, in that order, of slots[j * stride + offset + i], read straight
// from the imported host memory (the binding covers the round's entry of the slots, or all of
// them, `offset` then locating the entry). The member's own term is taken from its tensor
// instead (the same bits it copied into its slot in phase A), and its own slot is not read:
// each member reads N-1 slots, not N, over the bus. Every device runs the same additions in the
// same order on the same wire values (its own included), so every device ends with bitwise the
// same sum.
//
// Slots are read as vec4 (16-byte loads). That needs `stride` and `offset` to be multiples of 4
// words and the binding to cover whole vec4s: the last vec4 of a slot may hold up to 3 words
// past n, read but never used.

struct ReduceSlotsParams {
    n: u32,
    members: u32,
    stride: u32,
    offset: u32,
    dst_offset: u32,
    self_index: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<storage, read> slots: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read_write> dst: array<f32>;
var<immediate> p: ReduceSlotsParams;

// #include "reduce_slots_f32_body.wgsl"

@compute @workgroup_size(256)
fn reduce_slots_f32(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    reduce_slots_f32_body(gid.x, nwg.x);
}
