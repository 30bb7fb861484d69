//! Data-parallel training of a small MLP with burn on several devices, the gradients summed by
//! crossgpu, against the same training on one device.
//!
//! Each step, every member computes the gradients of its part of the batch (its loss is its
//! part of the whole batch's mean squared error), `Comm::all_reduce_grads` sums them, and each
//! member's SGD applies the same update. Checked at every step:
//!
//! - the members' parameters are bitwise equal;
//! - one device running the same micro-batches one after another and accumulating their
//!   gradients (burn's `GradientsAccumulator`) gets bitwise the same losses and parameters as
//!   member 0. The bound is zero, from the arithmetic: each micro-batch runs the same kernels on
//!   the same values on a device of the same kind, the all-reduce adds the members' gradients
//!   in member order in f32 and the accumulator adds them in the same order, each addition
//!   correctly rounded. Where members are devices of different kinds (a GPU beside lavapipe)
//!   their kernels round differently, so this check becomes a report;
//! - one device on the whole batch at once (its reductions over the batch in another order) is
//!   reported beside, as the relative difference of the losses.
//!
//! ```text
//! cargo run -p crossgpu-burn --release --example data_parallel -- --devices llvmpipe --members 2
//! cargo run -p crossgpu-burn --release --example data_parallel -- --devices 0,1 --members 2 --batch 4096
//! ```
//!
//! Exits non-zero when a check fails.

use std::time::Instant;

use burn::module::{Module, ModuleVisitor, Param};
use burn::nn::Linear;
use burn::optim::{GradientsAccumulator, GradientsParams, ModuleOptimizer, SgdConfig};
use burn::tensor::{activation::relu, Device, Tensor, TensorData};
use crossgpu_burn::{burn, Comm};

const D_IN: usize = 16;
const HIDDEN: usize = 64;
const LR: f64 = 0.05;

#[derive(Module, Debug)]
struct Mlp {
    l1: Linear,
    l2: Linear,
}

impl Mlp {
    fn forward(&self, x: Tensor<2>) -> Tensor<2> {
        self.l2.forward(relu(self.l1.forward(x)))
    }
}

/// A small deterministic generator (SplitMix64), so the example needs no random crate and
/// every run sees the same data.
struct Rng(u64);

impl Rng {
    fn next_f32(&mut self) -> f32 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        (z >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
    }
    fn vec(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| self.next_f32() * scale).collect()
    }
}

fn linear(rng: &mut Rng, d_in: usize, d_out: usize, device: &Device) -> Linear {
    let scale = 1.0 / (d_in as f32).sqrt();
    let w = TensorData::new(rng.vec(d_in * d_out, scale), [d_in, d_out]);
    let b = TensorData::new(rng.vec(d_out, scale), [d_out]);
    Linear {
        weight: Param::from_tensor(Tensor::from_data(w, device).require_grad()),
        bias: Some(Param::from_tensor(Tensor::from_data(b, device).require_grad())),
    }
}

/// The step's batch: `rows` inputs in [-1, 1) and their targets, a smooth function of them.
fn batch(step: usize, rows: usize) -> (Vec<f32>, Vec<f32>) {
    let mut rng = Rng(1_000_003 * step as u64 + 17);
    let x = rng.vec(rows * D_IN, 1.0);
    let y = (0..rows)
        .map(|r| {
            let v = &x[r * D_IN..(r + 1) * D_IN];
            let s: f32 = v.iter().enumerate().map(|(k, a)| a * (k as f32 * 0.37).sin()).sum();
            s.sin() + 0.5 * v[0] * v[1]
        })
        .collect();
    (x, y)
}

/// The loss of `model` on rows `range` of a batch, as a part of the mean over `total` rows.
fn part_loss(
    model: &Mlp,
    x: &[f32],
    y: &[f32],
    range: std::ops::Range<usize>,
    total: usize,
    device: &Device,
) -> Tensor<1> {
    let rows = range.len();
    let xs = Tensor::<2>::from_data(
        TensorData::new(x[range.start * D_IN..range.end * D_IN].to_vec(), [rows, D_IN]),
        device,
    );
    let ys = Tensor::<2>::from_data(TensorData::new(y[range].to_vec(), [rows, 1]), device);
    let d = model.forward(xs) - ys;
    (d.clone() * d).sum().div_scalar(total as f32)
}

/// Every parameter's values, in the module's order.
struct Values(Vec<Vec<f32>>);

impl ModuleVisitor for Values {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        self.0.push(param.val().to_data().try_to_vec::<f32>().expect("f32 parameters"));
    }
}

fn values(model: &Mlp) -> Vec<Vec<f32>> {
    let mut v = Values(Vec::new());
    model.visit(&mut v);
    v.0
}

fn bitwise_equal(a: &[Vec<f32>], b: &[Vec<f32>]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| x.len() == y.len() && x.iter().zip(y).all(|(p, q)| p.to_bits() == q.to_bits()))
}

fn max_abs_diff(a: &[Vec<f32>], b: &[Vec<f32>]) -> f32 {
    a.iter().flatten().zip(b.iter().flatten()).map(|(p, q)| (p - q).abs()).fold(0.0, f32::max)
}

struct Args {
    devices: String,
    members: usize,
    steps: usize,
    batch: usize,
}

fn args() -> Result<Args, String> {
    let mut a = Args {
        devices: std::env::var("CROSSGPU_DEVICES").unwrap_or_else(|_| "llvmpipe".into()),
        members: 2,
        steps: 30,
        batch: 256,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--devices" => a.devices = value()?,
            "--members" => a.members = value()?.parse().map_err(|e| format!("--members: {e}"))?,
            "--steps" => a.steps = value()?.parse().map_err(|e| format!("--steps: {e}"))?,
            "--batch" => a.batch = value()?.parse().map_err(|e| format!("--batch: {e}"))?,
            _ => {
                return Err(format!(
                    "unknown argument {flag}; use --devices SPEC --members N --steps S --batch B"
                ))
            }
        }
    }
    if a.members == 0 || a.steps == 0 || a.batch == 0 || !a.batch.is_multiple_of(a.members) {
        return Err(format!(
            "--members, --steps and --batch must be positive and --batch a multiple of --members ({} and {})",
            a.batch, a.members
        ));
    }
    Ok(a)
}

fn main() {
    let a = match args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    };
    if let Err(e) = run(&a) {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn run(a: &Args) -> Result<(), Box<dyn std::error::Error>> {
    let mut comm = Comm::open(&a.devices, a.members)?;
    let n = comm.len();
    let devices: Vec<Device> = comm.devices().into_iter().map(Device::autodiff).collect();
    println!("members: {}", comm.names().join(" | "));
    println!(
        "MLP {D_IN}-{HIDDEN}-1, batch {} ({} per member), SGD lr {LR}, {} steps",
        a.batch,
        a.batch / n,
        a.steps
    );

    let mut rng = Rng(42);
    let init =
        Mlp { l1: linear(&mut rng, D_IN, HIDDEN, &devices[0]), l2: linear(&mut rng, HIDDEN, 1, &devices[0]) };
    // Replicas keep the parameter ids, which all_reduce_grads matches gradients by.
    let mut replicas: Vec<Mlp> = devices.iter().map(|d| init.clone().fork(d)).collect();
    let mut optims: Vec<ModuleOptimizer> = (0..n).map(|_| SgdConfig::new().init()).collect();
    let mut accumulated = init.clone();
    let mut accumulated_optim = SgdConfig::new().init();
    let mut whole = init.clone();
    let mut whole_optim = SgdConfig::new().init();
    let part = a.batch / n;

    // Steps where the members' parameters differ; where one device accumulating differs.
    let mut replica_failures = Vec::new();
    let mut accumulation_failures = Vec::new();
    let mut max_rel = 0f64;
    let mut step_time = Vec::new();
    println!(
        "{:>5} {:>14} {:>14} {:>14} {:>10}",
        "step", "loss, members", "accumulated", "whole batch", "rel. diff"
    );
    for step in 0..a.steps {
        let (x, y) = batch(step, a.batch);

        let t = Instant::now();
        let mut losses = Vec::with_capacity(n);
        let mut grads = Vec::with_capacity(n);
        for (m, model) in replicas.iter().enumerate() {
            let loss = part_loss(model, &x, &y, m * part..(m + 1) * part, a.batch, &devices[m]);
            grads.push(GradientsParams::from_grads(loss.backward(), model));
            losses.push(loss);
        }
        let grads = comm.all_reduce_grads(&replicas[0], grads)?;
        replicas = replicas
            .into_iter()
            .zip(grads)
            .zip(&mut optims)
            .map(|((model, g), optim)| optim.step(LR, model, g))
            .collect();
        let members: Vec<Vec<Vec<f32>>> = replicas.iter().map(values).collect();
        step_time.push(t.elapsed());
        let loss: f32 = losses.iter().map(|l| l.clone().into_scalar::<f32>()).sum();

        // One device, the same micro-batches, gradients accumulated.
        let mut acc = GradientsAccumulator::new();
        let mut acc_loss = 0f32;
        for m in 0..n {
            let l = part_loss(&accumulated, &x, &y, m * part..(m + 1) * part, a.batch, &devices[0]);
            acc.accumulate(&accumulated, GradientsParams::from_grads(l.backward(), &accumulated));
            acc_loss += l.into_scalar::<f32>();
        }
        accumulated = accumulated_optim.step(LR, accumulated, acc.grads());

        // One device, the whole batch at once.
        let l = part_loss(&whole, &x, &y, 0..a.batch, a.batch, &devices[0]);
        whole = whole_optim.step(LR, whole.clone(), GradientsParams::from_grads(l.backward(), &whole));
        let whole_loss = l.into_scalar::<f32>();

        let rel = (f64::from(loss) - f64::from(whole_loss)).abs() / f64::from(whole_loss).abs();
        max_rel = max_rel.max(rel);
        if step % 5 == 0 || step + 1 == a.steps {
            println!("{step:>5} {loss:>14.7} {acc_loss:>14.7} {whole_loss:>14.7} {rel:>10.2e}");
        }

        for (m, v) in members.iter().enumerate().skip(1) {
            if !bitwise_equal(v, &members[0]) {
                replica_failures.push(format!(
                    "step {step}: member {m}'s parameters differ from member 0's (max |diff| {:e})",
                    max_abs_diff(v, &members[0])
                ));
            }
        }
        let acc_values = values(&accumulated);
        if loss.to_bits() != acc_loss.to_bits() || !bitwise_equal(&acc_values, &members[0]) {
            accumulation_failures.push(format!(
                "step {step}: one device accumulating the micro-batches differs from the members: loss {loss} vs {acc_loss}, parameters max |diff| {:e}",
                max_abs_diff(&acc_values, &members[0])
            ));
        }
    }
    // burn's runtime threads must be idle before the process exits.
    comm.synchronize()?;
    let mut ms: Vec<f64> = step_time.iter().map(|d| d.as_secs_f64() * 1e3).collect();
    ms.sort_by(f64::total_cmp);
    println!(
        "data-parallel step (forward, backward, all-reduce, update, parameters read back): median {:.2} ms, min {:.2}, max {:.2}",
        ms[ms.len() / 2],
        ms[0],
        ms[ms.len() - 1]
    );
    println!("largest relative loss difference against one device on the whole batch: {max_rel:.2e}");
    let same_kind = comm.names().iter().all(|name| *name == comm.names()[0]);
    if replica_failures.is_empty() {
        println!("members' parameters bitwise equal at every step: yes");
    }
    if accumulation_failures.is_empty() {
        println!("one device accumulating the same micro-batches: bitwise the same losses and parameters at every step");
    } else if !same_kind {
        println!(
            "one device accumulating the same micro-batches: differs in {} of {} steps (expected: the members are devices of different kinds); first: {}",
            accumulation_failures.len(),
            a.steps,
            accumulation_failures[0]
        );
    }
    let mut fatal = replica_failures;
    if same_kind {
        fatal.extend(accumulation_failures);
    }
    if !fatal.is_empty() {
        return Err(format!("{} check(s) failed; first: {}", fatal.len(), fatal[0]).into());
    }
    println!("data-parallel training: OK");
    Ok(())
}
