// matvec_gate_up_silu's products (its bits) with a thread working on both dot products of its
// row, gate and up, loading a group's eight x values once for the two: per 32 bytes of weights
// 32 bytes of x instead of 64. A dot product still has 64 lanes adding the same groups in the
// same order, its partials sit where matvec_gate_up_silu's do (gate of the workgroup's row r at
// 128 r + lane, up 64 further) and meet in the same tree, so the bits are that kernel's. The
// includer sets `ROWS` (the workgroup's rows) and calls `gate_up_silu_shared_x` from an entry
// point of 64 * ROWS threads; f16 weights (cols % 8 == 0), f32 x and a.

struct GateUpParams {
    rows: u32,
    cols: u32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<storage, read> wg: array<vec4<u32>>;
@group(0) @binding(1) var<storage, read> wu: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read_write> a: array<f32>;
var<immediate> p: GateUpParams;

const PAIRED: bool = false;
// #include "matvec_f16_group.wgsl"

var<workgroup> partial: array<f32, 128 * ROWS>;

fn gate_up_silu_shared_x(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) {
    let lane = lid % 64u;
    let r = lid / 64u;
    let row = (wid.y * nwg.x + wid.x) * ROWS + r;
    var g = 0.0;
    var u = 0.0;
    // No early return: every thread must reach the barriers below.
    if (row < p.rows) {
        let groups = p.cols / 8u;
        let base = row * groups;
        for (var q = lane; q < groups; q += 64u) {
            let vg = wg[base + q];
            let vu = wu[base + q];
            let x0 = x[2u * q];
            let x1 = x[2u * q + 1u];
            g = add_group_x(g, vg, x0, x1);
            u = add_group_x(u, vu, x0, x1);
        }
    }
    let at = 128u * r + lane;
    partial[at] = g;
    partial[at + 64u] = u;
    workgroupBarrier();
    for (var s = 32u; s > 0u; s >>= 1u) {
        if (lane < s) {
            partial[at] += partial[at + s];
            partial[at + 64u] += partial[at + 64u + s];
        }
        workgroupBarrier();
    }
    if (lane == 0u && row < p.rows) {
        let gs = partial[at];
        a[row] = gs / (1.0 + exp(-gs)) * partial[at + 64u];
    }
}
