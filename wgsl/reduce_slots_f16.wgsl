// reduce_slots_f16: phase B of the all-reduce for the f16 wire: as reduce_slots_f32, with each
// slot holding packed f16 pairs (word w = elements 2w, 2w+1); sums are f32, in member order.
// `stride` and `offset` count 32-bit words. The member's own term comes from its tensor,
// converted to the wire format exactly as phase A did, and its own slot is not read. Slots are
// read as vec4<u32> (8 elements per 16-byte load; see reduce_slots_f32.wgsl for why and for
// what that asks of `stride`, `offset` and the binding).

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

@group(0) @binding(0) var<storage, read> slots: array<vec4<u32>>;
@group(0) @binding(1) var<storage, read_write> dst: array<f32>;
var<immediate> p: ReduceSlotsParams;

const F16_MAX: f32 = 65504.0;

// A copy of convert_f16.wgsl's to_f16_bits (WGSL has no includes): the own term must be
// rounded exactly as phase A rounded it. The bitwise f16-wire tests catch any drift.
fn to_f16_bits(v: f32) -> u32 {
    let bits = bitcast<u32>(v);
    if ((bits & 0x7fffffffu) > 0x7f800000u) {
        return 0x7e00u | ((bits >> 16u) & 0x8000u);
    }
    return pack2x16float(vec2<f32>(clamp(v, -F16_MAX, F16_MAX), 0.0)) & 0xffffu;
}

// Element pairs of four packed words (8 elements): pair k holds elements 2k (.x) and 2k+1 (.y).
struct Pairs {
    a: vec2<f32>,
    b: vec2<f32>,
    c: vec2<f32>,
    d: vec2<f32>,
}

fn unpack_words(w: vec4<u32>) -> Pairs {
    return Pairs(unpack2x16float(w.x), unpack2x16float(w.y), unpack2x16float(w.z), unpack2x16float(w.w));
}

fn add_pairs(x: Pairs, y: Pairs) -> Pairs {
    return Pairs(x.a + y.a, x.b + y.b, x.c + y.c, x.d + y.d);
}

@compute @workgroup_size(256)
fn reduce_slots_f16(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let words = (p.n + 1u) / 2u;
    let quads = (words + 3u) / 4u;
    let step = nwg.x * 256u;
    for (var q = gid.x; q < quads; q += step) {
        let e = 8u * q;
        let base = p.dst_offset + e;
        let live = min(p.n - e, 8u);
        // The member's own wire words, converted exactly as phase A did (an odd tail pairs the
        // last element with 0.0, as f32_to_f16 does).
        var lo = vec4<f32>(0.0); // elements e, e+2, e+4, e+6
        var hi = vec4<f32>(0.0); // elements e+1, e+3, e+5, e+7
        if (live == 8u) {
            lo = vec4<f32>(dst[base], dst[base + 2u], dst[base + 4u], dst[base + 6u]);
            hi = vec4<f32>(dst[base + 1u], dst[base + 3u], dst[base + 5u], dst[base + 7u]);
        } else {
            for (var k = 0u; k < live; k++) {
                if (k % 2u == 0u) {
                    lo[k / 2u] = dst[base + k];
                } else {
                    hi[k / 2u] = dst[base + k];
                }
            }
        }
        let own = vec4<u32>(
            to_f16_bits(lo.x) | (to_f16_bits(hi.x) << 16u),
            to_f16_bits(lo.y) | (to_f16_bits(hi.y) << 16u),
            to_f16_bits(lo.z) | (to_f16_bits(hi.z) << 16u),
            to_f16_bits(lo.w) | (to_f16_bits(hi.w) << 16u),
        );
        let own_pairs = unpack_words(own);
        var acc: Pairs;
        if (p.self_index == 0u) {
            acc = own_pairs;
        } else {
            acc = unpack_words(slots[p.offset / 4u + q]);
        }
        for (var j = 1u; j < p.members; j++) {
            if (j == p.self_index) {
                acc = add_pairs(acc, own_pairs);
            } else {
                acc = add_pairs(acc, unpack_words(slots[(j * p.stride + p.offset) / 4u + q]));
            }
        }
        let out_lo = vec4<f32>(acc.a.x, acc.b.x, acc.c.x, acc.d.x);
        let out_hi = vec4<f32>(acc.a.y, acc.b.y, acc.c.y, acc.d.y);
        if (live == 8u) {
            dst[base] = out_lo.x;
            dst[base + 1u] = out_hi.x;
            dst[base + 2u] = out_lo.y;
            dst[base + 3u] = out_hi.y;
            dst[base + 4u] = out_lo.z;
            dst[base + 5u] = out_hi.z;
            dst[base + 6u] = out_lo.w;
            dst[base + 7u] = out_hi.w;
        } else {
            for (var k = 0u; k < live; k++) {
                if (k % 2u == 0u) {
                    dst[base + k] = out_lo[k / 2u];
                } else {
                    dst[base + k] = out_hi[k / 2u];
                }
            }
        }
    }
}
