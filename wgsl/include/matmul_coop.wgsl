// The prompt's product Y[t, r] = Σ_k W[r, k] · X[t, k] over f16 weights on a device's matrix
// units (cooperative matrices: NVIDIA's tensor cores, AMD's WMMA, lavapipe's emulation),
// shared by matmul_f16_coop16 and matmul_f16_coop8, which define the tile side `UNIT` and the
// tile types `TileA`, `TileB` (f16) and `TileC` (f32): UNIT × UNIT tiles of X (rounded to f16
// beforehand, `f32_to_f16`) and of W multiplied and summed into f32 tiles of Y by a subgroup at
// a time. Only whole tiles: positions `0 .. p.positions` and rows `0 .. p.tile_rows`
// (multiples of UNIT), and `p.cols` a multiple of UNIT; the strips past them go through
// matmul_f16 (`ops/matmul.rs`). `p.rows` is Y's row stride (W's rows).
//
// A workgroup takes 4 UNIT positions × 8 UNIT rows as four quarters of 2 UNIT positions × 4
// UNIT rows; a subgroup takes a quarter (several, where the workgroup has fewer than four
// subgroups) and, UNIT columns at a time, loads two tiles of X and four of W and multiply-adds
// the eight products into its eight sums (on one H200 this took a 27B-class 512-token prompt at
// 620 tokens/s, against 540 with quarters of 2 × 2 tiles). A quarter reaching past the whole
// tiles takes its last one again in place of those missing and stores it once.
// The order in which a tile's products are added, and the precision inside the matrix unit,
// are the device's.

struct MatmulCoopParams {
    rows: u32,
    cols: u32,
    positions: u32,
    tile_rows: u32,
}

@group(0) @binding(0) var<storage, read> w: array<f16>;
@group(0) @binding(1) var<storage, read> x: array<f16>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
var<immediate> p: MatmulCoopParams;

const POSITIONS_PER_SUBGROUP: u32 = 2u * UNIT;
const ROWS_PER_SUBGROUP: u32 = 4u * UNIT;

// The start of the k-th tile of rows from `r`, or `r` where that tile is past the whole tiles.
fn tile_at(r: u32, k: u32) -> u32 {
    return select(r, r + k * UNIT, r + k * UNIT < p.tile_rows);
}

fn matmul_coop(wid: vec3<u32>, subgroup: u32, subgroups: u32) {
    let cols = p.cols;
    let rows = p.rows;
    for (var q = subgroup; q < 4u; q += subgroups) {
        let r0 = wid.x * (2u * ROWS_PER_SUBGROUP) + (q & 1u) * ROWS_PER_SUBGROUP;
        let t0 = wid.y * (2u * POSITIONS_PER_SUBGROUP) + (q >> 1u) * POSITIONS_PER_SUBGROUP;
        if (r0 >= p.tile_rows || t0 >= p.positions) {
            continue;
        }
        let two_t = t0 + UNIT < p.positions;
        let t1 = select(t0, t0 + UNIT, two_t);
        let r1 = tile_at(r0, 1u);
        let r2 = tile_at(r0, 2u);
        let r3 = tile_at(r0, 3u);
        var c00 = TileC();
        var c01 = TileC();
        var c02 = TileC();
        var c03 = TileC();
        var c10 = TileC();
        var c11 = TileC();
        var c12 = TileC();
        var c13 = TileC();
        let xa = t0 * cols;
        let xb = t1 * cols;
        let w0 = r0 * cols;
        let w1 = r1 * cols;
        let w2 = r2 * cols;
        let w3 = r3 * cols;
        for (var k = 0u; k < cols; k += UNIT) {
            // X row-major (position by column), W's rows as columns of B. (Every index a
            // `let` of its own: naga 30's SPIR-V writer fails on an inline one here.)
            let ia0 = xa + k;
            let ia1 = xb + k;
            let ib0 = w0 + k;
            let ib1 = w1 + k;
            let ib2 = w2 + k;
            let ib3 = w3 + k;
            let a0 = coopLoadT<TileA>(&x[ia0], cols);
            let a1 = coopLoadT<TileA>(&x[ia1], cols);
            let b0 = coopLoad<TileB>(&w[ib0], cols);
            let b1 = coopLoad<TileB>(&w[ib1], cols);
            let b2 = coopLoad<TileB>(&w[ib2], cols);
            let b3 = coopLoad<TileB>(&w[ib3], cols);
            c00 = coopMultiplyAdd(a0, b0, c00);
            c01 = coopMultiplyAdd(a0, b1, c01);
            c02 = coopMultiplyAdd(a0, b2, c02);
            c03 = coopMultiplyAdd(a0, b3, c03);
            c10 = coopMultiplyAdd(a1, b0, c10);
            c11 = coopMultiplyAdd(a1, b1, c11);
            c12 = coopMultiplyAdd(a1, b2, c12);
            c13 = coopMultiplyAdd(a1, b3, c13);
        }
        let i00 = t0 * rows + r0;
        let i01 = t0 * rows + r1;
        let i02 = t0 * rows + r2;
        let i03 = t0 * rows + r3;
        let i10 = t1 * rows + r0;
        let i11 = t1 * rows + r1;
        let i12 = t1 * rows + r2;
        let i13 = t1 * rows + r3;
        let has1 = r1 != r0;
        let has2 = r2 != r0;
        let has3 = r3 != r0;
        coopStoreT(c00, &y[i00], rows);
        if (has1) {
            coopStoreT(c01, &y[i01], rows);
        }
        if (has2) {
            coopStoreT(c02, &y[i02], rows);
        }
        if (has3) {
            coopStoreT(c03, &y[i03], rows);
        }
        if (two_t) {
            coopStoreT(c10, &y[i10], rows);
            if (has1) {
                coopStoreT(c11, &y[i11], rows);
            }
            if (has2) {
                coopStoreT(c12, &y[i12], rows);
            }
            if (has3) {
                coopStoreT(c13, &y[i13], rows);
            }
        }
    }
}
