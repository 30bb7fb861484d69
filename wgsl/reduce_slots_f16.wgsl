// reduce_slots_f16: phase B of the all-reduce for the f16 wire: as reduce_slots_f32, with each
// slot holding packed f16 pairs (word w = elements 2w, 2w+1); sums are f32, in member order.
// `stride` and `offset` count 32-bit words.

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

@group(0) @binding(0) var<storage, read> slots: array<u32>;
@group(0) @binding(1) var<storage, read_write> dst: array<f32>;
var<immediate> p: Params;

@compute @workgroup_size(256)
fn reduce_slots_f16(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let words = (p.n + 1u) / 2u;
    let stride = nwg.x * 256u;
    for (var w = gid.x; w < words; w += stride) {
        var acc = unpack2x16float(slots[p.offset + w]);
        for (var j = 1u; j < p.members; j++) {
            acc += unpack2x16float(slots[j * p.stride + p.offset + w]);
        }
        let e = 2u * w;
        dst[p.dst_offset + e] = acc.x;
        if (e + 1u < p.n) {
            dst[p.dst_offset + e + 1u] = acc.y;
        }
    }
}
