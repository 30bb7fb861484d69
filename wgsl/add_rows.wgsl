// add_rows: y[t, i] += b[i] for `positions` rows of n f32 — a bias on every row of the prompt.

struct AddRowsParams {
    n: u32,
    positions: u32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<storage, read> b: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
var<immediate> p: AddRowsParams;

@compute @workgroup_size(256)
fn add_rows(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let total = p.positions * p.n;
    let stride = nwg.x * 256u;
    for (var i = gid.x; i < total; i += stride) {
        y[i] += b[i % p.n];
    }
}
