// The body of matvec_f16_rows8_add_norm_pending and its four-loads form: a row-parallel product
// that ends a decoder block's half on one member, y += W x into the residual stream (the
// addition of matvec_accumulate, so the stream's bits), and the next RMSNorm left pending for
// the products that read it: hw = y * nw (the norm's weight, not yet its scale) and, per
// workgroup of eight rows, the sum of those rows' y² in row order (`sq[workgroup]`), from which
// the readers take the scale (norm_pending.wgsl) without a norm dispatch between. The includer
// sets ROWS = 8, PAIRED, UNROLL and includes matvec_f16_rows.wgsl and matvec_f16_group.wgsl
// first; the host sets p.y_offset = 0.

@group(0) @binding(3) var<storage, read> nw: array<f32>;
@group(0) @binding(4) var<storage, read_write> hw: array<f32>;
@group(0) @binding(5) var<storage, read_write> sq: array<f32>;

var<workgroup> row_squares: array<f32, ROWS>;

fn add_norm_pending(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) {
    let s = row_sum(wid, nwg, lid);
    let row = matvec_row(wid, nwg, lid);
    if (lid % LANES == 0u) {
        var square = 0.0;
        if (row < p.rows) {
            let v = y[row] + s;
            y[row] = v;
            hw[row] = v * nw[row];
            square = v * v;
        }
        row_squares[lid / LANES] = square;
    }
    workgroupBarrier();
    if (lid == 0u) {
        var total = 0.0;
        for (var r = 0u; r < ROWS; r++) {
            total += row_squares[r];
        }
        sq[wid.y * nwg.x + wid.x] = total;
    }
}
