// matvec_f16: y[r] = sum_k f32(w[r * cols + k]) * x[k]; w is row-major f16 packed two per
// u32 word, for any `cols` (odd too: a row may start in the high half of a word).
// Same structure and reduction order as matvec_f32.

@group(0) @binding(0) var<storage, read> w: array<u32>;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
var<immediate> p: MatvecParams;
// #include "matvec_store.wgsl"

var<workgroup> partial: array<f32, 256>;

@compute @workgroup_size(256)
fn matvec_f16(
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
        let idx = base + k;
        let pair = unpack2x16float(w[idx >> 1u]);
        acc += select(pair.x, pair.y, (idx & 1u) == 1u) * x[k];
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
