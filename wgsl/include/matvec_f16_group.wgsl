// One step of every f16 matrix–vector kernel for cols % 8 == 0: a weight group of eight f16
// (one vec4<u32>, 16 bytes) against x's columns 8g .. 8g + 7 (two vec4<f32>), added to a
// thread's running sum. The includer declares `x` (array<vec4<f32>>) and `PAIRED`: whether the
// group's two four-element dot products are added together before the running sum (the
// eight-row kernel) or one after the other.

fn add_group(acc: f32, v: vec4<u32>, g: u32) -> f32 {
    return add_group_x(acc, v, x[2u * g], x[2u * g + 1u]);
}

// add_group with x's columns 8g .. 8g + 7 already loaded (a thread that uses them for several
// rows): the same expressions.
fn add_group_x(acc: f32, v: vec4<u32>, x0: vec4<f32>, x1: vec4<f32>) -> f32 {
    let lo = dot(vec4<f32>(unpack2x16float(v.x), unpack2x16float(v.y)), x0);
    let hi = dot(vec4<f32>(unpack2x16float(v.z), unpack2x16float(v.w)), x1);
    if (PAIRED) {
        return acc + (lo + hi);
    }
    return acc + lo + hi;
}
