// matvec_f16_vec8: the matvec_f16 fast path for cols % 8 == 0: each thread loads eight f16
// weights as one vec4<u32> (16 bytes) and two vec4<f32> of x.

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
fn matvec_f16_vec8(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let row = wid.y * nwg.x + wid.x;
    if (row >= p.rows) {
        return;
    }
    let groups = p.cols / 8u;
    let base = row * groups;
    var acc = 0.0;
    for (var q = lid; q < groups; q += 256u) {
        let v = w[base + q];
        let x0 = x[2u * q];
        let x1 = x[2u * q + 1u];
        acc += dot(vec4<f32>(unpack2x16float(v.x), unpack2x16float(v.y)), x0);
        acc += dot(vec4<f32>(unpack2x16float(v.z), unpack2x16float(v.w)), x1);
    }
    partial[lid] = acc;
    workgroupBarrier();
    for (var s = 128u; s > 0u; s >>= 1u) {
        if (lid < s) {
            partial[lid] += partial[lid + s];
        }
        workgroupBarrier();
    }
    if (lid == 0u) {
        y[p.y_offset + row] = partial[0];
    }
}
