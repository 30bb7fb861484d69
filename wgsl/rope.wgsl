// rope: rotary position embedding in place on `heads` vectors of `dim` f32 (dim even): for
// each pair (i, i + dim/2), rotate by angle pos * base^(-2i/dim).

struct RopeParams {
    heads: u32,
    dim: u32,
    pos: u32,
    base: f32,
}

@group(0) @binding(0) var<storage, read_write> v: array<f32>;
@group(0) @binding(1) var<storage, read> position: array<u32>;
var<immediate> p: RopeParams;

// The step's position: `p.pos` plus the counter `position[0]`, which the decoder's GPU work
// advances every token (so a recorded token can be replayed); 0 for a single call.
fn step_pos() -> u32 {
    return p.pos + position[0];
}

@compute @workgroup_size(256)
fn rope(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let half = p.dim / 2u;
    let pos = step_pos();
    let total = p.heads * half;
    let stride = nwg.x * 256u;
    for (var t = gid.x; t < total; t += stride) {
        let h = t / half;
        let i = t % half;
        let theta = f32(pos) * pow(p.base, -2.0 * f32(i) / f32(p.dim));
        let c = cos(theta);
        let s = sin(theta);
        let a = v[h * p.dim + i];
        let b = v[h * p.dim + i + half];
        v[h * p.dim + i] = a * c - b * s;
        v[h * p.dim + i + half] = a * s + b * c;
    }
}
