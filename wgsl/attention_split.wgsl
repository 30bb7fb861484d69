// attention_split: attention_decode cut over the positions (flash-decoding): workgroup (h, c)
// takes query head h over positions c·chunk .. (c + 1)·chunk of 0..=pos, with attention_decode's
// code (wgsl/include/attention_decode_body.wgsl) on that range, and leaves its part unnormalised
// in `partials` ([q_heads, chunks, dim + 2]: the weighted sum of V against its own maximum,
// then that maximum and the sum of its exponentials); attention_combine then weighs the parts
// by exp(their maximum - the largest) into out. One workgroup per head walks its positions
// PASS at a time, so a long cache kept 40 workgroups busy for hundreds of microseconds; cut,
// the positions spread over q_heads · chunks workgroups. Workgroups past the step's last
// position leave at once (the dispatch covers the whole cache: the step is the same commands at
// every position).

struct AttentionSplitParams {
    q_heads: u32,
    dim: u32,
    group: u32,
    pos: u32,
    max_seq: u32,
    scale: f32,
    chunk: u32,
    chunks: u32,
}

@group(0) @binding(0) var<storage, read> q: array<f32>;
@group(0) @binding(1) var<storage, read> k_cache: array<f32>;
@group(0) @binding(2) var<storage, read> v_cache: array<f32>;
@group(0) @binding(3) var<storage, read_write> scores: array<f32>;
@group(0) @binding(4) var<storage, read_write> partials: array<f32>;
@group(0) @binding(5) var<storage, read> position: array<u32>;
var<immediate> p: AttentionSplitParams;

// #include "attention_decode_body.wgsl"

// Where head h's part c starts in `partials`.
fn part_at(h: u32, c: u32) -> u32 {
    return (h * p.chunks + c) * (p.dim + 2u);
}

var<private> chunk_index: u32;

fn emit(h: u32, d: u32, o: f32, total: f32) {
    partials[part_at(h, chunk_index) + d] = o;
}

fn emit_stats(h: u32, mx: f32, total: f32) {
    let at = part_at(h, chunk_index) + p.dim;
    partials[at] = mx;
    partials[at + 1u] = total;
}

@compute @workgroup_size(256)
fn attention_split(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let h = wid.x;
    let c = wid.y;
    // Positions 0..=pos, never past the cache (the host checks first).
    let len = min(step_pos() + 1u, p.max_seq);
    let start = c * p.chunk;
    if (h >= p.q_heads || c >= p.chunks || start >= len) {
        return;
    }
    chunk_index = c;
    attend(h, start, min(start + p.chunk, len), lid);
}
