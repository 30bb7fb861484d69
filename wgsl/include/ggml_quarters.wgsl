// The quarter-block units of the 32-element formats, read from the weights, for the kernels
// that take them a quarter block at a time (matvec_*_wide with f32 x, matvec_*_q8 with 8-bit
// x): unit u of `row` is a quarter of its block u / 4. Needs `w` and `p` (the bindings of
// matvec_quant_blocks.wgsl or matvec_q8_blocks.wgsl) and ggml_words.wgsl.

// Q8_0 (34-byte blocks, half a word off for odd blocks): qs bytes 8k .. 8k + 8 of the unit's
// quarter k as two words (elements 8k .. 8k + 4, 8k + 4 .. 8k + 8), and the block's d.
struct Q8_0Quarter {
    lo: u32,
    hi: u32,
    d: f32,
}

fn q8_0_quarter(row: u32, u: u32) -> Q8_0Quarter {
    let g = row * (p.cols / 32u) + (u >> 2u);
    let base = (17u * g) >> 1u;
    let odd = (g & 1u) == 1u;
    let j = base + 2u * (u & 3u);
    let a0 = w[j];
    let a1 = w[j + 1u];
    let a2 = w[j + 2u];
    return Q8_0Quarter(after_half(a0, a1, odd), after_half(a1, a2, odd), half_at(w[base], odd));
}

// Q4_0 (18-byte blocks, half a word off for odd blocks): qs bytes 4k .. 4k + 4 of quarter k
// (low nibbles elements 4k .. 4k + 4, high nibbles 16 + 4k .. 20 + 4k), and the block's d.
struct Q4_0Quarter {
    q: u32,
    d: f32,
}

fn q4_0_quarter(row: u32, u: u32) -> Q4_0Quarter {
    let g = row * (p.cols / 32u) + (u >> 2u);
    let base = (9u * g) >> 1u;
    let odd = (g & 1u) == 1u;
    let k = u & 3u;
    return Q4_0Quarter(after_half(w[base + k], w[base + k + 1u], odd), half_at(w[base], odd));
}

// Q4_1 (20-byte blocks, on words): qs word k of quarter k (nibbles as Q4_0's), and the
// block's d and m.
struct Q4_1Quarter {
    q: u32,
    dm: vec2<f32>,
}

fn q4_1_quarter(row: u32, u: u32) -> Q4_1Quarter {
    let base = 5u * (row * (p.cols / 32u) + (u >> 2u));
    return Q4_1Quarter(w[base + 1u + (u & 3u)], unpack2x16float(w[base]));
}
