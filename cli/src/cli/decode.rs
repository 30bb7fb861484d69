//! `crossgpu decode`: decoding (greedy, or drawn with --temperature) of the tensor-parallel
//! decoder on a group, with tokens/s, all-reduces and submits per token, and `--check` against
//! a one-member run.

use std::time::Instant;

use clap::Args;
use crossgpu::model::{Checkpoint, Sampling};
use crossgpu::tp::{Decoder, DecoderConfig, SplitSpec};
use crossgpu::{DeviceGroup, Error, GroupSpec, Instance};
use indicatif::{ProgressBar, ProgressStyle};

use super::load_bar::LoadBar;
use super::profile::{profile, profile_prompt};
use super::{fail, plural, print_choice, print_group, CliResult};

/// Options of `crossgpu decode`.
#[derive(Args, Debug, Clone)]
pub struct DecodeArgs {
    /// Model shape: `small` (CI) or `27b` (hidden 5120, FFN 17408, 64 layers, 40/8 heads).
    #[arg(long, default_value = "small")]
    pub preset: String,
    /// Decode a checkpoint's weights (a GGUF file or a Hugging Face safetensors directory)
    /// instead of the preset's seeded ones (its shape from
    /// the file: --preset, --layers and --seed do not apply; quantized matrices stay quantized).
    #[arg(long)]
    pub model: Option<std::path::PathBuf>,
    /// Override the number of layers.
    #[arg(long)]
    pub layers: Option<usize>,
    /// Tokens to decode (at least 1).
    #[arg(long, default_value_t = 32)]
    pub tokens: usize,
    /// First token id.
    #[arg(long, default_value_t = 1)]
    pub first: u32,
    /// Weight seed.
    #[arg(long)]
    pub seed: Option<u32>,
    /// Split: `even`, `auto` (weights from each member's measured matvec throughput) or
    /// weights like `2:1` (default: CROSSGPU_SPLIT, else even).
    #[arg(long)]
    pub split: Option<String>,
    /// Also decode on member 0 alone and compare the tokens.
    #[arg(long)]
    pub check: bool,
    /// Before decoding, take a prompt of this many tokens (ids from --first on) through the
    /// model as a batch (`Decoder::prefill`): once to warm up, then again from position 0,
    /// timed, and print the prompt's tokens/s.
    #[arg(long, default_value_t = 0)]
    pub prompt: usize,
    /// Decode this many tokens first, untimed.
    #[arg(long, default_value_t = 2)]
    pub warmup: usize,
    /// After the timed run, decode this many more tokens one at a time with GPU timestamps
    /// after every command, and print each member's GPU time per token by kernel.
    #[arg(long, default_value_t = 0)]
    pub profile: usize,
    /// Record every step anew instead of recording it once and replaying it (replay applies
    /// to one member and to DevicePoll; profiling records every step anyway).
    #[arg(long)]
    pub no_replay: bool,
    #[command(flatten)]
    pub steps: super::StepSettings,
    /// Split the model over every member of every MPI rank (start under `mpirun`; each rank
    /// opens CROSSGPU_DEVICES or its local rank's adapter; needs crossgpu-cli's `mpi`
    /// feature). Rank 0 prints; `--check` compares with one member on rank 0.
    #[arg(long)]
    pub ranks: bool,
    /// Draw each next token on the devices at this temperature (0, the default: greedy).
    #[arg(long, default_value_t = 0.0)]
    pub temperature: f32,
    /// With --temperature: draw among the k most likely tokens only (0: all).
    #[arg(long, default_value_t = 0)]
    pub top_k: usize,
    /// With --temperature: draw among the most likely tokens whose probabilities reach p.
    #[arg(long, default_value_t = 1.0)]
    pub top_p: f32,
    /// The draws' seed.
    #[arg(long, default_value_t = 0)]
    pub draw_seed: u64,
    /// The GPU's best device-local copy, GB/s read + written, measured elsewhere (CUDA's:
    /// `scripts/gpu-machine/cuda_copy.py`): the weight streaming is printed against it too,
    /// beside the Vulkan copy kernel measured here.
    #[arg(long)]
    pub copy_bound_gbps: Option<f64>,
}

impl DecodeArgs {
    /// How the next tokens are chosen.
    pub fn sampling(&self) -> Sampling {
        Sampling { temperature: self.temperature, top_k: self.top_k, top_p: self.top_p, seed: self.draw_seed }
    }
}

/// What one run measured.
#[derive(Debug, Clone)]
pub struct DecodeReport {
    pub tokens: Vec<u32>,
    pub tokens_per_s: f64,
    pub cpu_ms_per_token: f64,
    /// Host time in `Decoder::step` per token: recording and submitting.
    pub record_ms_per_token: f64,
    /// Of that, waiting for the in-flight limit (`CROSSGPU_MAX_IN_FLIGHT`).
    pub backpressure_ms_per_token: f64,
    /// Share of all-reduce rounds the host bridge released only after blocking in the driver
    /// (its spin time ran out), in percent; `None` without a bridge.
    pub bridge_blocked_pct: Option<f64>,
    /// Mean host time of the bridge's `done` reads and `go` signals, µs.
    pub bridge_call_us: Option<(f64, f64)>,
    /// Mean host time of one `vkQueueSubmit`, µs.
    pub queue_submit_us: Option<f64>,
    pub all_reduces_per_token: f64,
    pub submits_per_token_per_member: f64,
    /// Compute dispatches per token and member.
    pub dispatches_per_token_per_member: f64,
    /// The same for each member (they differ where a mode waits differently on a device, e.g.
    /// DevicePoll on a CPU device).
    pub dispatches_per_token_by_member: Vec<f64>,
    /// Per member: the weight bytes it streams per token × tokens/s ÷ its device-local copy
    /// kernel's bandwidth measured in this process, percent.
    pub weight_streaming_pct: Vec<f64>,
    pub mode: String,
}

fn cpu_time_s() -> f64 {
    // utime + stime of this process, from /proc (Linux); 0 where unavailable.
    let s = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<&str> = s.rsplit(')').next().unwrap_or("").split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}

/// Loads the model on `group` and decodes; prints a summary line per run.
pub fn run_decode(
    group: &DeviceGroup,
    cfg: &DecoderConfig,
    split: &SplitSpec,
    args: &DecodeArgs,
    show: bool,
) -> CliResult<DecodeReport> {
    // What a weight-streaming kernel can reach on each member, measured before the weights take
    // the memory: the copy kernel over two buffers (1 MiB on a CPU device, 256 MiB on a GPU).
    let copy_gbps = group
        .members()
        .iter()
        .map(|m| {
            let bytes =
                if m.adapter().device_type == crossgpu::DeviceType::Cpu { 1 << 20 } else { 256 << 20 };
            // Twice, the best median: the first runs on a GPU still clocking up.
            let first = crossgpu::bench::limits::copy_kernel_gbps(m, bytes, 8)?.median;
            crossgpu::bench::limits::copy_kernel_gbps(m, bytes, 8).map(|s| s.median.max(first))
        })
        .collect::<crossgpu::Result<Vec<_>>>()?;
    let t0 = Instant::now();
    let model = args.model.as_deref().map(Checkpoint::open).transpose()?;
    let loading = LoadBar::new(show, cfg.layers, model.as_ref().map(Checkpoint::read_counter));
    let progress = |done: usize, _| loading.update(done);
    let loaded = match model {
        Some(mut model) => {
            let comm = if group.len() > 1 { Some(crossgpu::Comm::new(group)?) } else { None };
            Decoder::load_from(group, cfg.clone(), split, comm, &mut model, progress)
        }
        None => Decoder::new_with_progress(group, cfg.clone(), split, progress),
    };
    let mut dec = loaded.map_err(|e| with_hint(e, args))?;
    dec.set_replay(!args.no_replay);
    args.steps.apply(&mut dec)?;
    dec.set_sampling(args.sampling()).map_err(|e| fail(format!("--temperature/--top-k/--top-p: {e}")))?;
    for m in group.members() {
        m.synchronize()?;
    }
    loading.finish();
    let mode =
        dec.comm().map_or("none (one member)".to_string(), |c| format!("{} ({})", c.mode(), c.reason()));
    if show {
        println!(
            "loaded {:.3}B parameters on {} in {:.1} s; split: KV heads {:?}, FFN {:?}, vocab {:?}",
            cfg.parameters() as f64 / 1e9,
            plural(group.len(), "member", "members"),
            t0.elapsed().as_secs_f64(),
            dec.plan.kv_heads,
            dec.plan.ffn,
            dec.plan.vocab
        );
        if let Some(path) = &args.model {
            let file = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
            let held: Vec<String> =
                dec.weight_bytes().iter().map(|&b| format!("{:.2} GB", b as f64 / 1e9)).collect();
            println!(
                "read {} ({:.2} GB) at {:.2} GB/s; weight matrices held per member: {}",
                path.display(),
                file as f64 / 1e9,
                file as f64 / 1e9 / t0.elapsed().as_secs_f64().max(1e-9),
                held.join(", ")
            );
        }
        // Shares from weights normalised by the largest (the sum of raw weights may overflow).
        let max = dec.plan.weights.iter().copied().fold(0.0, f64::max);
        let sum: f64 = dec.plan.weights.iter().map(|w| w / max).sum();
        let weights: Vec<String> = dec.plan.weights.iter().map(|&v| weight(v)).collect();
        let shares: Vec<String> =
            dec.plan.weights.iter().map(|&v| format!("{:.1}%", 100.0 * (v / max) / sum)).collect();
        match split {
            SplitSpec::Even => println!("split: even ({})", shares.join(" : ")),
            SplitSpec::Weighted(_) => {
                println!("split: weighted {} ({})", weights.join(":"), shares.join(" : "))
            }
            SplitSpec::Auto => println!(
                "split: auto, by each member's measured f16 matrix-vector throughput {} GB/s ({})",
                weights.join(":"),
                shares.join(" : ")
            ),
        }
        println!("all-reduce mode: {mode}");
        for said in args.steps.describe(&dec) {
            println!("{said}");
        }
        let s = args.sampling();
        match s.temperature {
            0.0 => println!("next token: greedy, on the devices"),
            t => println!(
                "next token: drawn on the devices at temperature {t}, top-k {}, top-p {}, seed {} ({} candidates a member at most)",
                s.top_k,
                s.top_p,
                s.seed,
                dec.sampling_room()
            ),
        }
        println!(
            "steps: {}",
            if dec.replays() {
                "recorded once, then replayed (one submit of a pre-recorded command buffer per token and member)"
            } else if args.no_replay {
                "recorded every token (--no-replay)"
            } else {
                "recorded every token (this all-reduce mode needs the host between a round's phases; DevicePoll replays)"
            }
        );
    }
    if args.prompt > 0 {
        let prompt: Vec<u32> =
            (0..args.prompt).map(|i| ((args.first as usize + i) % cfg.vocab) as u32).collect();
        dec.prefill(&prompt)?;
        dec.rewind(0)?;
        let t = Instant::now();
        dec.prefill(&prompt)?;
        let secs = t.elapsed().as_secs_f64();
        if show {
            println!(
                "prompt: {} tokens as a batch in {:.3} s: {:.1} prompt tokens/s (the second of two runs)",
                args.prompt,
                secs,
                args.prompt as f64 / secs
            );
        }
    }
    let warm = args.warmup.min(cfg.max_seq.saturating_sub(args.tokens + args.prompt));
    let mut tokens = Vec::new();
    if warm > 0 {
        tokens.extend(dec.generate(args.first, warm, |_| {})?);
    }
    let before = dec.stats();
    let dispatched = |dec: &Decoder| dec.members().iter().map(|m| m.stats().dispatches).collect::<Vec<_>>();
    let by_member_before = dispatched(&dec);
    let bar = if show { ProgressBar::new(args.tokens as u64) } else { ProgressBar::hidden() };
    bar.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} tokens {per_sec}, eta {eta} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let next = tokens.last().copied().unwrap_or(args.first);
    let (c0, w0) = (cpu_time_s(), Instant::now());
    let out = dec.generate(next, args.tokens, |_| bar.inc(1))?;
    let wall = w0.elapsed().as_secs_f64();
    let cpu = cpu_time_s() - c0;
    bar.finish_and_clear();
    let after = dec.stats();
    let n = args.tokens as f64;
    let by_member: Vec<f64> =
        dispatched(&dec).iter().zip(&by_member_before).map(|(a, b)| (a - b) as f64 / n).collect();
    let bridge = match (before.bridge, after.bridge) {
        (Some(b), Some(a)) => Some(a.since(&b)),
        _ => None,
    };
    // The weight bytes each member streams per token: its matrices as held (quantized ones
    // as their blocks; the plan's footprint counts f16).
    let streamed: Vec<f64> = dec.weight_bytes().iter().map(|&b| b as f64).collect();
    let report = DecodeReport {
        tokens: out,
        tokens_per_s: args.tokens as f64 / wall,
        cpu_ms_per_token: cpu * 1e3 / n,
        all_reduces_per_token: (after.all_reduces - before.all_reduces) as f64 / n,
        record_ms_per_token: (after.step_host_time - before.step_host_time).as_secs_f64() * 1e3 / n,
        backpressure_ms_per_token: (after.backpressure_wait - before.backpressure_wait).as_secs_f64() * 1e3
            / n,
        bridge_blocked_pct: bridge.map(|b| b.blocked_pct()),
        bridge_call_us: bridge.map(|b| b.mean_call_us()),
        queue_submit_us: (after.queue_submits > before.queue_submits).then(|| {
            (after.queue_submit_time - before.queue_submit_time).as_secs_f64() * 1e6
                / (after.queue_submits - before.queue_submits) as f64
        }),
        submits_per_token_per_member: (after.submits - before.submits) as f64 / n / group.len() as f64,
        dispatches_per_token_per_member: (after.dispatches - before.dispatches) as f64
            / n
            / group.len() as f64,
        dispatches_per_token_by_member: by_member,
        weight_streaming_pct: streamed
            .iter()
            .zip(&copy_gbps)
            .map(|(bytes, gbps)| 100.0 * bytes * (args.tokens as f64 / wall) / (gbps * 1e9))
            .collect(),
        mode,
    };
    if show {
        println!(
            "{}: {:.2} tokens/s, CPU {:.2} ms/token (recording and submitting {:.2} ms, of which waiting for the in-flight limit {:.2} ms), {:.1} all-reduces and {:.1} submits per token per member",
            plural(group.len(), "member", "members"),
            report.tokens_per_s,
            report.cpu_ms_per_token,
            report.record_ms_per_token,
            report.backpressure_ms_per_token,
            report.all_reduces_per_token,
            report.submits_per_token_per_member
        );
        println!(
            "{:.1} dispatches per token per member ({}); weight streaming (weight bytes per token x tokens/s / the copy kernel's bandwidth, measured here): {}",
            report.dispatches_per_token_per_member,
            report
                .dispatches_per_token_by_member
                .iter()
                .enumerate()
                .map(|(i, d)| format!("member {i} {d:.1}"))
                .collect::<Vec<_>>()
                .join(", "),
            (0..group.len())
                .map(|i| {
                    let bytes = streamed[i];
                    let rate = bytes * report.tokens_per_s;
                    let bound = args.copy_bound_gbps.map_or(String::new(), |g| {
                        format!(", {:.1}% of the given bound {}/s", 100.0 * rate / (g * 1e9), si_bytes(g * 1e9))
                    });
                    format!(
                        "member {i} {} at {}/s = {:.1}% of {}/s{bound}",
                        si_bytes(bytes),
                        si_bytes(rate),
                        report.weight_streaming_pct[i],
                        si_bytes(copy_gbps[i] * 1e9)
                    )
                })
                .collect::<Vec<_>>()
                .join("; ")
        );
        if let Some(p) = report.bridge_blocked_pct {
            println!("host bridge: {p:.1}% of rounds released only after blocking (spin time ran out)");
        }
        if let (Some(q), Some((r, g))) = (report.queue_submit_us, report.bridge_call_us) {
            println!("driver calls: vkQueueSubmit {q:.2} us, bridge reads a done value {r:.3} us, signals a go {g:.2} us (means)");
        }
        println!("tokens: {:?}", report.tokens);
    }
    if args.profile > 0 {
        if args.prompt > 0 {
            let prompt: Vec<u32> =
                (0..args.prompt).map(|i| ((args.first as usize + i) % cfg.vocab) as u32).collect();
            profile_prompt(group, &mut dec, &prompt)?;
        }
        profile(group, &mut dec, args.profile)?;
    }
    Ok(report)
}

/// Bytes with a decimal unit and three significant digits: `42.6 GB`, `2.35 TB`, `811 kB`.
fn si_bytes(b: f64) -> String {
    let (v, unit) = [(1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "kB")]
        .into_iter()
        .find(|&(scale, _)| b >= scale)
        .map_or((b, "B"), |(scale, unit)| (b / scale, unit));
    let digits = if v >= 100.0 {
        0
    } else if v >= 10.0 {
        1
    } else {
        2
    };
    format!("{v:.digits$} {unit}")
}

/// A split weight as a user would write it: `2`, `0.5`, `1e308`.
fn weight(v: f64) -> String {
    if v != 0.0 && !(1e-3..1e6).contains(&v.abs()) {
        format!("{v:e}")
    } else {
        let s = format!("{v:.3}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

/// A load failure with what the `decode` user can change: the model's size flags and the
/// devices.
fn with_hint(e: Error, args: &DecodeArgs) -> super::CliError {
    match e {
        Error::OutOfDeviceMemory { .. } | Error::Unsupported(_) => fail(format!(
            "{e}\nthe model is --preset {}{}: pass --preset small or fewer --layers, or name more or larger devices in CROSSGPU_DEVICES (see `crossgpu devices`)",
            args.preset,
            args.layers.map_or(String::new(), |l| format!(" --layers {l}"))
        )),
        e => e.into(),
    }
}

/// `crossgpu decode`.
pub fn decode(args: &DecodeArgs) -> CliResult {
    crossgpu::check_environment()?;
    args.sampling().validate().map_err(|e| fail(format!("--temperature/--top-k/--top-p: {e}")))?;
    if args.tokens == 0 {
        return Err(fail("--tokens must be at least 1"));
    }
    let mut cfg = match &args.model {
        Some(path) => {
            if args.layers.is_some() || args.seed.is_some() {
                return Err(fail(
                    "--layers and --seed set a preset's model; --model's shape and weights are the file's",
                ));
            }
            Checkpoint::open(path)?.config(args.prompt + args.tokens + args.warmup + args.profile)?
        }
        None => DecoderConfig::preset(&args.preset)?,
    };
    if let Some(l) = args.layers {
        if l == 0 {
            return Err(fail("--layers must be at least 1"));
        }
        cfg.layers = l;
    }
    if args.first as usize >= cfg.vocab {
        return Err(fail(format!(
            "--first {}: token ids of {} are 0 to {}",
            args.first,
            args.model.as_ref().map_or(format!("--preset {}", args.preset), |p| p.display().to_string()),
            cfg.vocab - 1
        )));
    }
    if let Some(s) = args.seed {
        cfg.seed = s;
    }
    let positions = args.prompt + args.tokens + args.warmup + args.profile;
    if positions > cfg.max_seq {
        cfg.max_seq = positions;
    }
    let split = match &args.split {
        Some(s) => SplitSpec::parse(s).map_err(|e| e.for_setting("--split"))?,
        None => SplitSpec::from_env()?,
    };
    if args.ranks {
        if args.model.is_some() {
            return Err(fail("decode --ranks decodes the seeded presets; --model runs in one process"));
        }
        if args.prompt > 0 {
            return Err(fail("decode --ranks times the decode only; --prompt runs in one process"));
        }
        return decode_across_ranks(args, &cfg, &split);
    }
    let instance = Instance::new()?;
    let group = DeviceGroup::from_env_or(&instance, &GroupSpec::Gpus)?;
    print_choice(
        &group,
        "one member per GPU (CPU devices only where there is no GPU; set CROSSGPU_DEVICES to choose, e.g. 0x2 for two queue stand-ins)",
    );
    if let SplitSpec::Weighted(_) = split {
        // One weight per member: say which setting has the wrong count.
        let setting = if args.split.is_some() { "--split" } else { "CROSSGPU_SPLIT" };
        split.weights(group.len()).map_err(|e| e.for_setting(setting))?;
    }
    print_group(&group);
    let report = run_decode(&group, &cfg, &split, args, true)?;
    if args.check {
        // The same model on the first member's adapter alone.
        let first_adapter = group.layout()[0].0;
        drop(group);
        let single = DeviceGroup::open(&instance, &GroupSpec::parse(&first_adapter.to_string())?)?;
        println!("--check: decoding again on one member ({})", single.members()[0].label());
        let one = run_decode(&single, &cfg, &SplitSpec::Even, args, true)?;
        if one.tokens != report.tokens {
            return Err(fail(format!(
                "--check failed: the group ({}) gave {:?}, one member {:?}",
                report.mode, report.tokens, one.tokens
            )));
        }
        println!("--check: same {} tokens as one member", one.tokens.len());
    }
    Ok(())
}

#[cfg(not(feature = "mpi"))]
fn decode_across_ranks(_: &DecodeArgs, _: &DecoderConfig, _: &SplitSpec) -> CliResult {
    Err(fail(
        "decode --ranks: this crossgpu was built without MPI; build it with `cargo build --release -p crossgpu-cli --features mpi` and start it under mpirun",
    ))
}

/// `crossgpu decode --ranks`: this rank's share of the model, decoded in step with every other
/// rank's (`Decoder::across_ranks`).
#[cfg(feature = "mpi")]
fn decode_across_ranks(args: &DecodeArgs, cfg: &DecoderConfig, split: &SplitSpec) -> CliResult {
    use crossgpu::ranks::RankComm;
    use crossgpu::CommOptions;
    if args.profile > 0 {
        return Err(fail("decode --ranks: --profile records one process's members; leave it out"));
    }
    let (universe, rank) = super::mpirun::init_mpi()?;
    let lead = rank == 0;
    let instance = Instance::new()?;
    let group = super::mpirun::rank_group(&instance)?;
    let comm = RankComm::new(&group, CommOptions::from_env()?)?;
    let (ranks, members, path) = (comm.ranks(), comm.global_members().len(), comm.path());
    if lead {
        println!("{ranks} ranks, {members} members, path between ranks {path:?}:");
        print!("{}", comm.describe());
    }
    let mut d = Decoder::across_ranks(&group, cfg.clone(), split, comm).map_err(|e| with_hint(e, args))?;
    let warm = d.generate(args.first, args.warmup, |_| {})?;
    let from = warm.last().copied().unwrap_or(args.first);
    let t0 = Instant::now();
    let tokens = d.generate(from, args.tokens, |_| {})?;
    let secs = t0.elapsed().as_secs_f64();
    let host = d.stats().step_host_time.as_secs_f64() * 1e3 / (args.warmup + args.tokens) as f64;
    drop(d);
    drop(group);
    if lead {
        println!(
            "{} in {secs:.3} s: {:.2} tokens/s over {ranks} ranks ({members} members); host time in step {host:.3} ms per token on rank 0",
            plural(args.tokens, "token", "tokens"),
            args.tokens as f64 / secs
        );
        println!("tokens: {tokens:?}");
        if args.check {
            let single = DeviceGroup::open(&instance, &GroupSpec::parse("0")?)?;
            println!("--check: decoding again on one member ({}) of rank 0", single.members()[0].label());
            let mut one = Decoder::new(&single, cfg.clone(), &SplitSpec::Even)?;
            let one_warm = one.generate(args.first, args.warmup, |_| {})?;
            let one_tokens =
                one.generate(one_warm.last().copied().unwrap_or(args.first), args.tokens, |_| {})?;
            if (&one_warm, &one_tokens) != (&warm, &tokens) {
                return Err(fail(format!(
                    "--check failed: {ranks} ranks gave {warm:?} then {tokens:?}, one member {one_warm:?} then {one_tokens:?}"
                )));
            }
            println!("--check: same {} tokens as one member", warm.len() + tokens.len());
        }
    }
    drop(universe);
    Ok(())
}
