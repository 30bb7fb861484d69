// The quantized matrix–vector product y[r] = Σ_k dequant(W)[r, k] · x[k] (f32 accumulation),
// shared by matvec_q8_0, matvec_q4_0, matvec_q4_1, matvec_q4_k and matvec_q6_k. W is the GGUF
// tensor's bytes as stored (row-major blocks, rows back to back, zero-padded to whole words),
// read as u32 words: a block may start at any even byte, so the formats read whole words and
// funnel two of them where a field straddles (`straddle`).
//
// The including file sets:
// - `ROWS`: rows per workgroup. Every invocation works on all ROWS rows, so the x it loads for
//   a unit is used ROWS times (x is read once per unit, not once per row);
// - `UNIT`: elements per unit of work (a whole 32-element block, or a 64-element piece of a
//   256-element k-quant super-block); one invocation dequantizes whole units in registers;
// - `UNIT_X`: the vec4<f32> of x a unit multiplies (UNIT / 4), and `alias XUnit =
//   array<vec4<f32>, UNIT_X>`;
// - `WG`: invocations per workgroup (a power of two);
// - `fn load_x(u, xs)`: the x of unit u of a row (the same for every row);
// - `fn unit_dot(row, u, xs) -> f32`: unit u of `row` dotted with xs (the helpers of
//   matvec_quant_blocks.wgsl read and convert the block's fields).
//
// Structure: a workgroup of WG invocations takes ROWS consecutive rows; invocation i takes
// units i, i + WG, i + 2 WG, … of each, so neighbouring invocations read neighbouring blocks
// (a warp's loads cover one contiguous run of the row) and a unit's x stays in registers for
// the ROWS rows. Each row's WG partial sums then meet in a tree in workgroup memory.
// Rows past the end (the last workgroup of a `rows` not a multiple of ROWS, or the spill of a
// grid of more than 65535 workgroups into y) are skipped, but their invocations still reach
// every barrier.


// The bindings and immediates: wgsl/include/matvec_quant_blocks.wgsl.

var<workgroup> partial: array<f32, ROWS * WG>;

fn matvec_quant(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) {
    let first = (wid.y * nwg.x + wid.x) * ROWS;
    let units = p.cols / UNIT;
    var acc: array<f32, ROWS>;
    for (var u = lid; u < units; u += WG) {
        var xs: XUnit;
        load_x(u, &xs);
        for (var r = 0u; r < ROWS; r++) {
            if (first + r < p.rows) {
                acc[r] += unit_dot(first + r, u, &xs);
            }
        }
    }
    // No early return above: every invocation reaches these barriers.
    for (var r = 0u; r < ROWS; r++) {
        partial[r * WG + lid] = acc[r];
    }
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if (lid < s) {
            for (var r = 0u; r < ROWS; r++) {
                partial[r * WG + lid] += partial[r * WG + lid + s];
            }
        }
        workgroupBarrier();
    }
    if (lid < ROWS && first + lid < p.rows) {
        store_row(first + lid, partial[lid * WG]);
    }
}
