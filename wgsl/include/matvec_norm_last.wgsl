// The end of the matvec_f16_*_add_rmsnorm kernels: after the product has added its rows into the
// residual stream (y += W x, matvec_accumulate's addition), the workgroup that finishes last
// norms the whole stream into h = rmsnorm(y) * nw — add_rmsnorm's result, bit for bit, without
// a norm dispatch (and the barrier and launch before it) after the product.
//
// Every workgroup, once its rows are stored, passes a storage barrier (its stores released at
// device scope) and counts itself in `arrivals[0]`; the one that takes the last ticket passes a
// second (acquire) and reads the stream through `stream`, the same buffer as `y` bound as
// atomics: an atomic load is coherent at device scope, where a plain load could hit a cache
// line that another workgroup's neighbouring rows brought in before they were stored. It then
// sets `arrivals[0]` back to 0 for the next dispatch. Nothing waits on another workgroup, so
// no dispatch order or residency can stall it.
//
// `stream` and `y` are one buffer bound twice (plain stores by the product, atomics after the
// barrier); naga decorates neither `Aliased`, so no access to one may be reordered across the
// barriers around the other's — which the barriers already forbid.
//
// The includer sets its product's constants (ROWS or ROWS_PER_THREAD, ...) and NORM_IN_HALVES
// (true for a workgroup of 128, false for 256), includes its product (with
// matvec_f16_group.wgsl), norm_tail.wgsl and norm_scale.wgsl, and declares
// `alias MatvecImmediates = MatvecNormParams;`.

struct MatvecNormParams {
    rows: u32,
    cols: u32,
    // 0: the stream is a tensor of its own.
    y_offset: u32,
    // 1: the product adds into the stream.
    accumulate: u32,
    eps: f32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(3) var<storage, read> nw: array<f32>;
@group(0) @binding(4) var<storage, read_write> h: array<f32>;
@group(0) @binding(5) var<storage, read_write> stream: array<atomic<u32>>;
@group(0) @binding(6) var<storage, read_write> arrivals: array<atomic<u32>>;

var<workgroup> is_last: u32;

fn norm_len() -> u32 {
    return p.rows;
}

fn norm_eps() -> f32 {
    return p.eps;
}

// The stream's element i (after every workgroup's store), or 0 past it.
fn get_x(i: u32) -> f32 {
    if (i < p.rows) {
        return bitcast<f32>(atomicLoad(&stream[i]));
    }
    return 0.0;
}

// nw[i], or 0 past the stream.
fn get_w(i: u32) -> f32 {
    if (i < p.rows) {
        return nw[i];
    }
    return 0.0;
}

// Stores v as h[i] (nothing past the stream).
fn put_y(i: u32, v: f32) {
    if (i < p.rows) {
        h[i] = v;
    }
}

// Called by every thread after the product's stores: the last workgroup norms the stream.
fn norm_by_last(nwg: vec3<u32>, lid: u32) {
    storageBarrier();
    if (lid == 0u) {
        let ticket = atomicAdd(&arrivals[0], 1u);
        is_last = select(0u, 1u, ticket + 1u == nwg.x * nwg.y);
    }
    if (workgroupUniformLoad(&is_last) == 0u) {
        return;
    }
    storageBarrier();
    if (NORM_IN_HALVES) {
        rmsnorm_of_x_in_halves(lid);
    } else {
        rmsnorm_of_x(lid);
    }
    if (lid == 0u) {
        atomicStore(&arrivals[0], 0u);
    }
}
