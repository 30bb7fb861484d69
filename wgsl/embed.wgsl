// embed_f16: x = f32(E[token]) where E is an f16 [vocab, n] matrix and the token id is read
// from a device buffer (written by the host each step, so the command buffer is the same).

struct EmbedParams {
    n: u32,
    vocab: u32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<storage, read> table: array<u32>;
@group(0) @binding(1) var<storage, read> token: array<u32>;
@group(0) @binding(2) var<storage, read_write> x: array<f32>;
var<immediate> p: EmbedParams;

@compute @workgroup_size(256)
fn embed_f16(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let t = min(token[0], p.vocab - 1u);
    let stride = nwg.x * 256u;
    for (var i = gid.x; i < p.n; i += stride) {
        let idx = t * p.n + i;
        let pair = unpack2x16float(table[idx >> 1u]);
        x[i] = select(pair.x, pair.y, (idx & 1u) == 1u);
    }
}
