// The unit of the 32-element formats' products with 8-bit x by whole blocks (matvec_q8_0_q8,
// matvec_q4_0_q8, matvec_q4_1_q8): x's block u (`XBlock`). Needs matvec_q8_blocks.wgsl.

alias XUnit = XBlock;

fn load_x(u: u32, xs: ptr<function, XUnit>) {
    *xs = x_block(u);
}
