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
// - `UNIT_X`: the vec4<f32> of x a unit multiplies (UNIT / 4);
// - `fn load_x(u, xs)`: the x of unit u of a row (the same for every row);
// - `fn unit_dot(row, u, xs) -> f32`: unit u of `row` dotted with xs.
//
// Structure: a workgroup of WG = 64 invocations takes ROWS consecutive rows; invocation i takes
// units i, i + 64, i + 128, … of each, so neighbouring invocations read neighbouring blocks
// (a warp's loads cover one contiguous run of the row) and a unit's x stays in registers for
// the ROWS rows. Each row's 64 partial sums then meet in a tree in workgroup memory (6 steps).
// Rows past the end (the last workgroup of an odd `rows`, or the spill of a grid of more than
// 65535 workgroups into y) are skipped, but their invocations still reach every barrier.

struct MatvecParams {
    rows: u32,
    cols: u32,
    // Where y starts in its binding, in elements (a DevicePoll slot region; 0 for a tensor).
    y_offset: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<storage, read> w: array<u32>;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
var<immediate> p: MatvecParams;

const WG: u32 = 64u;

var<workgroup> partial: array<f32, ROWS * WG>;

// Reading a 2-byte-aligned block as words: `lo` and `hi` are words j and j + 1 counted from the
// word holding the block's first byte, and `odd` says the block starts at that word's byte 2.
// `straddle` is the block's bytes 4j .. 4j + 4; `after_half` its bytes 4j + 2 .. 4j + 6 (the
// fields that follow a leading f16, as Q8_0's and Q4_0's qs follow d).
fn straddle(lo: u32, hi: u32, odd: bool) -> u32 {
    return select(lo, (lo >> 16u) | (hi << 16u), odd);
}

fn after_half(lo: u32, hi: u32, odd: bool) -> u32 {
    return select((lo >> 16u) | (hi << 16u), hi, odd);
}

// The f16 at the block's bytes 4j .. 4j + 2, from word j (counted as for `straddle`).
fn half_at(aj: u32, odd: bool) -> f32 {
    let h = unpack2x16float(aj);
    return select(h.x, h.y, odd);
}

// The four signed bytes of v, lowest first, as f32.
fn i8x4(v: u32) -> vec4<f32> {
    let s = bitcast<vec4<i32>>(vec4<u32>(v << 24u, v << 16u, v << 8u, v)) >> vec4<u32>(24u);
    return vec4<f32>(s);
}

// The low nibbles of v's four bytes, lowest byte first.
fn lo4(v: u32) -> vec4<f32> {
    return vec4<f32>((vec4<u32>(v) >> vec4<u32>(0u, 8u, 16u, 24u)) & vec4<u32>(15u));
}

// The high nibbles of v's four bytes, lowest byte first.
fn hi4(v: u32) -> vec4<f32> {
    return vec4<f32>((vec4<u32>(v) >> vec4<u32>(4u, 12u, 20u, 28u)) & vec4<u32>(15u));
}

fn matvec_quant(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) {
    let first = (wid.y * nwg.x + wid.x) * ROWS;
    let units = p.cols / UNIT;
    var acc: array<f32, ROWS>;
    for (var u = lid; u < units; u += WG) {
        var xs: array<vec4<f32>, UNIT_X>;
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
        y[p.y_offset + first + lid] = partial[lid * WG];
    }
}

// The contiguous x of a unit: elements UNIT·u .. UNIT·(u + 1).
fn load_x_run(u: u32, xs: ptr<function, array<vec4<f32>, UNIT_X>>) {
    for (var i = 0u; i < UNIT_X; i++) {
        (*xs)[i] = x[UNIT_X * u + i];
    }
}
