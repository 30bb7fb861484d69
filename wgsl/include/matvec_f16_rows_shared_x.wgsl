// The f16 matrix–vector product for cols % 8 == 0 with eight rows per workgroup and each thread
// working on `ROWS_PER_THREAD` of them (2 or 4; the workgroup has 256 / ROWS_PER_THREAD
// threads): the thread loads a group's eight x values once for all its rows, where
// matvec_f16_rows.wgsl's threads load them once per row — per 16 bytes of weights 16 or 8 bytes
// of x instead of 32. A row still has 32 lanes, each adding the same groups in the same order
// as matvec_f16_vec8_rows8's, and the same tree, so the bits are that kernel's. The includer
// sets `ROWS_PER_THREAD` and `UNROLL` (1, or 4 with two rows per thread: four groups LANES
// apart loaded together per row, as matvec_f16_vec8_rows8_x4) and calls
// `matvec_rows_shared_x` from an entry point of 256 / ROWS_PER_THREAD threads.

@group(0) @binding(0) var<storage, read> w: array<vec4<u32>>;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
var<immediate> p: MatvecParams;
// #include "matvec_store.wgsl"

const ROWS: u32 = 8u;
const PAIRED: bool = true;
const LANES: u32 = 32u;
// Rows between a thread's rows: its rows are r, r + STRIDE, ... for r = lid / LANES.
const STRIDE: u32 = ROWS / ROWS_PER_THREAD;

var<workgroup> partial: array<f32, 256>;

// One row's partial sum over the lane's groups, one group at a time (the rows of the last
// block that do not all exist).
fn lane_sum(base: u32, lane: u32, groups: u32) -> f32 {
    var acc = 0.0;
    for (var q = lane; q < groups; q += LANES) {
        acc = add_group(acc, w[base + q], q);
    }
    return acc;
}

fn matvec_rows_shared_x(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) {
    let lane = lid % LANES;
    let r = lid / LANES;
    let row0 = (wid.y * nwg.x + wid.x) * ROWS + r;
    let groups = p.cols / 8u;
    var a0 = 0.0;
    var a1 = 0.0;
    var a2 = 0.0;
    var a3 = 0.0;
    // No early return: every thread must reach the barriers below.
    let last = row0 + (ROWS_PER_THREAD - 1u) * STRIDE;
    if (last < p.rows) {
        let b0 = row0 * groups;
        let b1 = (row0 + STRIDE) * groups;
        var q = lane;
        if (ROWS_PER_THREAD == 2u && UNROLL == 4u) {
            for (; q + 3u * LANES < groups; q += 4u * LANES) {
                let u0 = w[b0 + q];
                let u1 = w[b0 + q + LANES];
                let u2 = w[b0 + q + 2u * LANES];
                let u3 = w[b0 + q + 3u * LANES];
                let v0 = w[b1 + q];
                let v1 = w[b1 + q + LANES];
                let v2 = w[b1 + q + 2u * LANES];
                let v3 = w[b1 + q + 3u * LANES];
                let x0 = x[2u * q];
                let x1 = x[2u * q + 1u];
                let x2 = x[2u * (q + LANES)];
                let x3 = x[2u * (q + LANES) + 1u];
                let x4 = x[2u * (q + 2u * LANES)];
                let x5 = x[2u * (q + 2u * LANES) + 1u];
                let x6 = x[2u * (q + 3u * LANES)];
                let x7 = x[2u * (q + 3u * LANES) + 1u];
                a0 = add_group_x(a0, u0, x0, x1);
                a0 = add_group_x(a0, u1, x2, x3);
                a0 = add_group_x(a0, u2, x4, x5);
                a0 = add_group_x(a0, u3, x6, x7);
                a1 = add_group_x(a1, v0, x0, x1);
                a1 = add_group_x(a1, v1, x2, x3);
                a1 = add_group_x(a1, v2, x4, x5);
                a1 = add_group_x(a1, v3, x6, x7);
            }
        }
        if (ROWS_PER_THREAD == 2u) {
            for (; q < groups; q += LANES) {
                let u = w[b0 + q];
                let v = w[b1 + q];
                let xa = x[2u * q];
                let xb = x[2u * q + 1u];
                a0 = add_group_x(a0, u, xa, xb);
                a1 = add_group_x(a1, v, xa, xb);
            }
        } else {
            let b2 = (row0 + 2u * STRIDE) * groups;
            let b3 = (row0 + 3u * STRIDE) * groups;
            for (; q < groups; q += LANES) {
                let u = w[b0 + q];
                let v = w[b1 + q];
                let s = w[b2 + q];
                let t = w[b3 + q];
                let xa = x[2u * q];
                let xb = x[2u * q + 1u];
                a0 = add_group_x(a0, u, xa, xb);
                a1 = add_group_x(a1, v, xa, xb);
                a2 = add_group_x(a2, s, xa, xb);
                a3 = add_group_x(a3, t, xa, xb);
            }
        }
    } else {
        // The last block: the rows that exist, one at a time.
        if (row0 < p.rows) {
            a0 = lane_sum(row0 * groups, lane, groups);
        }
        if (row0 + STRIDE < p.rows) {
            a1 = lane_sum((row0 + STRIDE) * groups, lane, groups);
        }
        if (ROWS_PER_THREAD == 4u && row0 + 2u * STRIDE < p.rows) {
            a2 = lane_sum((row0 + 2u * STRIDE) * groups, lane, groups);
        }
    }
    partial[r * LANES + lane] = a0;
    partial[(r + STRIDE) * LANES + lane] = a1;
    if (ROWS_PER_THREAD == 4u) {
        partial[(r + 2u * STRIDE) * LANES + lane] = a2;
        partial[(r + 3u * STRIDE) * LANES + lane] = a3;
    }
    workgroupBarrier();
    for (var s = LANES / 2u; s > 0u; s >>= 1u) {
        if (lane < s) {
            for (var k = 0u; k < ROWS_PER_THREAD; k++) {
                let i = (r + k * STRIDE) * LANES + lane;
                partial[i] += partial[i + s];
            }
        }
        workgroupBarrier();
    }
    if (lane == 0u) {
        for (var k = 0u; k < ROWS_PER_THREAD; k++) {
            let row = row0 + k * STRIDE;
            if (row < p.rows) {
                store_row(row, partial[(r + k * STRIDE) * LANES]);
            }
        }
    }
}
