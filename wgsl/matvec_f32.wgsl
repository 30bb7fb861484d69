// matvec_f32: y[r] = sum_k w[r * cols + k] * x[k] for r < rows; w is row-major f32.
// One workgroup per row (row = wid.y * nwg.x + wid.x, so more than 65535 rows fit); each
// thread accumulates a strided slice, then a fixed-order tree reduction in workgroup memory:
// the result is deterministic for a given shape.

@group(0) @binding(0) var<storage, read> w: array<f32>;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
var<immediate> p: MatvecParams;
// #include "matvec_store.wgsl"

var<workgroup> partial: array<f32, 256>;

@compute @workgroup_size(256)
fn matvec_f32(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let row = wid.y * nwg.x + wid.x;
    if (row >= p.rows) {
        return;
    }
    let base = row * p.cols;
    var acc = 0.0;
    for (var k = lid; k < p.cols; k += 256u) {
        acc += w[base + k] * x[k];
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
        store_row(row, partial[0]);
    }
}
