// matvec_f16_vec8_rows4: matvec_f16_vec8 with four rows per workgroup of 256: 64 threads per
// row, so each thread does four times the 16-byte weight loads of the one-row kernel (which
// gives every thread only 2.5 loads for 5120 columns) and the tree reduction is 6 steps, not 8.
// cols % 8 == 0.

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

@compute @workgroup_size(256)
fn matvec_f16_vec8_rows4(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let lane = lid % 64u;
    let row = (wid.y * nwg.x + wid.x) * 4u + lid / 64u;
    var acc = 0.0;
    // No early return: every thread must reach the barriers below.
    if (row < p.rows) {
        let groups = p.cols / 8u;
        let base = row * groups;
        for (var q = lane; q < groups; q += 64u) {
            let v = w[base + q];
            let x0 = x[2u * q];
            let x1 = x[2u * q + 1u];
            acc += dot(vec4<f32>(unpack2x16float(v.x), unpack2x16float(v.y)), x0);
            acc += dot(vec4<f32>(unpack2x16float(v.z), unpack2x16float(v.w)), x1);
        }
    }
    partial[lid] = acc;
    workgroupBarrier();
    for (var s = 32u; s > 0u; s >>= 1u) {
        if (lane < s) {
            partial[lid] += partial[lid + s];
        }
        workgroupBarrier();
    }
    if (lane == 0u && row < p.rows) {
        y[p.y_offset + row] = partial[lid];
    }
}
