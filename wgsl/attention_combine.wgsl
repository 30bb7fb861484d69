// attention_combine: attention_split's parts of each query head into out ([q_heads, dim]):
// M the largest of the live parts' maxima, each part weighed by exp(m_c - M),
// out[d] = Σ_c o_c[d]·w_c / Σ_c l_c·w_c, the parts in order. A part is live where the step's
// positions reach its chunk (the step's position from the counter, as attention_split reads it).

struct AttentionCombineParams {
    q_heads: u32,
    dim: u32,
    pos: u32,
    max_seq: u32,
    chunk: u32,
    chunks: u32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<storage, read> partials: array<f32>;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;
@group(0) @binding(2) var<storage, read> position: array<u32>;
var<immediate> p: AttentionCombineParams;

@compute @workgroup_size(256)
fn attention_combine(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let h = wid.x;
    if (h >= p.q_heads) {
        return;
    }
    let len = min(p.pos + position[0] + 1u, p.max_seq);
    let live = min((len + p.chunk - 1u) / p.chunk, p.chunks);
    let stride = p.dim + 2u;
    let hb = h * p.chunks * stride;
    var mx = -3.4e38;
    for (var c = 0u; c < live; c++) {
        mx = max(mx, partials[hb + c * stride + p.dim]);
    }
    var total = 0.0;
    for (var c = 0u; c < live; c++) {
        let at = hb + c * stride + p.dim;
        total += partials[at + 1u] * exp(partials[at] - mx);
    }
    let inv = 1.0 / total;
    for (var d = lid; d < p.dim; d += 256u) {
        var o = 0.0;
        for (var c = 0u; c < live; c++) {
            let at = hb + c * stride;
            o += partials[at + d] * exp(partials[at + p.dim] - mx);
        }
        out[h * p.dim + d] = o * inv;
    }
}
