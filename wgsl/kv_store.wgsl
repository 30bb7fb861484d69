// kv_store: one decode step's keys and values into the caches, every head in one dispatch:
// for head h < heads and i < dim, k_cache[(h * max_seq + pos) * dim + i] = k[h * dim + i], and
// the same for v. Moves 32-bit words, so the caches hold exactly the bits of k and v.

struct KvStoreParams {
    heads: u32,
    dim: u32,
    pos: u32,
    max_seq: u32,
}

@group(0) @binding(0) var<storage, read> k: array<u32>;
@group(0) @binding(1) var<storage, read> v: array<u32>;
@group(0) @binding(2) var<storage, read_write> k_cache: array<u32>;
@group(0) @binding(3) var<storage, read_write> v_cache: array<u32>;
@group(0) @binding(4) var<storage, read> position: array<u32>;
var<immediate> p: KvStoreParams;

// The step's position: `p.pos` plus the counter `position[0]`, which the decoder's GPU work
// advances every token (so a recorded token can be replayed); 0 for a single call.
fn step_pos() -> u32 {
    return p.pos + position[0];
}

@compute @workgroup_size(256)
fn kv_store(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let pos = step_pos();
    // A counter past the cache (the host checks first) stores nothing.
    if (pos >= p.max_seq) {
        return;
    }
    let total = p.heads * p.dim;
    let stride = nwg.x * 256u;
    for (var t = gid.x; t < total; t += stride) {
        let at = ((t / p.dim) * p.max_seq + pos) * p.dim + t % p.dim;
        k_cache[at] = k[t];
        v_cache[at] = v[t];
    }
}
