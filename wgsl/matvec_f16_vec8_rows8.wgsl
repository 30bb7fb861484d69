// matvec_f16_vec8_rows8: matvec_f16_vec8 with 8 rows per workgroup of 256: 32 threads per row.
// `matvec` uses it from 8192 columns, where it beats four rows per workgroup, and four rows
// below (docs/BENCHMARKS.md, "Matrix–vector products"). cols % 8 == 0.

struct MatvecParams {
    rows: u32,
    cols: u32,
    // Where y starts in its binding, in elements (a DevicePoll slot region; 0 for a tensor).
    y_offset: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<storage, read> w: array<vec4<u32>>;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
var<immediate> p: MatvecParams;

var<workgroup> partial: array<f32, 256>;

fn term(v: vec4<u32>, q: u32) -> f32 {
    return dot(vec4<f32>(unpack2x16float(v.x), unpack2x16float(v.y)), x[2u * q])
        + dot(vec4<f32>(unpack2x16float(v.z), unpack2x16float(v.w)), x[2u * q + 1u]);
}

@compute @workgroup_size(256)
fn matvec_f16_vec8_rows8(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let lane = lid % 32u;
    let row = (wid.y * nwg.x + wid.x) * 8u + lid / 32u;
    var acc = 0.0;
    // No early return: every thread must reach the barriers below.
    if (row < p.rows) {
        let groups = p.cols / 8u;
        let base = row * groups;
        for (var q = lane; q < groups; q += 32u) {
            acc += term(w[base + q], q);
        }
    }
    partial[lid] = acc;
    workgroupBarrier();
    for (var s = 16u; s > 0u; s >>= 1u) {
        if (lane < s) {
            partial[lid] += partial[lid + s];
        }
        workgroupBarrier();
    }
    if (lane == 0u && row < p.rows) {
        y[p.y_offset + row] = partial[lid];
    }
}
