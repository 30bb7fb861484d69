// combine_slots: phase B of every collective but the f32 sum (src/comm/exchange.rs): elements
// `dst_elem .. dst_elem + n` of dst become the combination of the members `first .. first +
// count`'s values, element `src_elem + k` of each member's region of the round's slot entry, in
// member order: a copy of one member's (all-gather, broadcast), or a reduction (sum, prod, max,
// min, avg). Every member runs the same operations in the same order on the same wire values,
// so every member ends with bitwise the same result.
//
// A member's own values are read from its own send tensor (`own`, element `own_elem + s` for
// element `s` of the regions; `self_index` names the member, or is past every member where it
// sent nothing): the same bits it wrote into its region in phase A, but from device memory, so
// each member reads only its peers' regions over the bus.
//
// Elements are 32-bit (f32, i32, u32) or 16-bit (f16, bf16; two per word, element 2w in the low
// half). A thread writes one whole word of dst; a word that the range covers only in part keeps
// its other half (two dispatches that fill neighbouring ranges run one after the other).
//
// Arithmetic, the same on every driver: halves are widened to f32 exactly by integer code and
// narrowed to nearest even by integer code (not by pack2x16float, whose rounding Vulkan leaves
// to the driver); f32 sums and products round once per operation; max and min compare with `>`
// and `<` and keep the earlier member's value on a tie (so -0 and +0 keep the first); a NaN
// anywhere makes the result the canonical quiet NaN (f32 0x7fc00000, f16 0x7e00, bf16 0x7fc0).
// f16 results beyond the f16 range become infinities (IEEE rounding). Integers wrap. avg is the
// f32 sum multiplied by `scale` (1 / members, rounded to f32): one more rounding than a division.

struct CombineSlotsParams {
    n: u32,
    first: u32,
    count: u32,
    stride: u32,
    offset: u32,
    src_elem: u32,
    dst_elem: u32,
    // 0 copy (of member `first`), 1 sum, 2 prod, 3 max, 4 min, 5 avg.
    op: u32,
    // 0 f32, 1 i32, 2 u32, 3 f16, 4 bf16.
    kind: u32,
    scale: f32,
    self_index: u32,
    own_elem: u32,
}

@group(0) @binding(0) var<storage, read> slots: array<u32>;
@group(0) @binding(1) var<storage, read_write> dst: array<u32>;
@group(0) @binding(2) var<storage, read> own: array<u32>;
var<immediate> p: CombineSlotsParams;

const OP_COPY: u32 = 0u;
const OP_SUM: u32 = 1u;
const OP_PROD: u32 = 2u;
const OP_MAX: u32 = 3u;
const OP_MIN: u32 = 4u;
const OP_AVG: u32 = 5u;
const KIND_F32: u32 = 0u;
const KIND_I32: u32 = 1u;
const KIND_U32: u32 = 2u;
const KIND_F16: u32 = 3u;
const KIND_BF16: u32 = 4u;

fn is_half() -> bool {
    return p.kind >= KIND_F16;
}

// The bits of element `s` of member `j`'s region (16-bit elements in the low half).
fn element(j: u32, s: u32) -> u32 {
    if (j == p.self_index) {
        let e = p.own_elem + s;
        if (is_half()) {
            return (own[e / 2u] >> (16u * (e & 1u))) & 0xffffu;
        }
        return own[e];
    }
    let base = p.offset + j * p.stride;
    if (is_half()) {
        return (slots[base + s / 2u] >> (16u * (s & 1u))) & 0xffffu;
    }
    return slots[base + s];
}

fn is_nan_bits(b: u32) -> bool {
    return (b & 0x7fffffffu) > 0x7f800000u;
}

// f16 bits to f32, exactly, subnormals included.
fn f16_to_f32(h: u32) -> f32 {
    let sign = (h & 0x8000u) << 16u;
    let e = (h >> 10u) & 0x1fu;
    let m = h & 0x3ffu;
    if (e == 0u) {
        let v = f32(m) * 5.9604644775390625e-8;
        return bitcast<f32>(bitcast<u32>(v) | sign);
    }
    if (e == 31u) {
        return bitcast<f32>(sign | 0x7f800000u | (m << 13u));
    }
    return bitcast<f32>(sign | ((e + 112u) << 23u) | (m << 13u));
}

// f32 to f16 bits, rounded to nearest even; beyond the range an infinity; NaN the canonical 0x7e00.
fn f32_to_f16(v: f32) -> u32 {
    let b = bitcast<u32>(v);
    let sign = (b >> 16u) & 0x8000u;
    let a = b & 0x7fffffffu;
    if (a > 0x7f800000u) {
        return 0x7e00u;
    }
    if (a >= 0x477ff000u) {
        return sign | 0x7c00u;
    }
    if (a >= 0x38800000u) {
        let base = (a - 0x38000000u) >> 13u;
        let rest = a & 0x1fffu;
        let up = rest > 0x1000u || (rest == 0x1000u && (base & 1u) == 1u);
        return sign | (base + u32(up));
    }
    if (a <= 0x33000000u) {
        return sign;
    }
    let m = (a & 0x7fffffu) | 0x800000u;
    let shift = 126u - (a >> 23u);
    let base = m >> shift;
    let rest = m & ((1u << shift) - 1u);
    let half = 1u << (shift - 1u);
    let up = rest > half || (rest == half && (base & 1u) == 1u);
    return sign | (base + u32(up));
}

// f32 to bf16 bits, rounded to nearest even; NaN the canonical 0x7fc0.
fn f32_to_bf16(v: f32) -> u32 {
    let b = bitcast<u32>(v);
    if (is_nan_bits(b)) {
        return 0x7fc0u;
    }
    return (b + 0x7fffu + ((b >> 16u) & 1u)) >> 16u;
}

fn widen(bits: u32) -> f32 {
    if (p.kind == KIND_F16) {
        return f16_to_f32(bits);
    }
    if (p.kind == KIND_BF16) {
        return bitcast<f32>(bits << 16u);
    }
    return bitcast<f32>(bits);
}

fn narrow(v: f32) -> u32 {
    if (p.kind == KIND_F16) {
        return f32_to_f16(v);
    }
    if (p.kind == KIND_BF16) {
        return f32_to_bf16(v);
    }
    if (is_nan_bits(bitcast<u32>(v))) {
        return 0x7fc00000u;
    }
    return bitcast<u32>(v);
}

fn combine_float(s: u32) -> u32 {
    var acc = widen(element(p.first, s));
    var nan = is_nan_bits(bitcast<u32>(acc));
    for (var j = p.first + 1u; j < p.first + p.count; j++) {
        let v = widen(element(j, s));
        nan = nan || is_nan_bits(bitcast<u32>(v));
        switch p.op {
            case 2u: {
                acc = acc * v;
            }
            case 3u: {
                acc = select(acc, v, v > acc);
            }
            case 4u: {
                acc = select(acc, v, v < acc);
            }
            default: {
                acc = acc + v;
            }
        }
    }
    if (p.op == OP_AVG) {
        acc = acc * p.scale;
    }
    if (nan) {
        acc = bitcast<f32>(0x7fc00000u);
    }
    return narrow(acc);
}

fn combine_int(s: u32) -> u32 {
    var acc = element(p.first, s);
    for (var j = p.first + 1u; j < p.first + p.count; j++) {
        let v = element(j, s);
        switch p.op {
            case 2u: {
                acc = acc * v;
            }
            case 3u: {
                if (p.kind == KIND_I32) {
                    acc = bitcast<u32>(max(bitcast<i32>(acc), bitcast<i32>(v)));
                } else {
                    acc = max(acc, v);
                }
            }
            case 4u: {
                if (p.kind == KIND_I32) {
                    acc = bitcast<u32>(min(bitcast<i32>(acc), bitcast<i32>(v)));
                } else {
                    acc = min(acc, v);
                }
            }
            default: {
                // Two's complement: the wrapped sum is the same bits for i32 and u32.
                acc = acc + v;
            }
        }
    }
    return acc;
}

// The result's bits for element `s` of the regions.
fn combined(s: u32) -> u32 {
    if (p.op == OP_COPY) {
        return element(p.first, s);
    }
    if (p.kind == KIND_I32 || p.kind == KIND_U32) {
        return combine_int(s);
    }
    return combine_float(s);
}

@compute @workgroup_size(256)
fn combine_slots(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    if (p.n == 0u) {
        return;
    }
    let stride = nwg.x * 256u;
    if (!is_half()) {
        for (var k = gid.x; k < p.n; k += stride) {
            dst[p.dst_elem + k] = combined(p.src_elem + k);
        }
        return;
    }
    let end = p.dst_elem + p.n;
    let w0 = p.dst_elem / 2u;
    let words = (end + 1u) / 2u - w0;
    for (var t = gid.x; t < words; t += stride) {
        let w = w0 + t;
        var word = 0u;
        var keep = 0u;
        for (var h = 0u; h < 2u; h++) {
            let e = 2u * w + h;
            if (e >= p.dst_elem && e < end) {
                word |= combined(p.src_elem + e - p.dst_elem) << (16u * h);
            } else {
                keep |= 0xffffu << (16u * h);
            }
        }
        if (keep != 0u) {
            word |= dst[w] & keep;
        }
        dst[w] = word;
    }
}
