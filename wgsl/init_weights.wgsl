// init_weights_f16: fills a slice of a logical [rows, cols] f16 matrix with deterministic
// pseudo-random values, so a model's weights are generated on the device instead of uploaded.
// Element (r, c) of the slice is element (row_offset + r, col_offset + c) of the logical
// matrix, and its value depends only on (seed, logical index): a member holding a slice gets
// exactly the values the one-device model holds there.
//
// Values are k * 2^-shift with k an integer in [-1024, 1023]: exactly representable in f16
// (11-bit significand), so the CPU twin (src/tp/init.rs) reproduces them bit for bit whatever
// rounding the driver's pack2x16float uses.

struct InitWeightsParams {
    seed: u32,
    rows: u32,
    cols: u32,
    full_cols: u32,
    row_offset: u32,
    col_offset: u32,
    shift: u32,
    _pad: u32,
}

@group(0) @binding(0) var<storage, read_write> dst: array<u32>;
var<immediate> p: InitWeightsParams;

fn pcg(x: u32) -> u32 {
    let s = x * 747796405u + 2891336453u;
    let w = ((s >> ((s >> 28u) + 4u)) ^ s) * 277803737u;
    return (w >> 22u) ^ w;
}

fn value(local: u32) -> f32 {
    let r = local / p.cols;
    let c = local % p.cols;
    let idx = (p.row_offset + r) * p.full_cols + p.col_offset + c;
    let h = pcg(idx ^ pcg(p.seed));
    let k = i32(h >> 21u) - 1024;
    return f32(k) * exp2(-f32(p.shift));
}

@compute @workgroup_size(256)
fn init_weights_f16(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let n = p.rows * p.cols;
    let words = (n + 1u) / 2u;
    let stride = nwg.x * 256u;
    for (var w = gid.x; w < words; w += stride) {
        let e = 2u * w;
        var hi = 0.0;
        if (e + 1u < n) {
            hi = value(e + 1u);
        }
        dst[w] = pack2x16float(vec2<f32>(value(e), hi));
    }
}
