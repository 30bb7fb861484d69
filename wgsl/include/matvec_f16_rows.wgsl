// The f16 matrix–vector product for cols % 8 == 0, shared by the kernels that differ only in
// how many rows a workgroup of 256 computes and how many loads a thread keeps in flight: each
// file sets `ROWS` (1, 4 or 8; LANES = 256 / ROWS threads per row), `PAIRED` (whether a thread
// adds a weight group's two dot products together before its running sum, as the eight-row
// kernels do, or one after the other) and `UNROLL` (1, or 4: a thread issues four 16-byte
// weight loads, LANES groups apart, before it uses the first; the additions keep their order,
// so the bits do not depend on it), includes matvec_f16_group.wgsl (add_group: one group of
// eight f16 weights against x) and calls `matvec_rows` (or, to finish the rows its own way,
// `row_sum`) from its entry point. The row's partial sums meet in a tree.

@group(0) @binding(0) var<storage, read> w: array<vec4<u32>>;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
var<immediate> p: MatvecParams;
// #include "matvec_store.wgsl"

var<workgroup> partial: array<f32, 256>;

const LANES: u32 = 256u / ROWS;

// The row thread `lid` of workgroup `wid` (of `nwg`) works on (may be past p.rows).
fn matvec_row(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> u32 {
    return (wid.y * nwg.x + wid.x) * ROWS + lid / LANES;
}

// The row's W x, valid on the row's first thread (lid % LANES == 0); every thread of the
// workgroup must call it (it waits at barriers).
fn row_sum(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> f32 {
    let lane = lid % LANES;
    let row = matvec_row(wid, nwg, lid);
    var acc = 0.0;
    // No early return: every thread must reach the barriers below.
    if (row < p.rows) {
        let groups = p.cols / 8u;
        let base = row * groups;
        var q = lane;
        if (UNROLL == 4u) {
            // Four groups LANES apart at a time, their weight loads issued together.
            for (; q + 3u * LANES < groups; q += 4u * LANES) {
                let v0 = w[base + q];
                let v1 = w[base + q + LANES];
                let v2 = w[base + q + 2u * LANES];
                let v3 = w[base + q + 3u * LANES];
                acc = add_group(acc, v0, q);
                acc = add_group(acc, v1, q + LANES);
                acc = add_group(acc, v2, q + 2u * LANES);
                acc = add_group(acc, v3, q + 3u * LANES);
            }
        }
        for (; q < groups; q += LANES) {
            acc = add_group(acc, w[base + q], q);
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
    return partial[lid];
}

fn matvec_rows(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) {
    let v = row_sum(wid, nwg, lid);
    let row = matvec_row(wid, nwg, lid);
    if (lid % LANES == 0u && row < p.rows) {
        store_row(row, v);
    }
}
