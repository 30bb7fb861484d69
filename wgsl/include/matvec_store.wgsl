// The immediates of every matrix–vector kernel (matvec_f32, matvec_f16, the f16 row kernels
// of matvec_f16_rows.wgsl and the quantized ones of matvec_quant_blocks.wgsl) and how each
// stores a row: y[y_offset + row] = W x, or, where `accumulate` is set, y[y_offset + row] +=
// W x (`Member::matvec_accumulate`: the addition `add` would make after the product, so its
// bits, without the vector between them). The includer declares `y` (read_write f32) and
// `p: MatvecParams`.

struct MatvecParams {
    rows: u32,
    cols: u32,
    // Where y starts in its binding, in elements (a DevicePoll slot region; 0 for a tensor).
    y_offset: u32,
    // Nonzero: add the product to y instead of overwriting it.
    accumulate: u32,
}

// Stores row `row`'s sum `v` as the immediates say.
fn store_row(row: u32, v: f32) {
    let at = p.y_offset + row;
    if (p.accumulate != 0u) {
        y[at] = y[at] + v;
    } else {
        y[at] = v;
    }
}
