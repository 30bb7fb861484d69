// argmax_pair: the largest of n f32 values and its index + index_offset (ties to the lowest
// index), written as two f32 into out[2 * slot] (value) and out[2 * slot + 1] (index, exact
// below 2^24). Each member writes its own slot of a zeroed pair tensor; an all-reduce (sum)
// then gives every member every member's pair, exactly. An empty slice writes (-3.4e38, -1).
// One workgroup.

struct ArgmaxParams {
    n: u32,
    index_offset: u32,
    slot: u32,
    _pad: u32,
}

@group(0) @binding(0) var<storage, read> v: array<f32>;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;
var<immediate> p: ArgmaxParams;

var<workgroup> best_v: array<f32, 256>;
var<workgroup> best_i: array<u32, 256>;

@compute @workgroup_size(256)
fn argmax_pair(@builtin(local_invocation_index) lid: u32) {
    var bv = -3.4e38;
    var bi = 0xffffffffu;
    for (var i = lid; i < p.n; i += 256u) {
        if (v[i] > bv || bi == 0xffffffffu) {
            bv = v[i];
            bi = i;
        }
    }
    best_v[lid] = bv;
    best_i[lid] = bi;
    workgroupBarrier();
    for (var s = 128u; s > 0u; s >>= 1u) {
        if (lid < s) {
            let ov = best_v[lid + s];
            let oi = best_i[lid + s];
            let better = ov > best_v[lid] || (ov == best_v[lid] && oi < best_i[lid]);
            if (oi != 0xffffffffu && (best_i[lid] == 0xffffffffu || better)) {
                best_v[lid] = ov;
                best_i[lid] = oi;
            }
        }
        workgroupBarrier();
    }
    if (lid == 0u) {
        out[2u * p.slot] = best_v[0];
        out[2u * p.slot + 1u] = select(f32(best_i[0] + p.index_offset), -1.0, best_i[0] == 0xffffffffu);
    }
}
