// select_token: greedy choice from the gathered (value, index) pairs of every member: the
// largest value, ties to the lowest index; pairs with index -1 (empty vocabulary slices) are
// skipped. Writes the token to token[0] (the next step's embedding reads it) and to
// history[step]. One thread: N is small. With `advance`, the position counter moves on to the
// next step (the decoder's last kernel of a token).

struct SelectTokenParams {
    members: u32,
    step: u32,
    advance: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<storage, read> pairs: array<f32>;
@group(0) @binding(1) var<storage, read_write> token: array<u32>;
@group(0) @binding(2) var<storage, read_write> history: array<u32>;
@group(0) @binding(3) var<storage, read_write> position: array<u32>;
var<immediate> p: SelectTokenParams;

@compute @workgroup_size(1)
fn select_token() {
    var bv = 0.0;
    var bi = -1.0;
    for (var j = 0u; j < p.members; j++) {
        let v = pairs[2u * j];
        let i = pairs[2u * j + 1u];
        if (i >= 0.0 && (bi < 0.0 || v > bv || (v == bv && i < bi))) {
            bv = v;
            bi = i;
        }
    }
    let t = u32(max(bi, 0.0));
    token[0] = t;
    // The step is p.step plus the counter; past the history (the host checks first) it is
    // not stored.
    let step = p.step + position[0];
    if (step < arrayLength(&history)) {
        history[step] = t;
    }
    if (p.advance != 0u) {
        position[0] = position[0] + 1u;
    }
}
