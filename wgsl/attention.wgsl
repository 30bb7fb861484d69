// attention_decode: one new token's attention over the KV cache, one workgroup per query head.
// q is [q_heads, dim]; caches are [kv_heads, max_seq, dim]; query head h reads kv head
// h / group (grouped-query attention). Scores for positions 0..=pos go to `scores`
// ([q_heads, max_seq]), then softmax (max-subtracted, fixed-order reductions) and the
// weighted sum of V into out ([q_heads, dim]).
//
// Where a decode step waits: each position's score is a dot product of `dim` terms, and a
// thread that computed it alone waited one memory latency per batch of 16 loads (8 for a head
// of 128); the weighted sum of V waited one per 16 positions. So a position's dot product is
// cut over SEG = 8 threads (dims seg, seg + 8, ...: one batch for a head of 128), 32 positions
// at a time, their partials added in a fixed order; and where a head has at most 128
// dimensions, the positions of the weighted sum are dealt over 256 / dim threads per
// dimension, whose partial sums meet in a fixed order too (docs/BENCHMARKS.md, "Attention").

struct AttentionParams {
    q_heads: u32,
    dim: u32,
    group: u32,
    pos: u32,
    max_seq: u32,
    scale: f32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<storage, read> q: array<f32>;
@group(0) @binding(1) var<storage, read> k_cache: array<f32>;
@group(0) @binding(2) var<storage, read> v_cache: array<f32>;
@group(0) @binding(3) var<storage, read_write> scores: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;
@group(0) @binding(5) var<storage, read> position: array<u32>;
var<immediate> p: AttentionParams;

// #include "attention_decode_body.wgsl"

// out = o / total: the softmax's normalisation (the reciprocal, then the product).
fn emit(h: u32, d: u32, o: f32, total: f32) {
    out[h * p.dim + d] = o * (1.0 / total);
}

// Nothing else to keep: one workgroup saw every position.
fn emit_stats(h: u32, mx: f32, total: f32) {}

@compute @workgroup_size(256)
fn attention_decode(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let h = wid.x;
    if (h >= p.q_heads) {
        return;
    }
    // Positions 0..=pos, never past the cache (the host checks first).
    attend(h, 0u, min(step_pos() + 1u, p.max_seq), lid);
}
