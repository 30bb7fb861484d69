// The prompt's product Y[t, r] = Σ_k W[r, k] · X[t, k] over `positions` rows of X at once (f32
// accumulation), shared by matmul_f16, matmul_bf16 and the matmul_q* kernels: where a decode
// step reads every weight once per token, here each weight read serves several positions.
//
// W is the member's slice as stored (f16 elements, bf16, or GGUF blocks: `ops/quant.rs` has the
// layouts), read as u32 words; X is f32 [positions, cols], Y f32 [positions, rows]. The
// including file defines `fn load_w8(row, col) -> W8`: elements col .. col + 8 of `row`
// dequantized to f32 as ggml's dequantize gives them (col % 8 == 0, row < rows; elements past
// cols are 0, and any col reads only inside the buffer).
//
// A workgroup of 64 invocations takes 32 rows and 32 positions; invocation i takes rows
// 4 (i / 8) .. + 4 and positions 4 (i % 8) .. + 4 of them and, 8 columns at a time, dequantizes
// its 4 rows' weights once and multiplies them into 4 × 4 sums, so each weight it loads serves 4
// positions and each x 4 rows; the 8 invocations of a row group read the same weights (one
// load for the warp), those of a position group the same x. Each sum adds 8 products in a
// small tree, then runs over the columns in order: a term goes through at most
// 4 + cols / 8 roundings.
//
// No barriers and almost no branches (clamped indices and `select` instead): llvmpipe
// (lavapipe) turns a kernel with barriers into a coroutine, and LLVM's frame building for a
// workgroup-memory tiled version took minutes per kernel on a cold shader cache.

// Rows `row_from .. rows` of positions `position_from .. positions` (0 and 0: all of Y; more
// where matmul_f16_coop took the whole tiles before them).
struct MatmulParams {
    rows: u32,
    cols: u32,
    positions: u32,
    row_from: u32,
    position_from: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<storage, read> w: array<u32>;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
var<immediate> p: MatmulParams;

const ROWS_PER_GROUP: u32 = 32u;
const POSITIONS_PER_GROUP: u32 = 32u;

// Eight consecutive weights of a row.
struct W8 {
    a: vec4<f32>,
    b: vec4<f32>,
}

// Word i of W, clamped to the buffer (a block's last word may be followed by nothing).
fn w_word(i: u32) -> u32 {
    return w[min(i, arrayLength(&w) - 1u)];
}

// The byte at byte offset `b` of W.
fn byte_at(b: u32) -> u32 {
    return (w_word(b >> 2u) >> (8u * (b & 3u))) & 255u;
}

// The four bytes from the even byte offset `b` as one word, lowest first.
fn word_at(b: u32) -> u32 {
    let lo = w_word(b >> 2u);
    let hi = w_word((b >> 2u) + 1u);
    return select(lo, (lo >> 16u) | (hi << 16u), (b & 2u) != 0u);
}

// The f16 at the even byte offset `b`.
fn half_at(b: u32) -> f32 {
    let h = unpack2x16float(w_word(b >> 2u));
    return select(h.x, h.y, (b & 2u) != 0u);
}

// The low (shift 0) or high (shift 4) nibbles of v's four bytes, lowest byte first.
fn nibbles(v: u32, shift: u32) -> vec4<f32> {
    return vec4<f32>((vec4<u32>(v) >> (vec4<u32>(0u, 8u, 16u, 24u) + shift)) & vec4<u32>(15u));
}

// The four signed bytes of v, lowest first.
fn signed4(v: u32) -> vec4<f32> {
    let s = bitcast<vec4<i32>>(vec4<u32>(v << 24u, v << 16u, v << 8u, v)) >> vec4<u32>(24u);
    return vec4<f32>(s);
}

// x[t, c], or 0 past the positions or the columns.
fn x_at(t: u32, c: u32) -> f32 {
    let v = x[min(t, p.positions - 1u) * p.cols + min(c, p.cols - 1u)];
    return select(0.0, v, (t < p.positions) & (c < p.cols));
}

// Columns k .. k + 8 of position t's x (0 past the positions or the columns).
fn x8(t: u32, k: u32) -> W8 {
    return W8(vec4<f32>(x_at(t, k), x_at(t, k + 1u), x_at(t, k + 2u), x_at(t, k + 3u)),
        vec4<f32>(x_at(t, k + 4u), x_at(t, k + 5u), x_at(t, k + 6u), x_at(t, k + 7u)));
}

fn dot8(w: W8, v: W8) -> f32 {
    return dot(w.a, v.a) + dot(w.b, v.b);
}

fn matmul_tile(wid: vec3<u32>, lid: u32) {
    let r = p.row_from + wid.x * ROWS_PER_GROUP + 4u * (lid / 8u);
    let t = p.position_from + wid.y * POSITIONS_PER_GROUP + 4u * (lid % 8u);
    if (r >= p.rows || t >= p.positions) {
        return;
    }
    // Rows past the end read the last row (and store nothing); positions past the end read 0.
    let last = p.rows - 1u;
    let rows = vec4<u32>(r, min(r + 1u, last), min(r + 2u, last), min(r + 3u, last));
    var acc0 = vec4<f32>(0.0);
    var acc1 = vec4<f32>(0.0);
    var acc2 = vec4<f32>(0.0);
    var acc3 = vec4<f32>(0.0);
    for (var k = 0u; k < p.cols; k += 8u) {
        let w0 = load_w8(rows.x, k);
        let w1 = load_w8(rows.y, k);
        let w2 = load_w8(rows.z, k);
        let w3 = load_w8(rows.w, k);
        let x0 = x8(t, k);
        let x1 = x8(t + 1u, k);
        let x2 = x8(t + 2u, k);
        let x3 = x8(t + 3u, k);
        acc0 += vec4<f32>(dot8(w0, x0), dot8(w0, x1), dot8(w0, x2), dot8(w0, x3));
        acc1 += vec4<f32>(dot8(w1, x0), dot8(w1, x1), dot8(w1, x2), dot8(w1, x3));
        acc2 += vec4<f32>(dot8(w2, x0), dot8(w2, x1), dot8(w2, x2), dot8(w2, x3));
        acc3 += vec4<f32>(dot8(w3, x0), dot8(w3, x1), dot8(w3, x2), dot8(w3, x3));
    }
    store_row(r, t, acc0);
    store_row(r + 1u, t, acc1);
    store_row(r + 2u, t, acc2);
    store_row(r + 3u, t, acc3);
}

// Row r of positions t .. t + 4.
fn store_row(r: u32, t: u32, v: vec4<f32>) {
    if (r >= p.rows) {
        return;
    }
    y[t * p.rows + r] = v.x;
    if (t + 1u < p.positions) {
        y[(t + 1u) * p.rows + r] = v.y;
    }
    if (t + 2u < p.positions) {
        y[(t + 2u) * p.rows + r] = v.z;
    }
    if (t + 3u < p.positions) {
        y[(t + 3u) * p.rows + r] = v.w;
    }
}
