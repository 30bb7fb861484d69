// f32_to_f16: packs n f32 values (from src[src_offset..]) as f16 pairs into 32-bit words
// dst[dst_offset + w] (element 2w in the low half, 2w+1 in the high half; a missing last
// element is 0). f16 is stored packed in u32 words everywhere in crossgpu, so kernels need
// neither shaderFloat16 nor 16-bit storage.
//
// Values beyond the f16 range (infinities too) saturate to +-65504, so every driver gives the
// same bits; NaN stays NaN (WGSL leaves clamp of NaN to the implementation, so NaN is handled
// apart); magnitudes below 2^-25 round to zero.

struct CopyParams {
    n: u32,
    src_offset: u32,
    dst_offset: u32,
    _pad: u32,
}

@group(0) @binding(0) var<storage, read> src: array<f32>;
@group(0) @binding(1) var<storage, read_write> dst: array<u32>;
var<immediate> p: CopyParams;

const F16_MAX: f32 = 65504.0;

// One f32 as f16 bits: clamped to the f16 range and rounded by pack2x16float; a NaN (found
// from its bits: comparisons with NaN are not reliable across compilers) becomes the quiet
// f16 NaN 0x7e00 with the input's sign.
fn to_f16_bits(v: f32) -> u32 {
    let bits = bitcast<u32>(v);
    if ((bits & 0x7fffffffu) > 0x7f800000u) {
        return 0x7e00u | ((bits >> 16u) & 0x8000u);
    }
    return pack2x16float(vec2<f32>(clamp(v, -F16_MAX, F16_MAX), 0.0)) & 0xffffu;
}

@compute @workgroup_size(256)
fn f32_to_f16(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let words = (p.n + 1u) / 2u;
    let stride = nwg.x * 256u;
    for (var w = gid.x; w < words; w += stride) {
        let e = 2u * w;
        let lo = src[p.src_offset + e];
        var hi = 0.0;
        if (e + 1u < p.n) {
            hi = src[p.src_offset + e + 1u];
        }
        dst[p.dst_offset + w] = to_f16_bits(lo) | (to_f16_bits(hi) << 16u);
    }
}
