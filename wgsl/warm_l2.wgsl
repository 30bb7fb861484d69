// warm_l2: reads the first sectors of up to three buffers (one 32-bit word per 32-byte
// sector, the unit the memory fetches into the last-level cache), so that those lines are in
// the GPU's L2 when the next product streams them. Its result is nothing.
//
// Why: a decode step's norms and attention keep one workgroup, or one per head, busy for
// 9-11 µs while the rest of the GPU waits for them (docs/BENCHMARKS.md, "Weights warmed
// into L2"). The decoder dispatches this kernel right after such a dispatch with no barrier
// between them (it reads only weights, which nothing writes, and writes only `sink`), so the
// idle multiprocessors bring in the next product's first weights meanwhile.
//
// Workgroup g reads buffer a for g < groups_a, b for the next groups_b, then c; each reads
// SECTORS consecutive sectors from its first, all eight loads of a thread issued before their
// sum. A thread stores into `sink` only where the xor of its words equals `key`, so the
// compiler must keep the loads; what `sink` ends up holding means nothing.

struct WarmParams {
    sectors_a: u32,
    sectors_b: u32,
    sectors_c: u32,
    groups_a: u32,
    groups_b: u32,
    key: u32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<storage, read> a: array<u32>;
@group(0) @binding(1) var<storage, read> b: array<u32>;
@group(0) @binding(2) var<storage, read> c: array<u32>;
@group(0) @binding(3) var<storage, read_write> sink: array<atomic<u32>>;
var<immediate> p: WarmParams;

// Sectors one workgroup reads: eight per thread.
const SECTORS: u32 = 2048u;
// 32-bit words per 32-byte sector.
const WORDS: u32 = 8u;

// Word i of buffer `which` (0 a, 1 b, 2 c; the same for a whole workgroup).
fn word(which: u32, i: u32) -> u32 {
    if (which == 0u) {
        return a[i];
    } else if (which == 1u) {
        return b[i];
    }
    return c[i];
}

// The xor of the first words of sectors first + 256 k (k < 8) of buffer `which`, of which the
// first `sectors` are read.
fn read_eight(which: u32, first: u32, sectors: u32) -> u32 {
    var acc = 0u;
    for (var k = 0u; k < 8u; k++) {
        let s = first + k * 256u;
        if (s < sectors) {
            acc ^= word(which, s * WORDS);
        }
    }
    return acc;
}

@compute @workgroup_size(256)
fn warm_l2(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let g = wid.y * nwg.x + wid.x;
    var acc = 0u;
    if (g < p.groups_a) {
        acc = read_eight(0u, g * SECTORS + lid, p.sectors_a);
    } else if (g < p.groups_a + p.groups_b) {
        acc = read_eight(1u, (g - p.groups_a) * SECTORS + lid, p.sectors_b);
    } else {
        acc = read_eight(2u, (g - p.groups_a - p.groups_b) * SECTORS + lid, p.sectors_c);
    }
    if (acc == p.key) {
        atomicMax(&sink[0], acc);
    }
}
