// rmsnorm_rows: for each of `positions` rows of n f32, optionally x += r first (`add` = 1: the
// residual add), then y = x / sqrt(mean(x^2) + eps) * w — the prompt's norms, one workgroup per
// row. A thread squares elements lid, lid + 256, … in that order and the sums meet in rmsnorm's
// fixed-order tree (norm_scale.wgsl), so a row gets the bits the decode step's norm gives the
// same x.

struct RowsNormParams {
    n: u32,
    eps: f32,
    positions: u32,
    add: u32,
}

@group(0) @binding(0) var<storage, read> r: array<f32>;
@group(0) @binding(1) var<storage, read> w: array<f32>;
@group(0) @binding(2) var<storage, read_write> x: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
var<immediate> p: RowsNormParams;

// #include "norm_scale.wgsl"

@compute @workgroup_size(256)
fn rmsnorm_rows(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    // No return before the barriers: a row past the end sums nothing and stores nothing.
    let row = wid.x;
    let live = row < p.positions;
    let base = row * p.n;
    var acc = 0.0;
    for (var i = lid; live && i < p.n; i += 256u) {
        var v = x[base + i];
        if (p.add == 1u) {
            v += r[base + i];
            x[base + i] = v;
        }
        acc += v * v;
    }
    let scale = norm_scale(lid, acc);
    for (var i = lid; live && i < p.n; i += 256u) {
        y[base + i] = x[base + i] * scale * w[i];
    }
}
