//! Your own WGSL kernel on every member of a group: compiled at run time, dispatched on each
//! member's tensors, its results all-reduced, the whole step recorded once and replayed where the
//! all-reduce mode allows, and checked against the CPU.
//!
//! ```text
//! cargo run --release --example custom_kernel                         # every adapter
//! CROSSGPU_DEVICES=nvidia,llvmpipe cargo run --release --example custom_kernel
//! CROSSGPU_DEVICES=0,0 CROSSGPU_ALLREDUCE=poll cargo run --release --example custom_kernel
//! ```
//!
//! Each member holds a different `x` (rows × cols) and the same bias; the kernel computes
//! `y = gelu(x + bias)` on each member, over the two halves of `x` (views of it) into two
//! tensors, as a layer's two outputs would be; two all-reduces sum the members' halves; every
//! member must end with the same bits, within a derived bound of the f64 sum. With DevicePoll the
//! step (two dispatches and two all-reduces per member) is recorded once and replayed.

use crossgpu::dispatch::{Arg, Immediates, MemberDispatch};
use crossgpu::kernels::Kernel;
use crossgpu::{AllReduceOptions, Comm, DType, DeviceGroup, Instance, Precision, Step, Tensor};

const BIAS_GELU: &str = "
struct Shape { n: u32, cols: u32 }
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> bias: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
var<immediate> shape: Shape;

@compute @workgroup_size(64)
fn bias_gelu(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = id.x + id.y * 65535u * 64u;
    if i >= shape.n { return; }
    let v = x[i] + bias[i % shape.cols];
    y[i] = 0.5 * v * (1.0 + tanh(0.7978845608 * (v + 0.044715 * v * v * v)));
}";

/// Deterministic inputs in [-2, 2): member `m`'s x, and (m = usize::MAX) the bias.
fn input(m: usize, n: usize) -> Vec<f32> {
    let mut s = 0x9E37_79B9_7F4A_7C15u64 ^ (m as u64).wrapping_mul(0xD1B5_4A32_D192_ED03);
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0
        })
        .collect()
}

fn gelu(v: f64) -> f64 {
    0.5 * v * (1.0 + (0.7978845608 * (v + 0.044715 * v * v * v)).tanh())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let instance = Instance::new()?;
    let group = DeviceGroup::from_env(&instance)?;
    for m in group.members() {
        println!("{}", m.label());
    }
    let kernel = Kernel::from_wgsl("bias_gelu", BIAS_GELU)?;
    print!("{}", kernel.describe());

    // Two halves of whole rows, each a view of x at a byte offset every device binds at
    // (150 × 768 × 4 bytes, a multiple of 256).
    let (rows, cols) = (300, 768);
    let (n, half) = (rows * cols, rows / 2 * cols);
    let bias = input(usize::MAX, cols);
    let xs: Vec<Vec<f32>> = (0..group.len()).map(|m| input(m, n)).collect();
    let mut tensors: Vec<(Tensor, Tensor, [Tensor; 2])> = Vec::new();
    for (m, x) in group.members().iter().zip(&xs) {
        let y = [m.empty(&[half], DType::F32)?, m.empty(&[half], DType::F32)?];
        tensors.push((m.upload(x, &[rows, cols], DType::F32)?, m.upload_f32(&bias)?, y));
    }
    let groups = [half.div_ceil(64).min(65_535) as u32, half.div_ceil(64 * 65_535) as u32, 1];
    let calls = |h: usize| -> crossgpu::Result<Vec<MemberDispatch<'_>>> {
        tensors
            .iter()
            .map(|(x, b, y)| {
                Ok(MemberDispatch {
                    args: vec![Arg::read(x.view(h * half, &[half])?), Arg::read(b), Arg::write(&y[h])],
                    immediates: Immediates::new().set("n", half as u32).set("cols", cols as u32),
                    workgroups: groups,
                })
            })
            .collect()
    };
    let (first, second) = (calls(0)?, calls(1)?);

    // One step: the kernel on every member over each half, then the sums over the members. Run
    // three times: the first records it, the second records it for replay (where the mode
    // replays), the third submits that recording. Every run writes the same y.
    let mut comm = Comm::new(&group)?;
    let ys: [Vec<&Tensor>; 2] = [0, 1].map(|h| tensors.iter().map(|t| &t.2[h]).collect());
    let opts = AllReduceOptions { precision: Precision::F32, ..Default::default() };
    let mut step = Step::new(&group, |comm: Option<&mut Comm>| {
        group.dispatch_each(&kernel, &first)?;
        group.dispatch_each(&kernel, &second)?;
        let c = comm.expect("the step is run with a communicator");
        c.all_reduce(&mut ys[0].clone(), &opts)?;
        c.all_reduce(&mut ys[1].clone(), &opts)
    });
    for _ in 0..3 {
        step.run(Some(&mut comm))?;
    }
    group.synchronize()?;
    println!(
        "all-reduce mode: {} ({}); the step {}",
        comm.mode(),
        comm.reason(),
        match step.recorded_because() {
            None => "is recorded once and replayed".to_string(),
            Some(why) => format!("is recorded at every run: {why}"),
        }
    );

    // Each member's y, bitwise equal; within (members + 2) f32 roundings and a few ULP of each
    // device's tanh of the f64 sum of the members' terms.
    let got: Vec<Vec<f32>> = group
        .members()
        .iter()
        .enumerate()
        .map(|(m, _)| Ok([tensors[m].2[0].read()?, tensors[m].2[1].read()?].concat()))
        .collect::<crossgpu::Result<_>>()?;
    for (i, g) in got.iter().enumerate() {
        if g.iter().zip(&got[0]).any(|(a, b)| a.to_bits() != b.to_bits()) {
            return Err(format!("member {i}'s sum differs bitwise from member 0's").into());
        }
    }
    let mut worst = 0.0f64;
    for i in 0..n {
        let terms: Vec<f64> = xs.iter().map(|x| gelu(x[i] as f64 + bias[i % cols] as f64)).collect();
        let want: f64 = terms.iter().sum();
        let bound = terms.iter().map(|t| t.abs() + 1.0).sum::<f64>() * 8e-6;
        let err = (got[0][i] as f64 - want).abs();
        if err > bound {
            return Err(format!("element {i}: {} against {want} (bound {bound:e})", got[0][i]).into());
        }
        worst = worst.max(err / bound);
    }
    println!(
        "custom kernel: OK: {n} elements on {} members, bitwise equal, worst error {:.3} of the bound",
        group.len(),
        worst
    );
    Ok(())
}
