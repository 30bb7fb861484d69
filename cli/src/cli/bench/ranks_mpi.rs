//! `crossgpu bench ranks` (feature `mpi`), run under `mpirun`: the all-reduce across ranks
//! (`crossgpu::ranks::RankComm`) against MPI's own all-reduce of the same bytes in host
//! memory and against the rank's own one-process all-reduce; the link's α and β from a
//! ping-pong between ranks 0 and 1; and the α–β model for 2…512 hosts from them
//! (docs/SCALE-OUT.md).

use std::time::{Duration, Instant};

use crossgpu::ranks::{RankComm, RankPath};
use crossgpu::{AllReduceOptions, Comm, CommOptions, DeviceGroup, Instance, Tensor};
use mpi::collective::SystemOperation;
use mpi::topology::SimpleCommunicator;
use mpi::traits::{Communicator, CommunicatorCollectives, Destination, Root, Source};

use super::ranks::RanksArgs;
use super::scaleout::{Link, TokenModel};
use crate::cli::mpirun::{init_mpi, rank_group};
use crate::cli::{fail, CliResult};

/// Ping-pong sizes for α and β, bytes.
const PING_SIZES: [usize; 9] = [8, 64, 512, 4096, 32_768, 262_144, 2_097_152, 16_777_216, 67_108_864];

pub fn bench_ranks(args: &RanksArgs) -> CliResult {
    let sizes = args.checked_sizes()?;
    let (universe, rank) = init_mpi()?;
    let world = universe.world();
    let ranks = world.size() as usize;
    let lead = rank == 0;

    let instance = Instance::new()?;
    let group = rank_group(&instance)?;
    for m in group.members() {
        let limit = m.adapter().caps.max_storage_buffer_range;
        if let Some(&too_big) = sizes.iter().find(|&&b| b as u64 > limit) {
            return Err(fail(format!(
                "--sizes: {too_big} bytes is more than {} binds in one tensor ({limit} bytes)",
                m.label()
            )));
        }
    }
    let mut comm = RankComm::new(&group, CommOptions::from_env()?)?;
    let mut gather = RankComm::with_path(&group, CommOptions::from_env()?, RankPath::Gather)?;
    let mut local = Comm::with_options(&group, CommOptions::from_env()?)?;
    if lead {
        println!(
            "{ranks} ranks, {} members, path between ranks {:?}:",
            comm.global_members().len(),
            comm.path()
        );
        print!("{}", comm.describe());
    }

    let link = if ranks >= 2 { Some(ping_pong(&world, rank, args.iters)?) } else { None };
    if let (true, Some((link, points))) = (lead, &link) {
        println!("\nping-pong between ranks 0 and 1 (half the round trip, median of the repetitions):");
        for (bytes, s) in points {
            println!("  {:>10} B  {:>10.2} µs", bytes, s * 1e6);
        }
        println!(
            "  fit: α = {:.2} µs, β = {:.4} ns/B ({:.2} GB/s)",
            link.alpha * 1e6,
            link.beta * 1e9,
            1e-9 / link.beta
        );
    }

    if lead {
        println!(
            "\nall-reduce of f32 tensors, µs per call ({} calls after 3 unmeasured; median [min–max] of rank 0, and the slowest rank's median):",
            args.iters
        );
        println!(
            "  {:>10}  {:>26}  {:>26}  {:>26}  {:>26}",
            "bytes",
            format!("RankComm ({:?})", comm.path()),
            "RankComm (Gather)",
            "MPI_Allreduce (host)",
            "one rank's Comm"
        );
    }
    for &bytes in &sizes {
        let n = bytes / 4;
        let inputs: Vec<Vec<f32>> = group
            .members()
            .iter()
            .map(|m| crossgpu::bench::data((rank * 64 + m.index()) as u64 + 1, n))
            .collect();
        let mut tensors: Vec<Tensor> =
            group.members().iter().zip(&inputs).map(|(m, v)| m.upload_f32(v)).collect::<Result<_, _>>()?;
        let opts = AllReduceOptions::default();
        let across = time_rank_comm(&mut comm, &group, &mut tensors, &inputs, args.iters)?;
        let gathered = time_rank_comm(&mut gather, &group, &mut tensors, &inputs, args.iters)?;
        let host_in = inputs[0].clone();
        let mut host_out = vec![0f32; n];
        let mpi_host = time_calls(args.iters, || {
            let t = Instant::now();
            world.all_reduce_into(&host_in[..], &mut host_out[..], SystemOperation::sum());
            Ok(t.elapsed())
        })?;
        let one_rank = time_calls(args.iters, || {
            refill(&group, &tensors, &inputs)?;
            let t = Instant::now();
            local.all_reduce(&mut tensors, &opts)?;
            for m in group.members() {
                m.synchronize()?;
            }
            Ok(t.elapsed())
        })?;
        let cols = [across, gathered, mpi_host, one_rank].map(|s| {
            let mut worst = [0.0f64];
            world.all_reduce_into(&[s.median][..], &mut worst[..], SystemOperation::max());
            format!("{:.1} [{:.1}–{:.1}] {:.1}", s.median, s.min, s.max, worst[0])
        });
        if lead {
            println!("  {:>10}  {:>26}  {:>26}  {:>26}  {:>26}", bytes, cols[0], cols[1], cols[2], cols[3]);
        }
    }

    if let (true, Some((link, _))) = (lead, &link) {
        print_model(link, args);
    }
    drop(local);
    drop(gather);
    drop(comm);
    drop(group);
    Ok(())
}

/// Times `comm`'s all-reduce of `tensors`, each call on the `inputs` written back first.
fn time_rank_comm(
    comm: &mut RankComm,
    group: &DeviceGroup,
    tensors: &mut [Tensor],
    inputs: &[Vec<f32>],
    iters: usize,
) -> CliResult<Spread> {
    time_calls(iters, || {
        refill(group, tensors, inputs)?;
        let t = Instant::now();
        comm.all_reduce(tensors, &AllReduceOptions::default())?;
        Ok(t.elapsed())
    })
}

/// Writes each member's input back (the all-reduce works in place).
fn refill(group: &DeviceGroup, tensors: &[Tensor], inputs: &[Vec<f32>]) -> crossgpu::Result<()> {
    for ((m, t), v) in group.members().iter().zip(tensors).zip(inputs) {
        m.write(t, v)?;
    }
    Ok(())
}

/// Median, fastest and slowest of a set of timings, µs.
#[derive(Debug, Clone, Copy)]
struct Spread {
    median: f64,
    min: f64,
    max: f64,
}

fn spread(mut us: Vec<f64>) -> Spread {
    us.sort_by(f64::total_cmp);
    Spread { median: us[us.len() / 2], min: us[0], max: us[us.len() - 1] }
}

/// Three unmeasured calls, then `iters` timed ones.
fn time_calls(iters: usize, mut call: impl FnMut() -> CliResult<Duration>) -> CliResult<Spread> {
    for _ in 0..3 {
        call()?;
    }
    let us = (0..iters).map(|_| call().map(|d| d.as_secs_f64() * 1e6)).collect::<CliResult<Vec<_>>>()?;
    Ok(spread(us))
}

/// Half round trips between ranks 0 and 1 at [`PING_SIZES`] (the other ranks wait), and the
/// line fitted to them.
fn ping_pong(world: &SimpleCommunicator, rank: usize, iters: usize) -> CliResult<(Link, Vec<(usize, f64)>)> {
    let mut points = Vec::new();
    for &bytes in &PING_SIZES {
        let mut buf = vec![0u8; bytes];
        let reps = if bytes <= 32_768 { iters.max(20) } else { (iters / 4).max(5) };
        let mut halves = Vec::with_capacity(reps);
        world.barrier();
        for i in 0..reps + 3 {
            let t = Instant::now();
            match rank {
                0 => {
                    world.process_at_rank(1).send(&buf[..]);
                    world.process_at_rank(1).receive_into(&mut buf[..]);
                }
                1 => {
                    world.process_at_rank(0).receive_into(&mut buf[..]);
                    world.process_at_rank(0).send(&buf[..]);
                }
                _ => {}
            }
            if i >= 3 {
                halves.push(t.elapsed().as_secs_f64() / 2.0);
            }
        }
        halves.sort_by(f64::total_cmp);
        points.push((bytes, halves[halves.len() / 2]));
    }
    // Rank 0's times go to every rank (rank 1's half trips include waiting for the first send).
    let mut shared: Vec<f64> = points.iter().map(|&(_, s)| s).collect();
    world.process_at_rank(0).broadcast_into(&mut shared[..]);
    let points: Vec<(usize, f64)> = PING_SIZES.iter().copied().zip(shared).collect();
    let fitted: Vec<(f64, f64)> = points.iter().map(|&(b, s)| (b as f64, s)).collect();
    let link = Link::fit(&fitted).ok_or_else(|| fail("ping-pong: no line fits the times"))?;
    // α from the smallest message: a fit over sizes spanning seven decades is ruled by the
    // largest ones, and latency is what small all-reduces pay.
    Ok((Link { alpha: points[0].1, ..link }, points))
}

fn print_model(link: &Link, args: &RanksArgs) {
    let token = TokenModel {
        layers: args.layers,
        activation_bytes: (args.hidden * 4) as f64,
        token_seconds: args.token_ms * 1e-3,
    };
    println!(
        "\nα–β model with α = {:.2} µs, β = {:.4} ns/B; one all-reduced activation = {} B ({} layers, 2 all-reduces each; one host's token {} ms):",
        link.alpha * 1e6,
        link.beta * 1e9,
        args.hidden * 4,
        args.layers,
        args.token_ms
    );
    println!(
        "  {:>5}  {:>10} {:>10} {:>10} {:>10}  {:>14} {:>14} {:>14}",
        "hosts",
        "ring µs",
        "doubl. µs",
        "tree µs",
        "gather µs",
        "TP token ms",
        "TP(gather) ms",
        "PP token ms"
    );
    let n = token.activation_bytes;
    for p in (1..=9).map(|e| 1usize << e) {
        let c = token.cost(link, p);
        println!(
            "  {:>5}  {:>10.1} {:>10.1} {:>10.1} {:>10.1}  {:>14.3} {:>14.3} {:>14.3}",
            p,
            link.ring(p, n) * 1e6,
            link.recursive_doubling(p, n) * 1e6,
            link.tree(p, n) * 1e6,
            link.gather_form(p, n) * 1e6,
            c.tensor_best * 1e3,
            c.tensor_gather * 1e3,
            c.pipeline * 1e3
        );
    }
    let one = token.cost(link, 1).tensor_best;
    let best =
        (1..=9).map(|e| token.cost(link, 1 << e)).min_by(|a, b| a.tensor_best.total_cmp(&b.tensor_best));
    if let Some(b) = best {
        if b.tensor_best < one {
            println!(
                "  tensor parallelism across hosts: fastest token at {} hosts ({:.3} ms, {:.2}× one host)",
                b.hosts,
                b.tensor_best * 1e3,
                one / b.tensor_best
            );
        } else {
            println!("  tensor parallelism across hosts never beats one host on this link");
        }
    }
}
