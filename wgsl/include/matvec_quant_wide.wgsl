// The quantized matrix–vector product laid out as the f16 kernels are
// (wgsl/include/matvec_f16_rows.wgsl), shared by matvec_q8_0_wide, matvec_q4_0_wide and
// matvec_q4_1_wide: a workgroup of WG = 256 invocations computes 256 / LANES rows, LANES
// invocations a row; invocation i of a row takes its units i, i + LANES, … (neighbours read
// neighbouring bytes), two units a trip so that the loads of both are in flight before either
// is used. Each row's LANES partial sums meet in a tree in workgroup memory.
//
// Measured on one H200 (2026-12-03, decode of the 27B-class shape): Q4_1 decodes 1.17 times as
// fast as F16 (bytes would allow ~3 times): bound by the work per element, not by memory. More
// rows an invocation, 32 invocations a row, whole blocks an invocation or one unit a trip were
// slower (docs/BENCHMARKS.md, "Quantized weights as stored").
//
// The including file sets `LANES` (a power of two), `UNIT` (elements a unit), `XUnit` (the type
// of a unit's x: `array<vec4<f32>, UNIT_X>` where x is f32, words of 8-bit blocks where it is
// quantized, wgsl/include/matvec_q8_blocks.wgsl), `fn load_x(u, xs)` (the x of unit u) and
// `fn unit_dot(row, u, xs) -> f32` (unit u of `row` dotted with xs), as for
// wgsl/include/matvec_quant.wgsl. A row's sum and
// the row itself are scalars: held in function-local arrays (as matvec_quant.wgsl holds its
// rows'), the same kernels decoded 7–17% slower on the H200; loading x inside `unit_dot`
// instead of through `load_x` was no faster (Q4_0 3% slower).

// Rows past the end (the last workgroup, or a grid of more than 65535 workgroups spilling into
// y) compute the last row again and are not written: no branch in the loop, and every
// invocation reaches every barrier.

// The bindings and immediates: wgsl/include/matvec_quant_blocks.wgsl (f32 x) or
// matvec_q8_blocks.wgsl (x in 8-bit blocks).

const WG: u32 = 256u;
const ROWS: u32 = WG / LANES;

var<workgroup> partial: array<f32, WG>;

fn matvec_wide(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) {
    let lane = lid % LANES;
    let first = (wid.y * nwg.x + wid.x) * ROWS + lid / LANES;
    let row = min(first, p.rows - 1u);
    let units = p.cols / UNIT;
    var acc = 0.0;
    for (var u = lane; u < units; u += 2u * LANES) {
        // The second unit clamped to the row, its sum dropped past the end.
        let v = min(u + LANES, units - 1u);
        var xa: XUnit;
        var xb: XUnit;
        load_x(u, &xa);
        load_x(v, &xb);
        let a = unit_dot(row, u, &xa);
        let b = unit_dot(row, v, &xb);
        acc += a + select(0.0, b, u + LANES < units);
    }
    partial[lid] = acc;
    workgroupBarrier();
    for (var s = LANES / 2u; s > 0u; s >>= 1u) {
        if (lane < s) {
            partial[lid] += partial[lid + s];
        }
        workgroupBarrier();
    }
    if (lane == 0u && first < p.rows) {
        store_row(first, partial[lid]);
    }
}
