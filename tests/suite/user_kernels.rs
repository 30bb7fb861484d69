//! Kernels a user writes (`crossgpu::kernels`): compiled from WGSL at run time, dispatched on
//! every member of a group against CPU twins (bitwise where the arithmetic is exact, within a
//! derived bound otherwise), bound to views, uniforms and immediates, inside a step recorded once
//! and replayed, between all-reduce rounds of every mode; and every misuse an error naming the
//! binding or field. The validation layer is on; any error it reports fails the test.

use crate::common::{self, serial};
use crossgpu::dispatch::{Arg, Immediates, MemberDispatch};
use crossgpu::kernels::Kernel;
use crossgpu::{AllReduceOptions, Comm, CommOptions, DType, Error, Mode, ModeRequest, Step, Tensor};

/// `y[i] = gelu(x[i] + b[i % cols])` (tanh form), rows of `cols`.
const BIAS_GELU: &str = "
struct Shape { n: u32, cols: u32 }
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
var<immediate> shape: Shape;
@compute @workgroup_size(64)
fn bias_gelu(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = id.x + id.y * 65535u * 64u;
    if i >= shape.n { return; }
    let v = x[i] + b[i % shape.cols];
    let t = tanh(0.7978845608 * (v + 0.044715 * v * v * v));
    y[i] = 0.5 * v * (1.0 + t);
}";

/// Integer arithmetic, exact on every device: `out[i] = (a[i] * k + i) ^ mask` in u32 and the
/// same in i32 with a negative step.
const EXACT: &str = "
struct P { n: u32, k: u32, mask: u32, step: i32 }
@group(0) @binding(0) var<storage, read> a: array<u32>;
@group(0) @binding(1) var<storage, read_write> out: array<u32>;
@group(0) @binding(2) var<storage, read_write> signed: array<i32>;
var<immediate> p: P;
@compute @workgroup_size(64)
fn exact(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = id.x;
    if i >= p.n { return; }
    out[i] = (a[i] * p.k + i) ^ p.mask;
    signed[i] = i32(a[i] % 1000u) * p.step - i32(i);
}";

/// A row softmax: one workgroup of `BLOCK` threads per row, with shared memory; the scale comes
/// from a uniform, `BLOCK` is an override.
const SOFTMAX: &str = "
struct Rows { cols: u32, rows: u32 }
struct Scale { s: f32, _a: f32, _b: f32, _c: f32 }
override BLOCK: u32 = 64u;
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@group(0) @binding(2) var<uniform> scale: Scale;
var<immediate> r: Rows;
var<workgroup> part: array<f32, BLOCK>;
@compute @workgroup_size(BLOCK)
fn softmax(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let row = wg.x;
    if row >= r.rows { return; }
    let base = row * r.cols;
    var m = -3.0e38;
    for (var c = lid.x; c < r.cols; c += BLOCK) { m = max(m, x[base + c] * scale.s); }
    part[lid.x] = m;
    workgroupBarrier();
    for (var s = BLOCK / 2u; s > 0u; s /= 2u) {
        if lid.x < s { part[lid.x] = max(part[lid.x], part[lid.x + s]); }
        workgroupBarrier();
    }
    let mx = part[0];
    workgroupBarrier();
    var sum = 0.0;
    for (var c = lid.x; c < r.cols; c += BLOCK) { sum += exp(x[base + c] * scale.s - mx); }
    part[lid.x] = sum;
    workgroupBarrier();
    for (var s = BLOCK / 2u; s > 0u; s /= 2u) {
        if lid.x < s { part[lid.x] += part[lid.x + s]; }
        workgroupBarrier();
    }
    let total = part[0];
    for (var c = lid.x; c < r.cols; c += BLOCK) { y[base + c] = exp(x[base + c] * scale.s - mx) / total; }
}";

fn gelu64(v: f64) -> f64 {
    0.5 * v * (1.0 + (0.7978845608 * (v + 0.044715 * v * v * v)).tanh())
}

#[test]
fn a_users_kernel_matches_its_cpu_twin_on_every_member() {
    let _s = serial();
    let mut rng = common::rng(81);
    let group = common::logical(2);
    let k = Kernel::from_wgsl("bias_gelu.wgsl", BIAS_GELU).unwrap();
    assert_eq!(k.interface().bindings.len(), 3);
    assert!(k.describe().contains("var<immediate> shape: Shape"), "{}", k.describe());
    for (rows, cols) in [(1, 1), (3, 77), (129, 33), (1000, 70)] {
        let n = rows * cols;
        let xs: Vec<Vec<f32>> = group.members().iter().map(|_| common::random(&mut rng, n)).collect();
        let bias = common::random(&mut rng, cols);
        let mut ys = Vec::new();
        for (m, x) in group.members().iter().zip(&xs) {
            let (x, b, y) =
                (m.upload_f32(x).unwrap(), m.upload_f32(&bias).unwrap(), m.empty(&[n], DType::F32).unwrap());
            let imm = Immediates::new().set("n", n as u32).set("cols", cols as u32);
            m.dispatch(
                &k,
                &[Arg::read(&x), Arg::read(&b), Arg::write(&y)],
                &imm,
                [n.div_ceil(64) as u32, 1, 1],
            )
            .unwrap();
            ys.push((y, x, b));
        }
        for ((y, _, _), x) in ys.iter().zip(&xs) {
            let got = y.read().unwrap();
            let want: Vec<f64> = (0..n).map(|i| gelu64(x[i] as f64 + bias[i % cols] as f64)).collect();
            // One rounding of the add and a few ULP of tanh on the device: 2^-18 relative to
            // |v| + 1 bounds every driver's f32 here.
            let bound: Vec<f64> =
                (0..n).map(|i| ((x[i] + bias[i % cols]).abs() as f64 + 1.0) * 4e-6).collect();
            common::assert_within(&format!("bias_gelu {rows}x{cols}"), &got, &want, &bound);
        }
    }
    common::assert_no_validation_errors();
}

#[test]
fn exact_integer_kernels_are_bitwise_their_cpu_twin() {
    let _s = serial();
    let mut rng = common::rng(82);
    let group = common::logical(2);
    let k = Kernel::from_wgsl("exact.wgsl", EXACT).unwrap();
    for n in [1usize, 63, 64, 65, 10_007] {
        let a: Vec<u32> = (0..n).map(|_| rand::Rng::random::<u32>(&mut rng)).collect();
        let (mul, mask, step) = (0x9E37_79B1u32, 0x5A5A_1234u32, -7i32);
        for m in group.members() {
            let ta = m.upload_u32(&a).unwrap();
            let out = m.empty(&[n], DType::U32).unwrap();
            let signed = m.upload_i32(&vec![0; n]).unwrap();
            let imm = Immediates::new().set("n", n as u32).set("k", mul).set("mask", mask).set("step", step);
            m.dispatch(
                &k,
                &[Arg::read(&ta), Arg::write(&out), Arg::write(&signed)],
                &imm,
                [n.div_ceil(64) as u32, 1, 1],
            )
            .unwrap();
            let want: Vec<u32> =
                (0..n).map(|i| (a[i].wrapping_mul(mul).wrapping_add(i as u32)) ^ mask).collect();
            let want_signed: Vec<i32> = (0..n).map(|i| (a[i] % 1000) as i32 * step - i as i32).collect();
            assert_eq!(out.read_u32().unwrap(), want, "u32, n = {n}, {}", m.label());
            assert_eq!(signed.read_i32().unwrap(), want_signed, "i32, n = {n}, {}", m.label());
        }
    }
    common::assert_no_validation_errors();
}

#[test]
fn uniforms_overrides_and_workgroup_memory() {
    let _s = serial();
    let mut rng = common::rng(83);
    let group = common::logical(1);
    let m = &group.members()[0];
    for block in [32.0, 64.0, 256.0] {
        let k = Kernel::builder("softmax.wgsl", SOFTMAX).constant("BLOCK", block).build().unwrap();
        assert_eq!(k.interface().workgroup_size, [block as u32, 1, 1]);
        for (rows, cols) in [(1, 1), (7, 300), (33, 1025)] {
            let x = common::random(&mut rng, rows * cols);
            let s = 1.5f32;
            let (tx, ty) = (m.upload_f32(&x).unwrap(), m.empty(&[rows * cols], DType::F32).unwrap());
            let scale = m.upload_f32(&[s, 0.0, 0.0, 0.0]).unwrap();
            let imm = Immediates::new().set("cols", cols as u32).set("rows", rows as u32);
            m.dispatch(&k, &[Arg::read(&tx), Arg::write(&ty), Arg::read(&scale)], &imm, [rows as u32, 1, 1])
                .unwrap();
            let got = ty.read().unwrap();
            for r in 0..rows {
                let row = &x[r * cols..(r + 1) * cols];
                let mx = row.iter().map(|&v| (v * s) as f64).fold(f64::MIN, f64::max);
                let total: f64 = row.iter().map(|&v| ((v * s) as f64 - mx).exp()).sum();
                for c in 0..cols {
                    let want = (((row[c] * s) as f64) - mx).exp() / total;
                    let g = got[r * cols + c] as f64;
                    // exp and the division: a few ULP each, the sum's cols roundings.
                    let bound = want * (cols as f64 + 8.0) * 2.4e-7 + 1e-30;
                    assert!(
                        (g - want).abs() <= bound,
                        "BLOCK {block}, {rows}x{cols}, [{r}, {c}]: {g} vs {want}"
                    );
                }
            }
        }
    }
    common::assert_no_validation_errors();
}

/// A view binds a range of a tensor: the kernel sees only it, the rest is untouched; f16 and
/// bf16 tensors bind as packed `u32` words.
#[test]
fn views_and_packed_halves() {
    let _s = serial();
    let group = common::logical(1);
    let m = &group.members()[0];
    let k = Kernel::from_wgsl(
        "inc.wgsl",
        "@group(0) @binding(0) var<storage, read_write> x: array<u32>;
         @compute @workgroup_size(64) fn inc(@builtin(global_invocation_id) id: vec3<u32>) {
             if id.x < arrayLength(&x) { x[id.x] = x[id.x] + 1u; } }",
    )
    .unwrap();
    let align = (m.adapter().caps.min_storage_buffer_offset_alignment / 4).max(1) as usize;
    let n = 8 * align;
    let t = m.upload_u32(&(0..n as u32).collect::<Vec<_>>()).unwrap();
    let view = t.view(2 * align, &[3 * align]).unwrap();
    m.dispatch(&k, &[Arg::write(view)], &Immediates::new(), [(3 * align).div_ceil(64) as u32, 1, 1]).unwrap();
    let got = t.read_u32().unwrap();
    for (i, &v) in got.iter().enumerate() {
        let inside = (2 * align..5 * align).contains(&i);
        assert_eq!(v, i as u32 + u32::from(inside), "element {i}");
    }
    // Out of range, and not on the device's alignment.
    assert!(matches!(t.view(6 * align, &[3 * align]), Err(Error::LengthMismatch { .. })));
    if align > 1 {
        let e = m
            .dispatch(&k, &[Arg::write(t.view(1, &[4]).unwrap())], &Immediates::new(), [1, 1, 1])
            .unwrap_err();
        assert!(e.to_string().contains("multiples of"), "{e}");
    }
    // f16 and bf16 halves, two per word: the kernel adds one to each word's low half.
    let halves = common::random(&mut common::rng(84), 64);
    for dtype in [DType::F16, DType::BF16] {
        let h = m.upload(&halves, &[64], dtype).unwrap();
        let before = h.read().unwrap();
        m.dispatch(&k, &[Arg::write(&h)], &Immediates::new(), [1, 1, 1]).unwrap();
        let after = h.read().unwrap();
        assert_eq!(after.len(), 64);
        for i in 0..64 {
            if i % 2 == 1 {
                assert_eq!(
                    after[i].to_bits(),
                    before[i].to_bits(),
                    "{dtype}: the high half of word {}",
                    i / 2
                );
            } else {
                assert_ne!(
                    after[i].to_bits(),
                    before[i].to_bits(),
                    "{dtype}: the low half of word {}",
                    i / 2
                );
            }
        }
    }
    common::assert_no_validation_errors();
}

/// Every misuse is an error naming the binding or field, before anything is recorded; the
/// member and the kernel work on afterwards.
#[test]
fn misuse_is_an_error_naming_the_binding_or_field() {
    let _s = serial();
    let group = common::logical(2);
    let (m0, m1) = (&group.members()[0], &group.members()[1]);
    let k = Kernel::from_wgsl("bias_gelu.wgsl", BIAS_GELU).unwrap();
    let x = m0.upload_f32(&[1.0; 64]).unwrap();
    let b = m0.upload_f32(&[0.5; 8]).unwrap();
    let y = m0.upload_f32(&[0.0; 64]).unwrap();
    let other = m1.upload_f32(&[1.0; 64]).unwrap();
    let words = m0.upload_u32(&[1; 64]).unwrap();
    let imm = || Immediates::new().set("n", 64u32).set("cols", 8u32);
    let msg = |r: crossgpu::Result<()>| r.unwrap_err().to_string();
    let cases: Vec<(&str, String)> = vec![
        (
            "arguments (one per binding",
            msg(m0.dispatch(&k, &[Arg::read(&x), Arg::write(&y)], &imm(), [1, 1, 1])),
        ),
        (
            "binding 0 (x)",
            msg(m0.dispatch(&k, &[Arg::read(&other), Arg::read(&b), Arg::write(&y)], &imm(), [1, 1, 1])),
        ),
        (
            "binding 0 (x)",
            msg(m0.dispatch(&k, &[Arg::read(&words), Arg::read(&b), Arg::write(&y)], &imm(), [1, 1, 1])),
        ),
        (
            "binding 0 (x) is var<storage, read>",
            msg(m0.dispatch(&k, &[Arg::write(&x), Arg::read(&b), Arg::write(&y)], &imm(), [1, 1, 1])),
        ),
        (
            "binding 2 (y): the kernel writes it",
            msg(m0.dispatch(&k, &[Arg::read(&x), Arg::read(&b), Arg::read(&y)], &imm(), [1, 1, 1])),
        ),
        (
            "maxComputeWorkGroupCount",
            msg(m0.dispatch(&k, &[Arg::read(&x), Arg::read(&b), Arg::write(&y)], &imm(), [u32::MAX, 1, 1])),
        ),
        (
            "field cols (u32) is not set",
            msg(m0.dispatch(
                &k,
                &[Arg::read(&x), Arg::read(&b), Arg::write(&y)],
                &Immediates::new().set("n", 64u32),
                [1, 1, 1],
            )),
        ),
        (
            "no field \"rows\"",
            msg(m0.dispatch(
                &k,
                &[Arg::read(&x), Arg::read(&b), Arg::write(&y)],
                &imm().set("rows", 1u32),
                [1, 1, 1],
            )),
        ),
        (
            "field n is u32, given f32",
            msg(m0.dispatch(
                &k,
                &[Arg::read(&x), Arg::read(&b), Arg::write(&y)],
                &Immediates::new().set("n", 64.0f32).set("cols", 8u32),
                [1, 1, 1],
            )),
        ),
        (
            "the Pod value is 4 bytes",
            msg(m0.dispatch(
                &k,
                &[Arg::read(&x), Arg::read(&b), Arg::write(&y)],
                &Immediates::from_pod(&7u32),
                [1, 1, 1],
            )),
        ),
    ];
    for (want, got) in &cases {
        assert!(got.contains(want), "expected an error containing {want:?}, got {got:?}");
    }
    // A Pod block of the right layout works, and nothing above wrote y.
    assert_eq!(y.read().unwrap(), vec![0.0; 64]);
    m0.dispatch(
        &k,
        &[Arg::read(&x), Arg::read(&b), Arg::write(&y)],
        &Immediates::from_pod(&[64u32, 8u32]),
        [1, 1, 1],
    )
    .unwrap();
    let g = gelu64(1.5) as f32;
    assert!(y.read().unwrap().iter().all(|&v| (v - g).abs() < 1e-5), "{:?}", y.read().unwrap());
    // Bad WGSL: naga's message with the line and column, no panic.
    match Kernel::from_wgsl("bad.wgsl", "@compute @workgroup_size(1)\nfn f() {\n  let x = 1 +;\n}") {
        Err(Error::Shader(e)) => {
            assert_eq!((e.line, e.column), (Some(3), Some(14)), "{e}");
            assert!(e.rendered.contains("bad.wgsl:3:14"), "{e}");
        }
        other => panic!("bad WGSL must be Error::Shader, got {other:?}"),
    }
    common::assert_no_validation_errors();
}

/// The user's kernel and an all-reduce in one step, recorded once and replayed (DevicePoll), or
/// recorded every run (HostBridge): the same bits as the CPU twin at every run, with the input
/// changed between runs through the tensor the kernel reads.
#[test]
fn a_step_with_a_users_kernel_and_an_all_reduce_replays() {
    let _s = serial();
    let mut rng = common::rng(85);
    let k = Kernel::from_wgsl("exact.wgsl", EXACT).unwrap();
    let add = Kernel::from_wgsl(
        "to_f32.wgsl",
        "@group(0) @binding(0) var<storage, read> a: array<u32>;
         @group(0) @binding(1) var<storage, read_write> y: array<f32>;
         @compute @workgroup_size(64) fn to_f32(@builtin(global_invocation_id) id: vec3<u32>) {
             if id.x < arrayLength(&y) { y[id.x] = f32(a[id.x] % 4096u) * 0.25; } }",
    )
    .unwrap();
    for mode in [Mode::DevicePoll, Mode::HostBridge] {
        for members in [2, 3] {
            let group = common::logical(members);
            let opts = CommOptions { mode: ModeRequest::Forced(mode), ..CommOptions::from_env().unwrap() };
            let mut comm = match Comm::with_options(&group, opts) {
                Ok(c) => c,
                Err(Error::Unsupported(why)) if common::mode_refused_by_layout(mode, &why) => {
                    common::skip(common::requirement(mode), &format!("{mode}: {why}"));
                    continue;
                }
                Err(e) => panic!("{mode}: {e}"),
            };
            let n = 1000;
            let ins: Vec<Tensor> =
                group.members().iter().map(|m| m.upload_u32(&vec![0; n]).unwrap()).collect();
            let mids: Vec<Tensor> =
                group.members().iter().map(|m| m.empty(&[n], DType::U32).unwrap()).collect();
            let signed: Vec<Tensor> =
                group.members().iter().map(|m| m.upload_i32(&vec![0; n]).unwrap()).collect();
            let ys: Vec<Tensor> =
                group.members().iter().map(|m| m.empty(&[n], DType::F32).unwrap()).collect();
            let imm = Immediates::new().set("n", n as u32).set("k", 3u32).set("mask", 0u32).set("step", 1i32);
            let exact_calls: Vec<MemberDispatch<'_>> = (0..members)
                .map(|i| MemberDispatch {
                    args: vec![Arg::read(&ins[i]), Arg::write(&mids[i]), Arg::write(&signed[i])],
                    immediates: imm.clone(),
                    workgroups: [n.div_ceil(64) as u32, 1, 1],
                })
                .collect();
            let convert_calls: Vec<MemberDispatch<'_>> = (0..members)
                .map(|i| MemberDispatch {
                    args: vec![Arg::read(&mids[i]), Arg::write(&ys[i])],
                    immediates: Immediates::new(),
                    workgroups: [n.div_ceil(64) as u32, 1, 1],
                })
                .collect();
            let ar = AllReduceOptions { precision: crossgpu::Precision::F32, ..Default::default() };
            let yrefs: Vec<&Tensor> = ys.iter().collect();
            let mut step = Step::new(&group, |comm: Option<&mut Comm>| {
                group.dispatch_each(&k, &exact_calls)?;
                group.dispatch_each(&add, &convert_calls)?;
                let c = comm.expect("a communicator");
                c.all_reduce(&mut yrefs.clone(), &ar)?;
                // A second round in the step: DevicePoll replays steps of two rounds or more.
                c.all_reduce(&mut yrefs.clone(), &ar)
            });
            for run in 0..5 {
                let inputs: Vec<Vec<u32>> = (0..members)
                    .map(|_| (0..n).map(|_| rand::Rng::random::<u32>(&mut rng)).collect())
                    .collect();
                for ((m, t), v) in group.members().iter().zip(&ins).zip(&inputs) {
                    m.write_u32(t, v).unwrap();
                }
                step.run(Some(&mut comm)).unwrap();
                // Each member's term, summed twice: exact in f32 (multiples of 1/4 below 2^21).
                let want: Vec<f32> = (0..n)
                    .map(|i| {
                        let s: f32 = inputs
                            .iter()
                            .map(|v| (v[i].wrapping_mul(3).wrapping_add(i as u32) % 4096) as f32 * 0.25)
                            .sum();
                        s * members as f32
                    })
                    .collect();
                for (j, y) in ys.iter().enumerate() {
                    common::assert_bits(
                        &format!("{mode}, {members} members, run {run}, member {j}"),
                        &y.read().unwrap(),
                        &want,
                    );
                }
            }
            assert_eq!(step.replays(), mode == Mode::DevicePoll, "{mode}: replays");
        }
    }
    common::assert_no_validation_errors();
}

/// A user's kernel between the steps of a replayed decoder whose DevicePoll rounds are fused
/// into its own kernels, on the same members: the decoder's tokens are one member's, and the
/// kernel's results are its CPU twin's.
#[test]
fn between_the_fused_rounds_of_a_replayed_decoder() {
    let _s = serial();
    use crossgpu::tp::{Decoder, DecoderConfig, SplitSpec};
    let cfg = DecoderConfig { layers: 2, vocab: 500, max_seq: 24, ..DecoderConfig::small() };
    let want = {
        let g = common::logical(1);
        Decoder::new(&g, cfg.clone(), &SplitSpec::Even).unwrap().generate(5, 12, |_| {}).unwrap()
    };
    let group = common::logical(2);
    let opts =
        CommOptions { mode: ModeRequest::Forced(Mode::DevicePoll), ..CommOptions::from_env().unwrap() };
    let comm = match Comm::with_options(&group, opts) {
        Ok(c) => c,
        Err(Error::Unsupported(why)) if common::mode_refused_by_layout(Mode::DevicePoll, &why) => {
            return common::skip(Some("poll"), &format!("DevicePoll: {why}"));
        }
        Err(e) => panic!("{e}"),
    };
    let mut d = Decoder::with_comm(&group, cfg, &SplitSpec::Even, Some(comm)).unwrap();
    assert!(d.replays());
    let k = Kernel::from_wgsl("exact.wgsl", EXACT).unwrap();
    let n = 500;
    let a: Vec<u32> = (0..n as u32).map(|i| i.wrapping_mul(2_654_435_761)).collect();
    let ins: Vec<Tensor> = group.members().iter().map(|m| m.upload_u32(&a).unwrap()).collect();
    let outs: Vec<Tensor> = group.members().iter().map(|m| m.empty(&[n], DType::U32).unwrap()).collect();
    let signed: Vec<Tensor> = group.members().iter().map(|m| m.upload_i32(&vec![0; n]).unwrap()).collect();
    let mut tokens = Vec::new();
    let mut first = 5;
    for step in 0..4u32 {
        tokens.extend(d.generate(first, 3, |_| {}).unwrap());
        first = *tokens.last().unwrap();
        for (i, m) in group.members().iter().enumerate() {
            let imm = Immediates::new()
                .set("n", n as u32)
                .set("k", step + 1)
                .set("mask", 0xffu32)
                .set("step", 2i32);
            m.dispatch(
                &k,
                &[Arg::read(&ins[i]), Arg::write(&outs[i]), Arg::write(&signed[i])],
                &imm,
                [8, 1, 1],
            )
            .unwrap();
        }
        for o in &outs {
            let want: Vec<u32> =
                (0..n).map(|i| (a[i].wrapping_mul(step + 1).wrapping_add(i as u32)) ^ 0xff).collect();
            assert_eq!(o.read_u32().unwrap(), want, "after decoder steps, round {step}");
        }
    }
    assert_eq!(tokens, want, "the decoder's tokens beside the user's kernel");
    common::assert_no_validation_errors();
}

/// `c = a · b` over f16 matrices on the device's matrix units, a user's kernel: one subgroup
/// per workgroup-sized tile of the output; the side comes from the device (`SIDE`).
fn tile_product(side: u32) -> String {
    format!(
        "enable f16;
enable wgpu_cooperative_matrix;
struct Dims {{ n: u32, k: u32 }}
@group(0) @binding(0) var<storage, read> a: array<f16>;
@group(0) @binding(1) var<storage, read> b: array<f16>;
@group(0) @binding(2) var<storage, read_write> c: array<f32>;
var<immediate> d: Dims;
@compute @workgroup_size(64)
fn tile_product(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(subgroup_id) sg: u32,
    @builtin(num_subgroups) sgs: u32,
) {{
    // The first subgroup takes the tile (a loop rather than a return: cooperative operations
    // need control flow that naga can see is uniform).
    for (var t = sg; t < 1u; t += sgs) {{
        let row = wg.y * {side}u;
        let col = wg.x * {side}u;
        let k = d.k;
        let n = d.n;
        var acc = coop_mat{side}x{side}<f32, C>();
        for (var p = 0u; p < k; p += {side}u) {{
            let ia = row * k + p;
            let ib = p * n + col;
            let x = coopLoadT<coop_mat{side}x{side}<f16, A>>(&a[ia], k);
            let y = coopLoadT<coop_mat{side}x{side}<f16, B>>(&b[ib], n);
            acc = coopMultiplyAdd(x, y, acc);
        }}
        let ic = row * n + col;
        coopStoreT(acc, &c[ic], n);
    }}
}}"
    )
}

/// A user's kernel on the matrix units (`KernelBuilder::cooperative_matrix`) against the f64
/// product of its f16 inputs, within `2 γ_(k+1) Σ|a b|` (the device orders the additions); a
/// kernel of a side the device lacks, or one compiled without the option, is refused.
#[test]
fn a_users_cooperative_matrix_kernel() {
    let _s = serial();
    let group = common::logical(1);
    let m = group.member(0).unwrap();
    let Some(&side) = m.adapter().caps.cooperative_matrix_sides.first() else {
        common::skip(
            Some("cooperative_matrix"),
            &format!("{} has no cooperative matrices", m.adapter().name),
        );
        return;
    };
    assert!(
        Kernel::from_wgsl("tile_product.wgsl", &tile_product(side)).is_err(),
        "refused without the option"
    );
    let k =
        Kernel::builder("tile_product.wgsl", &tile_product(side)).cooperative_matrix(true).build().unwrap();
    let mut rng = common::rng(86);
    let s = side as usize;
    for (rows, n, depth) in [(s, s, s), (2 * s, 3 * s, 5 * s), (4 * s, s, 12 * s)] {
        let a32 = common::random(&mut rng, rows * depth);
        let b32 = common::random(&mut rng, depth * n);
        let (a, b) = (
            m.upload(&a32, &[a32.len()], DType::F16).unwrap(),
            m.upload(&b32, &[b32.len()], DType::F16).unwrap(),
        );
        let c = m.empty(&[rows * n], DType::F32).unwrap();
        let imm = Immediates::new().set("n", n as u32).set("k", depth as u32);
        m.dispatch(
            &k,
            &[Arg::read(&a), Arg::read(&b), Arg::write(&c)],
            &imm,
            [(n / s) as u32, (rows / s) as u32, 1],
        )
        .unwrap();
        let got = c.read().unwrap();
        let (ah, bh): (Vec<f64>, Vec<f64>) =
            (a32.iter().map(|&v| common::f16(v)).collect(), b32.iter().map(|&v| common::f16(v)).collect());
        let (mut want, mut bound) = (vec![0.0; rows * n], vec![0.0; rows * n]);
        for i in 0..rows {
            for j in 0..n {
                let (sum, abs) = (0..depth).fold((0.0, 0.0), |(s, t), p| {
                    let v = ah[i * depth + p] * bh[p * n + j];
                    (s + v, t + v.abs())
                });
                want[i * n + j] = sum;
                bound[i * n + j] = 2.0 * common::reference::gamma(depth + 1) * abs;
            }
        }
        common::assert_within(&format!("tile_product {rows}x{depth} · {depth}x{n}"), &got, &want, &bound);
    }
    // A side the device does not offer: refused before any work, naming the configuration.
    if let Some(other) =
        [16u32, 8].into_iter().find(|o| !m.adapter().caps.cooperative_matrix_sides.contains(o))
    {
        let k = Kernel::builder("tile_product.wgsl", &tile_product(other))
            .cooperative_matrix(true)
            .build()
            .unwrap();
        let (a, b, c) = (
            m.empty(&[256], DType::F16).unwrap(),
            m.empty(&[256], DType::F16).unwrap(),
            m.empty(&[256], DType::F32).unwrap(),
        );
        let imm = Immediates::new().set("n", other).set("k", other);
        match m.dispatch(&k, &[Arg::read(&a), Arg::read(&b), Arg::write(&c)], &imm, [1, 1, 1]) {
            Err(e) => assert!(e.to_string().contains("cooperative matrix"), "{e}"),
            Ok(()) => panic!(
                "a {other}×{other} cooperative matrix ran on a device offering {:?}",
                m.adapter().caps.cooperative_matrix_sides
            ),
        }
    }
    common::assert_no_validation_errors();
}
