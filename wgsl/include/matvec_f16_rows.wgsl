// The f16 matrix–vector product for cols % 8 == 0, shared by the kernels that differ only in
// how many rows a workgroup of 256 computes: each file sets `ROWS` (1, 4 or 8; LANES = 256 /
// ROWS threads per row) and `PAIRED` (whether a thread adds a weight group's two dot products
// together before its running sum, as the eight-row kernel does, or one after the other), then
// calls `matvec_rows` from its entry point. Each thread loads eight f16 weights as one
// vec4<u32> (16 bytes) and two vec4<f32> of x per step; the row's partial sums meet in a tree.

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

const LANES: u32 = 256u / ROWS;

fn matvec_rows(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) {
    let lane = lid % LANES;
    let row = (wid.y * nwg.x + wid.x) * ROWS + lid / LANES;
    var acc = 0.0;
    // No early return: every thread must reach the barriers below.
    if (row < p.rows) {
        let groups = p.cols / 8u;
        let base = row * groups;
        for (var q = lane; q < groups; q += LANES) {
            let v = w[base + q];
            let lo = dot(vec4<f32>(unpack2x16float(v.x), unpack2x16float(v.y)), x[2u * q]);
            let hi = dot(vec4<f32>(unpack2x16float(v.z), unpack2x16float(v.w)), x[2u * q + 1u]);
            if (PAIRED) {
                acc += lo + hi;
            } else {
                acc += lo;
                acc += hi;
            }
        }
    }
    partial[lid] = acc;
    workgroupBarrier();
    for (var s = LANES / 2u; s > 0u; s >>= 1u) {
        if (lane < s) {
            partial[lid] += partial[lid + s];
        }
        workgroupBarrier();
    }
    if (lane == 0u && row < p.rows) {
        y[p.y_offset + row] = partial[lid];
    }
}
