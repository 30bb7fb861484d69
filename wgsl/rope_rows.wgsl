// rope_rows: rotary position embedding in place on `positions` rows of `heads` vectors of `dim`
// f32, row t at position `first + t` — rope.wgsl's rotation (the same angle formula, so the
// same bits as a decode step's at that position), every row in one dispatch.

struct RowsRopeParams {
    heads: u32,
    dim: u32,
    first: u32,
    positions: u32,
    base: f32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<storage, read_write> v: array<f32>;
var<immediate> p: RowsRopeParams;

@compute @workgroup_size(256)
fn rope_rows(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let half = p.dim / 2u;
    let per_row = p.heads * half;
    let total = p.positions * per_row;
    let stride = nwg.x * 256u;
    for (var t = gid.x; t < total; t += stride) {
        let row = t / per_row;
        let h = (t % per_row) / half;
        let i = t % half;
        let pos = p.first + row;
        let theta = f32(pos) * pow(p.base, -2.0 * f32(i) / f32(p.dim));
        let c = cos(theta);
        let s = sin(theta);
        let at = row * p.heads * p.dim + h * p.dim + i;
        let a = v[at];
        let b = v[at + half];
        v[at] = a * c - b * s;
        v[at + half] = a * s + b * c;
    }
}
