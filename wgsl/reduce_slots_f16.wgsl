// reduce_slots_f16: phase B of the all-reduce for the f16 wire: as reduce_slots_f32, with each
// slot holding packed f16 pairs (word w = elements 2w, 2w+1); sums are f32, in member order.
// `stride` and `offset` count 32-bit words. The member's own term comes from its tensor,
// converted to the wire format exactly as phase A did.

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

@group(0) @binding(0) var<storage, read> slots: array<u32>;
@group(0) @binding(1) var<storage, read_write> dst: array<f32>;
var<immediate> p: Params;

const F16_MAX: f32 = 65504.0;

// A copy of convert_f16.wgsl's conversion (WGSL has no includes): it must stay identical, so
// that the own term equals the bits phase A put in the slot. tests/allreduce.rs checks every
// member's result bitwise against the others on the f16 wire, which fails if they diverge.
fn to_f16_bits(v: f32) -> u32 {
    let bits = bitcast<u32>(v);
    if ((bits & 0x7fffffffu) > 0x7f800000u) {
        return 0x7e00u | ((bits >> 16u) & 0x8000u);
    }
    return pack2x16float(vec2<f32>(clamp(v, -F16_MAX, F16_MAX), 0.0)) & 0xffffu;
}

@compute @workgroup_size(256)
fn reduce_slots_f16(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let words = (p.n + 1u) / 2u;
    let stride = nwg.x * 256u;
    for (var w = gid.x; w < words; w += stride) {
        let e = 2u * w;
        // The member's own wire word, converted exactly as phase A did (convert_f16.wgsl).
        var hi_src = 0.0;
        if (e + 1u < p.n) {
            hi_src = dst[p.dst_offset + e + 1u];
        }
        let own = to_f16_bits(dst[p.dst_offset + e]) | (to_f16_bits(hi_src) << 16u);
        var acc = unpack2x16float(select(slots[p.offset + w], own, p.self_index == 0u));
        for (var j = 1u; j < p.members; j++) {
            acc += unpack2x16float(select(slots[j * p.stride + p.offset + w], own, j == p.self_index));
        }
        dst[p.dst_offset + e] = acc.x;
        if (e + 1u < p.n) {
            dst[p.dst_offset + e + 1u] = acc.y;
        }
    }
}
