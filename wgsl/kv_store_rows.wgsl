// kv_store_rows: `positions` rows of keys and values ([positions, heads, dim] each) into the
// caches [heads, max_seq, dim] at positions first, first + 1, … — kv_store.wgsl for the
// prompt, every row in one dispatch. Moves words: the caches hold exactly k's and v's bits.
// A position past the cache (the host checks first) stores nothing.

struct RowsKvParams {
    heads: u32,
    dim: u32,
    first: u32,
    positions: u32,
    max_seq: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<storage, read> k: array<u32>;
@group(0) @binding(1) var<storage, read> v: array<u32>;
@group(0) @binding(2) var<storage, read_write> k_cache: array<u32>;
@group(0) @binding(3) var<storage, read_write> v_cache: array<u32>;
var<immediate> p: RowsKvParams;

@compute @workgroup_size(256)
fn kv_store_rows(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let per_row = p.heads * p.dim;
    let total = p.positions * per_row;
    let stride = nwg.x * 256u;
    for (var t = gid.x; t < total; t += stride) {
        let pos = p.first + t / per_row;
        if (pos < p.max_seq) {
            let e = t % per_row;
            let at = ((e / p.dim) * p.max_seq + pos) * p.dim + e % p.dim;
            k_cache[at] = k[t];
            v_cache[at] = v[t];
        }
    }
}
