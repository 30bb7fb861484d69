//! Deterministic weights, generated on the device by `wgsl/init_weights.wgsl`; this is its CPU
//! twin, bit for bit, for references in tests.

/// The PCG hash used by the kernel.
pub fn pcg(x: u32) -> u32 {
    let s = x.wrapping_mul(747_796_405).wrapping_add(2_891_336_453);
    let w = ((s >> ((s >> 28) + 4)) ^ s).wrapping_mul(277_803_737);
    (w >> 22) ^ w
}

/// Element `index` (row * full_cols + col) of the matrix drawn from `seed`: `k·2^-shift`, `k`
/// an integer in [-1024, 1023], exactly representable in f16.
#[cfg_attr(not(feature = "test-hooks"), allow(dead_code))]
pub fn weight(seed: u32, index: u32, shift: u32) -> f32 {
    let h = pcg(index ^ pcg(seed));
    let k = (h >> 21) as i32 - 1024;
    k as f32 * (-(shift as f32)).exp2()
}

/// The shift that gives a fan-in of `k` an amplitude near sqrt(3/k) (unit output variance for
/// unit-variance inputs).
pub fn shift_for_fan_in(k: usize) -> u32 {
    let amplitude = (3.0 / k.max(1) as f64).sqrt();
    (1024.0 / amplitude).log2().round().clamp(0.0, 24.0) as u32
}

/// A seed for matrix `id` of layer `layer` of the model drawn from `seed`.
pub fn matrix_seed(seed: u32, layer: usize, id: u32) -> u32 {
    pcg(seed ^ pcg((layer as u32).wrapping_mul(64).wrapping_add(id)))
}
