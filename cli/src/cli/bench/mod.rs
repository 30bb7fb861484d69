//! `crossgpu bench`: the measurements of `crossgpu::bench` run side by side, written as JSON and
//! charted (PNG, plotters). docs/BENCHMARKS.md reports `bench limits`, `bench allreduce` and
//! `bench matvec` runs (scripts/gpu-machine/), and `crossgpu decode`.
//!
//! The flags and the sizes they give are settings.rs. Every point is printed and written to
//! bench.json as soon as it is measured, so an interrupted run keeps what it measured; the
//! charts are drawn at the end of the all-reduce section.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use crossgpu::bench::allreduce::{self as ar, AllReducePoint};
use crossgpu::bench::limits::{self, Limits};
use crossgpu::bench::matvec::MatvecPoint;
use crossgpu::bench::{baseline, matvec};
use crossgpu::tp::{DecoderConfig, SplitSpec};
use crossgpu::{DeviceGroup, Error, GroupSpec, Instance, Mode, ModeRequest, Precision};
use indicatif::ProgressBar;
use serde::Serialize;

use self::chart::{chart, chart_from_file, subtitle};
use self::settings::{
    decode_counts, parse_modes, parse_shape, print_settings, settings, Common, Settings, SIZES,
};
use self::text::{bar, fmt_bytes, say, sig3};
use crate::cli::decode::{run_decode, DecodeArgs};
use crate::cli::{fail, plural, CliResult};

mod chart;
mod ranks;
#[cfg(feature = "mpi")]
mod ranks_mpi;
#[cfg_attr(not(feature = "mpi"), allow(dead_code))]
mod scaleout;
mod settings;
mod text;

#[derive(Args, Debug)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub what: BenchWhat,
}

#[derive(Subcommand, Debug)]
pub enum BenchWhat {
    /// Limits, all-reduce (every layout, mode and the wgpu baseline), matvec and decode.
    All(Box<Common>),
    /// Copy bandwidths, semaphore round trip, submit cost.
    Limits(Box<Common>),
    /// All-reduce latency and bandwidth against size.
    Allreduce(Box<Common>),
    /// Matrix–vector product bandwidth.
    Matvec(Box<Common>),
    /// 27B-class decode on 1, 2 and 4 queue stand-ins.
    Decode(Box<Common>),
    /// Under `mpirun`, one rank per process: the all-reduce across ranks against MPI's own
    /// all-reduce in host memory and the rank's own all-reduce, the link's α and β, and the
    /// α–β model for 2…512 hosts (needs the `mpi` feature of crossgpu-cli).
    Ranks(ranks::RanksArgs),
    /// Redraw the charts from a bench.json.
    Chart {
        /// The JSON written by a bench run.
        json: PathBuf,
        /// Folder for the PNGs (created if missing).
        #[arg(long, default_value = ".")]
        out: PathBuf,
    },
}

#[derive(Serialize, Default)]
struct Report {
    date: String,
    command: String,
    /// Every adapter of the instance.
    adapters: Vec<String>,
    /// The adapters measured (`--adapter`, `--pair`, those of `--layouts`), by name.
    devices: Vec<String>,
    /// The sizes this run used, given or picked for the device.
    settings: Settings,
    limits: Vec<Limits>,
    /// DevicePoll's relay without copies, across `--adapter` and `--pair`.
    relay_steps: Vec<RelayStep>,
    allreduce: Vec<AllReducePoint>,
    skipped: Vec<String>,
    matvec: Vec<MatvecPoint>,
    decode: Vec<DecodePoint>,
}

#[derive(Serialize)]
struct RelayStep {
    layout: String,
    step_us: crossgpu::bench::Summary,
}

#[derive(Serialize)]
struct DecodePoint {
    layout: String,
    members: usize,
    tokens_per_s: f64,
    cpu_ms_per_token: f64,
    record_ms_per_token: f64,
    all_reduces_per_token: f64,
    submits_per_token_per_member: f64,
    dispatches_per_token_per_member: f64,
    /// Per member: streamed weight bytes × tokens/s ÷ its copy kernel's bandwidth, percent.
    weight_streaming_pct: Vec<f64>,
    mode: String,
    tokens: Vec<u32>,
}

fn open(instance: &Instance, spec: &str) -> crossgpu::Result<DeviceGroup> {
    DeviceGroup::open(instance, &GroupSpec::parse(spec)?)
}

/// Work units of one all-reduce point: rounds timed and warmed up, each costing a fixed
/// overhead plus its payload (a CPU device moves ~1 GB/s, a GPU tens).
fn cost(bytes: u64, rounds: usize, batches: usize, warm: usize, cpu: bool) -> u64 {
    let per_round = 1 + bytes / if cpu { 64 << 10 } else { 1 << 20 };
    (rounds * batches + warm) as u64 * per_round
}

fn allreduce_cost(bytes: u64, cpu: bool) -> u64 {
    let (rounds, batches) = ar::schedule(bytes, cpu);
    cost(bytes, rounds, batches, rounds.min(20), cpu)
}

fn baseline_cost(bytes: u64, cpu: bool) -> u64 {
    let (rounds, batches) = ar::schedule(bytes, cpu);
    cost(bytes, rounds.min(100), batches, 3, cpu)
}

/// `--out` is made and written to (a probe file, removed) before anything is measured.
fn check_out(out: &Path) -> CliResult {
    let shown = out.display();
    std::fs::create_dir_all(out)
        .map_err(|e| fail(format!("--out {shown}: cannot create the folder: {e}")))?;
    let probe = out.join(format!(".crossgpu-bench-probe-{}", std::process::id()));
    std::fs::write(&probe, b"probe")
        .map_err(|e| fail(format!("--out {shown}: cannot write there ({}): {e}", probe.display())))?;
    std::fs::remove_file(&probe)
        .map_err(|e| fail(format!("--out {shown}: cannot remove {}: {e}", probe.display())))?;
    Ok(())
}

/// Where the run writes and what it has.
struct Run<'a> {
    instance: &'a Instance,
    c: &'a Common,
    s: Settings,
    /// The `--adapter` as a layout word (as the user typed it).
    a: &'a str,
    /// Queues of the adapter's family 0.
    queues: usize,
    cpu: bool,
    r: Report,
}

impl Run<'_> {
    /// Writes bench.json (through a temporary file and a rename: an interrupt leaves the
    /// previous complete file, never half of one).
    fn save(&self) -> CliResult {
        let path = self.c.out.join("bench.json");
        let tmp = self.c.out.join("bench.json.tmp");
        let json = serde_json::to_string_pretty(&self.r).map_err(|e| fail(format!("bench.json: {e}")))?;
        std::fs::write(&tmp, json).map_err(|e| fail(format!("{}: {e}", tmp.display())))?;
        std::fs::rename(&tmp, &path).map_err(|e| fail(format!("{}: {e}", path.display())))?;
        Ok(())
    }

    fn skip(&mut self, pb: &ProgressBar, what: String) -> CliResult {
        say(pb, format!("skipped: {what}"));
        self.r.skipped.push(what);
        self.save()
    }

    fn limits(&mut self) -> CliResult {
        let g = open(self.instance, self.a)?;
        let m = &g.members()[0];
        println!("limits: measuring on {} with {} buffers ...", m.label(), fmt_bytes(self.s.limit_bytes));
        let t = Instant::now();
        let l = limits::measure(m, self.s.limit_bytes, 5)?;
        println!(
            "limits on {} ({} buffers, {:.1} s), median (p10, p90) of {} repetitions:",
            l.device,
            fmt_bytes(l.bytes),
            t.elapsed().as_secs_f64(),
            l.device_to_host_gbps.samples
        );
        for (what, s, unit) in l.rows() {
            println!("  {what:<52} {:>9} {unit:<4}  ({}, {})", sig3(s.median), sig3(s.p10), sig3(s.p90));
        }
        self.r.limits.push(l);
        self.save()?;
        if self.c.pair.is_empty() {
            let why = "relay step across two devices: no --pair (a second device) given";
            println!("  skipped: {why}");
            self.r.skipped.push(why.into());
            return self.save();
        }
        let layout = format!("{},{}", self.a, self.c.pair);
        let g = open(self.instance, &layout)?;
        let relay = limits::relay_step(g.members(), 5)?;
        println!(
            "  {:<52} {:>9} us    ({}, {})  [{layout}]",
            "DevicePoll relay: all arrive, host releases, a step",
            sig3(relay.median),
            sig3(relay.p10),
            sig3(relay.p90)
        );
        self.r.relay_steps.push(RelayStep { layout, step_us: relay });
        self.save()
    }

    fn allreduce(&mut self) -> CliResult {
        let (c, a, cpu) = (self.c, self.a, self.cpu);
        let sizes: Vec<u64> = SIZES.iter().copied().filter(|&s| s <= self.s.max_bytes).collect();
        if sizes.is_empty() {
            return Err(fail(format!(
                "--max-bytes {}: the smallest payload measured is {} bytes",
                self.s.max_bytes, SIZES[0]
            )));
        }
        // Layouts: queue stand-ins for each count, two VkDevices, and the cross-vendor pair.
        // Queue stand-ins where the adapter has the queues (lavapipe has one: VkDevices there).
        let queues = self.queues;
        let layout_of = |n: usize| if n <= queues { format!("{a}*{n}") } else { vec![a; n].join(",") };
        let bridge = ModeRequest::Forced(Mode::HostBridge);
        let poll = ModeRequest::Forced(Mode::DevicePoll);
        let shared_modes =
            vec![bridge, ModeRequest::Forced(Mode::SyncFd), ModeRequest::Forced(Mode::Generic)];
        // DevicePoll needs a VkDevice per member (a polling kernel must not wait for work queued
        // behind it).
        let all_modes =
            vec![bridge, ModeRequest::Forced(Mode::SyncFd), poll, ModeRequest::Forced(Mode::Generic)];
        let mut layouts: Vec<(String, Vec<ModeRequest>)> = Vec::new();
        if let Some(list) = &c.layouts {
            let modes = parse_modes(&c.modes)?;
            for l in list.split(';').map(str::trim).filter(|l| !l.is_empty()) {
                layouts.push((l.to_string(), modes.clone()));
            }
        } else {
            for &n in &self.s.members {
                if n == 1 {
                    layouts.push((format!("{a}*1"), vec![bridge]));
                    continue;
                }
                // Members sharing one queue (what separate GPUs would see: no engine switching),
                // then one queue each (the switching cost), where the adapter has the queues.
                layouts.push((format!("{a}/{n}"), shared_modes.clone()));
                if n <= queues {
                    layouts.push((layout_of(n), vec![bridge]));
                } else {
                    layouts.push((layout_of(n), all_modes.clone()));
                }
            }
            for extra in [
                format!("{a},{a}"),
                if c.pair.is_empty() { String::new() } else { format!("{a},{}", c.pair) },
            ] {
                if !extra.is_empty() && layouts.iter().all(|l| l.0 != extra) {
                    layouts.push((extra, vec![bridge, poll, ModeRequest::Forced(Mode::Generic)]));
                }
            }
        }
        let baseline_counts: Vec<usize> = if c.no_baseline {
            Vec::new()
        } else {
            self.s.members.iter().copied().filter(|&n| n > 1).collect()
        };
        let per_mode: u64 = sizes.iter().map(|&b| allreduce_cost(b, cpu)).sum();
        let per_baseline: u64 = sizes.iter().map(|&b| baseline_cost(b, cpu)).sum();
        let total = layouts.iter().map(|l| l.1.len() as u64).sum::<u64>() * per_mode
            + baseline_counts.len() as u64 * per_baseline;
        let points = layouts.iter().map(|l| l.1.len()).sum::<usize>() * sizes.len()
            + baseline_counts.len() * sizes.len();
        println!(
            "all-reduce: {points} points ({} layouts, {} sizes from {} to {}{})",
            layouts.len(),
            sizes.len(),
            fmt_bytes(sizes[0]),
            fmt_bytes(*sizes.last().unwrap_or(&0)),
            if baseline_counts.is_empty() { String::new() } else { ", and the wgpu baseline".into() }
        );
        println!(
            "{:<28} {:<14} {:>12} {:>4}  {:>10} (p10, p90)  algorithmic bandwidth",
            "layout", "mode", "payload", "wire", "per round"
        );
        let pb = bar(total, "all-reduce");
        let precision = match c.wire.as_str() {
            "f32" => Precision::F32,
            "f16" => Precision::F16,
            _ => Precision::Auto,
        };
        let spin = c.spin_us.map(Duration::from_micros);
        for (layout, modes) in &layouts {
            let g = open(self.instance, layout)?;
            let max_member_bytes =
                g.members().iter().map(|m| m.adapter().caps.max_storage_buffer_range).min().unwrap_or(0);
            for mode in modes {
                for (k, &bytes) in sizes.iter().enumerate() {
                    pb.set_message(format!("{layout} {mode:?} {}", fmt_bytes(bytes)));
                    if bytes > max_member_bytes {
                        pb.inc(allreduce_cost(bytes, cpu));
                        self.skip(
                            &pb,
                            format!("{layout} {mode:?} {bytes} B: past a member's maxStorageBufferRange ({max_member_bytes} B)"),
                        )?;
                        continue;
                    }
                    let got = ar::measure(&g, layout, *mode, precision, bytes, spin);
                    pb.inc(allreduce_cost(bytes, cpu));
                    match got {
                        Ok(p) => {
                            say(&pb, allreduce_row(&p));
                            self.r.allreduce.push(p);
                            self.save()?;
                        }
                        Err(e) => {
                            let fatal_for_mode =
                                matches!(e, Error::Unsupported(_) | Error::MissingExtension { .. });
                            self.skip(&pb, format!("{layout} {mode:?} {bytes} B: {e}"))?;
                            if fatal_for_mode {
                                // The mode cannot run on this layout at all.
                                pb.inc(sizes[k + 1..].iter().map(|&b| allreduce_cost(b, cpu)).sum());
                                break;
                            }
                        }
                    }
                }
            }
        }
        let adapters = c.baseline_adapters.as_deref().unwrap_or(a);
        for &n in &baseline_counts {
            for &bytes in &sizes {
                pb.set_message(format!(
                    "wgpu baseline, {} {}",
                    plural(n, "member", "members"),
                    fmt_bytes(bytes)
                ));
                let got = baseline::measure(adapters, n, bytes);
                pb.inc(baseline_cost(bytes, cpu));
                match got {
                    Ok(p) => {
                        say(&pb, allreduce_row(&p));
                        self.r.allreduce.push(p);
                        self.save()?;
                    }
                    Err(e) => self.skip(
                        &pb,
                        format!("wgpu baseline, {} {bytes} B: {e}", plural(n, "member", "members")),
                    )?,
                }
            }
        }
        pb.finish_and_clear();
        match chart(&self.r.allreduce, &c.out, &subtitle(&self.r.devices, &self.r.date)) {
            Ok(files) => {
                println!(
                    "charts: {}",
                    files.iter().map(|f| f.display().to_string()).collect::<Vec<_>>().join(", ")
                )
            }
            Err(e) => eprintln!("warning: no chart drawn: {e}"),
        }
        Ok(())
    }

    fn matvec(&mut self) -> CliResult {
        let g = open(self.instance, self.a)?;
        let shapes: Vec<(usize, usize)> =
            self.s.matvec_shapes.iter().filter_map(|s| parse_shape(s)).collect();
        let kernels = crossgpu::MATVEC_F16_KERNELS;
        // Weights read once per product: the time goes with rows x cols.
        let unit = |(r, c): (usize, usize)| (r * c) as u64 / 4096 + 1;
        let pb = bar(shapes.iter().map(|&s| unit(s)).sum::<u64>() * kernels.len() as u64, "matvec");
        for (rows, cols) in shapes {
            // Every f16 kernel for cols % 8 == 0, side by side (other shapes: recorded as skipped).
            for kernel in kernels {
                pb.set_message(format!("matvec {rows}x{cols} {kernel}"));
                let got = matvec::measure_with(&g.members()[0], Some(kernel), rows, cols, 5);
                pb.inc(unit((rows, cols)));
                match got {
                    Ok(p) => {
                        say(&pb, matvec_row(&p));
                        self.r.matvec.push(p);
                        self.save()?;
                    }
                    Err(e) => self.skip(&pb, format!("matvec {rows}x{cols} {kernel}: {e}"))?,
                }
            }
        }
        pb.finish_and_clear();
        // The decoder's fused kernels beside what each replaces, at one member's shapes of the
        // preset (--preset: 27b on a GPU that holds it, small on a CPU device).
        let cfg = DecoderConfig::preset(&self.s.preset).map_err(|e| e.for_setting("--preset"))?;
        let shape =
            (cfg.hidden, cfg.ffn, cfg.q_heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim, cfg.head_dim);
        match matvec::measure_decoder_kernels(&g.members()[0], shape, 5) {
            Ok(points) => {
                for p in points {
                    println!("{}", matvec_row(&p));
                    self.r.matvec.push(p);
                }
                self.save()?;
            }
            Err(e) => self.skip(
                &ProgressBar::hidden(),
                format!("decoder kernels of --preset {}: {e}", self.s.preset),
            )?,
        }
        Ok(())
    }

    fn decode(&mut self) -> CliResult {
        let (c, a) = (self.c, self.a);
        let mut cfg = DecoderConfig::preset(&self.s.preset).map_err(|e| e.for_setting("--preset"))?;
        cfg.max_seq = cfg.max_seq.max(c.tokens + 4);
        let args = DecodeArgs {
            preset: self.s.preset.clone(),
            layers: None,
            tokens: c.tokens,
            first: 1,
            seed: None,
            split: None,
            check: false,
            warmup: 2,
            profile: 0,
            no_replay: false,
            ranks: false,
        };
        let mut decode_layouts: Vec<(String, usize)> = Vec::new();
        // One member per GPU unless --members asks for queue stand-ins: on one GPU they only
        // add all-reduce rounds (3.3x slower on the H200, docs/DEVICES.md).
        let counts = if self.s.defaulted.contains(&"--members") {
            println!("decode: one member (one per GPU; --members 1,2,4 compares queue stand-ins of it)");
            vec![1]
        } else {
            decode_counts(&self.s.members)
        };
        for n in counts {
            // The issue asks for 1, 2 and 4 members; shared queue first, then one queue each.
            decode_layouts.push((if n == 1 { format!("{a}*1") } else { format!("{a}/{n}") }, n));
            if n > 1 {
                decode_layouts
                    .push((if n <= self.queues { format!("{a}*{n}") } else { vec![a; n].join(",") }, n));
            }
        }
        let hidden = ProgressBar::hidden();
        let count = decode_layouts.len();
        for (i, (layout, n)) in decode_layouts.into_iter().enumerate() {
            println!(
                "decode {} of {count}: --preset {} on {layout} ({})",
                i + 1,
                self.s.preset,
                plural(n, "member", "members")
            );
            let g = open(self.instance, &layout)?;
            match run_decode(&g, &cfg, &SplitSpec::Even, &args, true) {
                Ok(d) => {
                    let p = DecodePoint {
                        layout,
                        members: n,
                        tokens_per_s: d.tokens_per_s,
                        cpu_ms_per_token: d.cpu_ms_per_token,
                        record_ms_per_token: d.record_ms_per_token,
                        all_reduces_per_token: d.all_reduces_per_token,
                        submits_per_token_per_member: d.submits_per_token_per_member,
                        dispatches_per_token_per_member: d.dispatches_per_token_per_member,
                        weight_streaming_pct: d.weight_streaming_pct,
                        mode: d.mode,
                        tokens: d.tokens,
                    };
                    println!("{}", decode_row(&p));
                    self.r.decode.push(p);
                    self.save()?;
                }
                Err(e) => self.skip(&hidden, format!("decode {layout}: {e}"))?,
            }
        }
        Ok(())
    }
}

/// The adapter indices `spec` (a layout, the CROSSGPU_DEVICES syntax) names; errors name `flag`.
fn resolve(instance: &Instance, spec: &str, flag: &'static str) -> CliResult<Vec<usize>> {
    let parsed = GroupSpec::parse(spec).map_err(|e| e.for_setting(flag))?;
    let members = parsed.resolve(instance.adapters()).map_err(|e| fail(format!("{flag} {spec}: {e}")))?;
    let mut out: Vec<usize> = Vec::new();
    for (adapter, _) in members {
        if !out.contains(&adapter) {
            out.push(adapter);
        }
    }
    Ok(out)
}

pub fn bench(args: &BenchArgs) -> CliResult {
    crossgpu::check_environment()?;
    let (c, which) = match &args.what {
        BenchWhat::Chart { json, out } => return chart_from_file(json, out),
        #[cfg(feature = "mpi")]
        BenchWhat::Ranks(r) => return ranks_mpi::bench_ranks(r),
        #[cfg(not(feature = "mpi"))]
        BenchWhat::Ranks(r) => return ranks::bench_ranks(r),
        BenchWhat::All(c) => (&**c, "all"),
        BenchWhat::Limits(c) => (&**c, "limits"),
        BenchWhat::Allreduce(c) => (&**c, "allreduce"),
        BenchWhat::Matvec(c) => (&**c, "matvec"),
        BenchWhat::Decode(c) => (&**c, "decode"),
    };
    // Every flag is checked before anything is measured.
    if c.tokens == 0 {
        return Err(fail("--tokens must be at least 1"));
    }
    parse_modes(&c.modes)?;
    check_out(&c.out)?;
    let instance = Instance::new()?;
    let adapter_ids = resolve(&instance, &c.adapter, "--adapter")?;
    let Some(&id) = adapter_ids.first() else {
        return Err(fail(format!("--adapter {}: names no adapter", c.adapter)));
    };
    let adapter = &instance.adapters()[id];
    let mut used = vec![id];
    if !c.pair.is_empty() {
        used.extend(resolve(&instance, &c.pair, "--pair")?);
    }
    if let Some(list) = &c.layouts {
        for l in list.split(';').map(str::trim).filter(|l| !l.is_empty()) {
            used.extend(resolve(&instance, l, "--layouts")?);
        }
    }
    used.dedup();
    let s = settings(c, which, adapter)?;
    print_settings(&s, which, c);

    let mut devices: Vec<String> = Vec::new();
    for &i in &used {
        let name = instance.adapters()[i].name.clone();
        if !devices.contains(&name) {
            devices.push(name);
        }
    }
    let mut run = Run {
        instance: &instance,
        c,
        a: &c.adapter,
        queues: adapter.caps.queue_count.max(1) as usize,
        cpu: s.cpu_device,
        s: s.clone(),
        r: Report {
            date: date_utc(),
            command: std::env::args().collect::<Vec<_>>().join(" "),
            adapters: instance
                .adapters()
                .iter()
                .map(|a| {
                    format!(
                        "[{}] {} ({} {}, {})",
                        a.index, a.name, a.driver_name, a.driver_version, a.driver_info
                    )
                })
                .collect(),
            devices,
            settings: s,
            ..Default::default()
        },
    };
    run.save()?;
    let t = Instant::now();
    if matches!(which, "all" | "limits") {
        run.limits()?;
    }
    if matches!(which, "all" | "allreduce") {
        run.allreduce()?;
    }
    if matches!(which, "all" | "matvec") {
        run.matvec()?;
    }
    if matches!(which, "all" | "decode") {
        run.decode()?;
    }
    let r = &run.r;
    println!(
        "bench {which}: done in {:.0} s; {} all-reduce, {} matvec, {} decode {}{}; {}",
        t.elapsed().as_secs_f64(),
        r.allreduce.len(),
        r.matvec.len(),
        r.decode.len(),
        if r.allreduce.len() + r.matvec.len() + r.decode.len() == 1 { "point" } else { "points" },
        if r.skipped.is_empty() {
            String::new()
        } else {
            format!(", {} skipped (listed above)", r.skipped.len())
        },
        c.out.join("bench.json").display()
    );
    Ok(())
}

fn date_utc() -> String {
    std::process::Command::new("date")
        .args(["-u", "+%Y-%m-%d %H:%M UTC"])
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .unwrap_or_default()
        .trim()
        .to_string()
}

fn allreduce_row(p: &AllReducePoint) -> String {
    format!(
        "{:<28} {:<14} {:>12} {:>4}  {:>10} us ({}, {})  {} GB/s{}{}{}",
        p.layout,
        p.mode,
        fmt_bytes(p.bytes),
        p.wire,
        sig3(p.us_per_round.median),
        sig3(p.us_per_round.p10),
        sig3(p.us_per_round.p90),
        sig3(p.algbw_gbps),
        p.host_us_per_round.map_or(String::new(), |h| format!("  host {h:.1} us")),
        p.bridge_blocked_pct.map_or(String::new(), |b| format!("  bridge blocked {b:.0}%")),
        match (p.queue_submit_us, p.bridge_poll_us, p.bridge_signal_us) {
            (Some(q), Some(r), Some(g)) => format!("  submit {q:.2} us, poll {r:.3} us, signal {g:.2} us"),
            (Some(q), _, _) => format!("  submit {q:.2} us"),
            _ => String::new(),
        },
    )
}

fn matvec_row(m: &MatvecPoint) -> String {
    format!(
        "matvec {}x{} ({}): {} GB/s, {} us",
        m.rows,
        m.cols,
        m.kernel,
        sig3(m.gbps.median),
        sig3(m.us_per_matvec.median)
    )
}

fn decode_row(d: &DecodePoint) -> String {
    format!(
        "decode {} ({}): {} tokens/s, CPU {} ms/token, {:.1} submits and {:.1} dispatches per token per member, weight streaming {} of the copy kernel",
        d.layout,
        plural(d.members, "member", "members"),
        sig3(d.tokens_per_s),
        sig3(d.cpu_ms_per_token),
        d.submits_per_token_per_member,
        d.dispatches_per_token_per_member,
        d.weight_streaming_pct.iter().map(|p| format!("{p:.1}%")).collect::<Vec<_>>().join(" / ")
    )
}
