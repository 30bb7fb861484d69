// embed_rows: x[t] = f32(E[tokens[t]]) for each of `positions` tokens, E an f16 [vocab, n]
// table — the prompt's embedding, every position in one dispatch (ids past the end are clamped
// to the last row; the host checks them first).

struct EmbedRowsParams {
    n: u32,
    vocab: u32,
    positions: u32,
    _pad0: u32,
}

@group(0) @binding(0) var<storage, read> table: array<u32>;
@group(0) @binding(1) var<storage, read> tokens: array<u32>;
@group(0) @binding(2) var<storage, read_write> x: array<f32>;
var<immediate> p: EmbedRowsParams;

@compute @workgroup_size(256)
fn embed_rows(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let total = p.positions * p.n;
    let stride = nwg.x * 256u;
    for (var i = gid.x; i < total; i += stride) {
        let t = min(tokens[i / p.n], p.vocab - 1u);
        let idx = t * p.n + i % p.n;
        let pair = unpack2x16float(table[idx >> 1u]);
        x[i] = select(pair.x, pair.y, (idx & 1u) == 1u);
    }
}
