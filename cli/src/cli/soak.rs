//! `crossgpu soak`: many all-reduce rounds with changing sizes across the group, every
//! `--check-every`-th round checked against an f64 CPU reference and bitwise across members
//! (and against the same round's earlier results: the same inputs must give the same bits), with
//! resident memory, live Vulkan objects and open file descriptors sampled before and after.
//! Exits non-zero on any deviation. See docs/RELIABILITY.md.
//!
//! Data generation is cheap: each size bucket has a fixed random source tensor per member, made
//! once; a round copies the sources into that bucket's destination tensors on the GPU and
//! all-reduces those, so the host uploads nothing per round.

use std::collections::HashMap;
use std::io::IsTerminal;
use std::time::Instant;

use clap::Args;
use crossgpu::{
    AllReduceOptions, Comm, DType, DeviceGroup, Error, GroupSpec, Instance, LiveObjects, Mode, Precision,
    Result, Tensor,
};
use indicatif::{ProgressBar, ProgressStyle};

use super::{fail, plural, CliResult};

/// Options of `crossgpu soak`.
#[derive(Args, Debug, Clone)]
pub struct SoakArgs {
    /// All-reduce rounds to run.
    #[arg(long, default_value_t = 1_000_000)]
    pub rounds: u64,
    /// Members when CROSSGPU_DEVICES is unset: that many VkDevices on adapter 0. When it is set,
    /// it decides the group (e.g. `0*3` for three queue stand-ins) and this must match.
    #[arg(long, default_value_t = 3)]
    pub members: usize,
    /// Check every this many rounds against the CPU (the first and last rounds are checked too).
    #[arg(long, default_value_t = 1000)]
    pub check_every: u64,
    /// Largest all-reduce, in f32 elements.
    #[arg(long, default_value_t = 65536)]
    pub max_len: usize,
    /// Seed of the inputs and of the sequence of sizes and options.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

/// xorshift64*: cheap, deterministic, good enough for inputs and choices.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    /// In [-1, 1), never 0.
    fn value(&mut self) -> f32 {
        let v = (self.next() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0;
        if v == 0.0 {
            0.5
        } else {
            v
        }
    }
}

/// Element counts of the size buckets: small and awkward sizes, the first slot growth (4096
/// words), and up to `max_len`.
fn buckets(max_len: usize) -> Vec<usize> {
    let mut b: Vec<usize> =
        [1, 3, 64, 1000, 4095, 4096, 4097, 12_345, max_len / 4 + 1, max_len / 2 + 3, max_len]
            .into_iter()
            .filter(|&n| n >= 1 && n <= max_len)
            .collect();
    b.sort_unstable();
    b.dedup();
    b
}

struct Bucket {
    len: usize,
    /// Per member: the fixed input (also kept on the CPU) and the tensor all-reduced in place.
    src: Vec<Tensor>,
    dst: Vec<Tensor>,
    data: Vec<Vec<f32>>,
}

/// What one round did, enough to recompute its reference.
#[derive(Debug, Clone, Copy)]
struct RoundSpec {
    bucket: usize,
    precision: Precision,
    zero: Option<usize>,
}

fn rss_kib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    s.split_whitespace().nth(1).and_then(|p| p.parse::<u64>().ok()).unwrap_or(0) * 4
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map(|d| d.count()).unwrap_or(0)
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn open_group(instance: &Instance, members: usize) -> Result<DeviceGroup> {
    let from_env = std::env::var("CROSSGPU_DEVICES").is_ok_and(|v| !v.trim().is_empty());
    let group = if from_env {
        DeviceGroup::from_env(instance)?
    } else {
        DeviceGroup::open(instance, &GroupSpec::parse(&vec!["0"; members].join(","))?)?
    };
    if group.len() != members {
        return Err(Error::BadConfig {
            name: "CROSSGPU_DEVICES",
            value: std::env::var("CROSSGPU_DEVICES").unwrap_or_default(),
            why: format!(
                "it opens {} members but --members is {members}; pass --members {}",
                group.len(),
                group.len()
            ),
        });
    }
    Ok(group)
}

/// Whether this round's partials travel as f16. Every mode follows the same wire rule:
/// Generic too rounds each partial to f16 on the f16 wire before it sums them on the host.
fn f16_wire(precision: Precision, len: usize, threshold: u64) -> bool {
    match precision {
        Precision::F32 => false,
        Precision::F16 => true,
        Precision::Auto => len as u64 * 4 >= threshold,
    }
}

/// Checks a round's results: each member against the f64 sum of the wire values of the
/// contributing members within (N-1)·2^-24·Σ|x_j| (the error of N-1 f32 additions), every member
/// bitwise equal to member 0, and member 0 bitwise equal to the first check of the same round
/// kind. Returns the number of deviating elements (0 when all is well) and prints the first.
fn check_round(
    b: &Bucket,
    spec: RoundSpec,
    f16: bool,
    results: &[Vec<f32>],
    seen: &mut HashMap<(usize, bool, Option<usize>, bool), Vec<u32>>,
    mode: Mode,
    round: u64,
) -> u64 {
    let nm = b.data.len();
    let wire = |v: f32| if f16 { crossgpu::f16_saturating(v).to_f64() } else { v as f64 };
    let mut bad = 0u64;
    let mut report = |what: String| {
        if bad == 0 {
            eprintln!("DEVIATION at round {round} ({} elements, {spec:?}, f16 wire {f16}): {what}", b.len);
        }
        bad += 1;
    };
    for (j, r) in results.iter().enumerate() {
        if r.len() != b.len {
            report(format!("member {j} returned {} elements", r.len()));
            continue;
        }
        for i in 0..b.len {
            let (mut want, mut mag) = (0f64, 0f64);
            for (k, d) in b.data.iter().enumerate() {
                if Some(k) != spec.zero {
                    want += wire(d[i]);
                    mag += wire(d[i]).abs();
                }
            }
            let bound = (nm as f64 - 1.0) * 2f64.powi(-24) * mag;
            if (r[i] as f64 - want).abs() > bound || r[i].to_bits() != results[0][i].to_bits() {
                report(format!(
                    "member {j} element {i}: got {} want {want} (bound {bound:e}), member 0 has {}",
                    r[i], results[0][i]
                ));
            }
        }
    }
    let bits: Vec<u32> = results[0].iter().map(|v| v.to_bits()).collect();
    match seen.get(&(spec.bucket, f16, spec.zero, mode == Mode::Generic)) {
        Some(first) if *first != bits => {
            let i = first.iter().zip(&bits).position(|(a, b)| a != b).unwrap_or(0);
            report(format!("member 0 differs from the first check of the same inputs at element {i}"));
        }
        Some(_) => {}
        None => {
            seen.insert((spec.bucket, f16, spec.zero, mode == Mode::Generic), bits);
        }
    }
    bad
}

fn objects(o: &LiveObjects) -> String {
    format!(
        "buffers {}, imports {}, host allocations {}, semaphores {}, kernels {}, bind groups {}, recorders {}, devices {}",
        o.buffers, o.imports, o.host_allocations, o.semaphores, o.kernels, o.bind_groups, o.recorders, o.devices
    )
}

/// `crossgpu soak`.
pub fn soak(args: &SoakArgs) -> CliResult {
    crossgpu::check_environment()?;
    if args.rounds == 0 || args.members == 0 || args.max_len == 0 || args.check_every == 0 {
        return Err(fail("--rounds, --members, --max-len and --check-every must be at least 1"));
    }
    let instance = Instance::new()?;
    let group = open_group(&instance, args.members)?;
    let mut comm = Comm::new(&group)?;
    let threshold = crossgpu::CommOptions::from_env()?.f16_threshold_bytes;
    let sizes = buckets(args.max_len);
    println!(
        "soak: {} rounds over {}, check every {}, seed {}",
        args.rounds,
        plural(group.len(), "member", "members"),
        args.check_every,
        args.seed
    );
    for m in group.members() {
        println!("  {}", m.label());
    }
    println!("  all-reduce mode: {} ({})", comm.mode(), comm.reason());
    println!("  sizes (f32 elements): {sizes:?}; precision Auto/F32/F16, a zero-contribution member in 1 round of 8");

    // Inputs and tensors, made once.
    let mut rng = Rng::new(args.seed);
    let mut buckets = Vec::new();
    for &len in &sizes {
        let data: Vec<Vec<f32>> = (0..group.len()).map(|_| (0..len).map(|_| rng.value()).collect()).collect();
        let src =
            group.members().iter().zip(&data).map(|(m, d)| m.upload_f32(d)).collect::<Result<Vec<_>>>()?;
        let dst = group.members().iter().map(|m| m.empty(&[len], DType::F32)).collect::<Result<Vec<_>>>()?;
        buckets.push(Bucket { len, src, dst, data });
    }
    let start_mode = comm.mode();
    let mut seen = HashMap::new();
    let mut deviations = 0u64;
    let mut checks = 0u64;
    let mut elements = 0u64;

    let run_round = |comm: &mut Comm, b: &mut Bucket, spec: RoundSpec| -> Result<()> {
        for ((m, s), d) in group.members().iter().zip(&b.src).zip(&b.dst) {
            m.copy(s, d)?;
        }
        let opts = AllReduceOptions {
            precision: spec.precision,
            zero_contribution: spec.zero.into_iter().collect(),
            ..Default::default()
        };
        comm.all_reduce(&mut b.dst, &opts)
    };
    let read = |b: &Bucket| b.dst.iter().map(|t| t.read()).collect::<Result<Vec<_>>>();

    // Warm-up, checked: every bucket on both wires in both slot halves (two rounds in a row),
    // and with each member as the zero contributor, so the slots have their final size and every
    // pipeline and cached bind group exists before the "before" sample.
    // The largest bucket first: growing the slots drops the bind groups made for the old ones.
    let mut warm = Vec::new();
    for bucket in (0..buckets.len()).rev() {
        for precision in [Precision::F32, Precision::F32, Precision::F16, Precision::F16, Precision::Auto] {
            warm.push(RoundSpec { bucket, precision, zero: None });
        }
        for j in 0..group.len() {
            warm.push(RoundSpec { bucket, precision: Precision::F32, zero: Some(j) });
            warm.push(RoundSpec { bucket, precision: Precision::F16, zero: Some(j) });
        }
    }
    for spec in warm {
        let b = &mut buckets[spec.bucket];
        run_round(&mut comm, b, spec)?;
        let f16 = f16_wire(spec.precision, b.len, threshold);
        let results = read(b)?;
        deviations += check_round(b, spec, f16, &results, &mut seen, comm.mode(), 0);
        checks += 1;
    }
    group.synchronize()?;
    let rss_before = rss_kib();
    let fds_before = open_fds();
    let objects_before = crossgpu::live_objects();
    let mut rss_max = rss_before;
    // Memory at about every tenth of the run, and at the first check of its second half.
    let mut rss_series: Vec<(u64, u64)> = Vec::new();
    let mut rss_half: Option<(u64, u64)> = None;

    let bar = ProgressBar::new(args.rounds);
    bar.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} rounds, {per_sec}, eta {eta} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let tty = std::io::stderr().is_terminal();
    let t0 = Instant::now();
    for round in 1..=args.rounds {
        let bi = rng.below(buckets.len() as u64) as usize;
        let precision = match rng.below(4) {
            0 => Precision::F32,
            1 => Precision::F16,
            _ => Precision::Auto,
        };
        let zero = (rng.below(8) == 0).then(|| rng.below(group.len() as u64) as usize);
        let spec = RoundSpec { bucket: bi, precision, zero };
        let f16 = f16_wire(precision, buckets[bi].len, threshold);
        run_round(&mut comm, &mut buckets[bi], spec).map_err(|e| {
            bar.abandon();
            fail(format!("round {round}: {e}"))
        })?;
        elements += buckets[bi].len as u64;
        if round % args.check_every == 0 || round == 1 || round == args.rounds {
            let results = read(&buckets[bi]).map_err(|e| fail(format!("round {round}: {e}")))?;
            deviations += check_round(&buckets[bi], spec, f16, &results, &mut seen, comm.mode(), round);
            checks += 1;
            rss_max = rss_max.max(rss_kib());
            if round % (args.rounds / 10).max(1) < args.check_every || round == args.rounds {
                rss_series.push((round, rss_kib()));
            }
            if rss_half.is_none() && round >= args.rounds / 2 {
                rss_half = Some((round, rss_kib()));
            }
            bar.set_message(format!("{deviations} deviations"));
            if !tty && round % (args.rounds / 10).max(1) < args.check_every {
                eprintln!(
                    "  round {round}/{}: {:.0} rounds/s, {deviations} deviations, resident {:.1} MiB",
                    args.rounds,
                    round as f64 / t0.elapsed().as_secs_f64(),
                    mib(rss_kib())
                );
            }
        }
        if round % 64 == 0 {
            bar.set_position(round);
        }
    }
    group.synchronize()?;
    let secs = t0.elapsed().as_secs_f64();
    bar.finish_and_clear();
    let rss_after = rss_kib();
    let fds_after = open_fds();
    let objects_after = crossgpu::live_objects();

    let per_s = args.rounds as f64 / secs;
    println!(
        "rounds: {} in {secs:.1} s: {per_s:.0} rounds/s, {:.1} µs per round, mean {:.0} elements per round",
        args.rounds,
        1e6 / per_s,
        elements as f64 / args.rounds.max(1) as f64
    );
    println!("checked: {checks} rounds (warm-up included) against the f64 reference and bitwise; deviations: {deviations}");
    if comm.mode() != start_mode {
        println!("mode changed during the run: {start_mode} -> {} ({})", comm.mode(), comm.reason());
    }
    println!(
        "resident memory: before {:.1} MiB, after {:.1} MiB ({:+.1} MiB), max {:.1} MiB",
        mib(rss_before),
        mib(rss_after),
        mib(rss_after) - mib(rss_before),
        mib(rss_max)
    );
    println!(
        "resident memory by round: {}",
        rss_series.iter().map(|(r, k)| format!("{r}: {:.1}", mib(*k))).collect::<Vec<_>>().join(", ")
    );
    if let Some((round, kib)) = rss_half {
        let rounds_after = args.rounds - round;
        println!(
            "resident memory over the second half (round {round} to the end): {:.1} -> {:.1} MiB ({:+.1} MiB over {rounds_after} rounds)",
            mib(kib),
            mib(rss_after),
            mib(rss_after) - mib(kib),
        );
    }
    println!("open file descriptors: before {fds_before}, after {fds_after}");
    println!("live Vulkan objects: before {}", objects(&objects_before));
    println!("                     after  {}", objects(&objects_after));
    let validation = crossgpu::validation_messages();
    if instance.validation_enabled() {
        println!(
            "validation errors: {} ({} known layer false positives suppressed: {})",
            validation.len(),
            crossgpu::take_suppressed_validation_count(),
            crossgpu::KNOWN_LAYER_FALSE_POSITIVES.join(", ")
        );
    }
    let comm_mode_unchanged = comm.mode() == start_mode;
    drop(comm);
    drop(buckets);
    if deviations > 0 {
        return Err(fail(format!(
            "soak failed: {deviations} deviating elements (see the DEVIATION lines above)"
        )));
    }
    if objects_after != objects_before && comm_mode_unchanged {
        return Err(fail("soak failed: the number of live Vulkan objects changed during the run"));
    }
    if !validation.is_empty() {
        return Err(fail(format!("soak failed: {} validation errors", validation.len())));
    }
    println!("soak: OK");
    Ok(())
}
