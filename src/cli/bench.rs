//! `crossgpu bench`: the measurements of `crossgpu::bench` run side by side, written as JSON and
//! charted (PNG, plotters). `bench all` is what docs/BENCHMARKS.md reports.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Args, Subcommand};
use crossgpu::bench::allreduce::AllReducePoint;
use crossgpu::bench::limits::Limits;
use crossgpu::bench::matvec::MatvecPoint;
use crossgpu::bench::{allreduce, baseline, limits, matvec};
use crossgpu::tp::{DecoderConfig, SplitSpec};
use crossgpu::{DeviceGroup, Error, GroupSpec, Instance, Mode, ModeRequest, Precision, Result};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

use super::decode::{run_decode, DecodeArgs};

#[derive(Args, Debug)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub what: BenchWhat,
}

#[derive(Subcommand, Debug)]
pub enum BenchWhat {
    /// Limits, all-reduce (every layout, mode and the wgpu baseline), matvec and decode.
    All(Common),
    /// Copy bandwidths, semaphore round trip, submit cost.
    Limits(Common),
    /// All-reduce latency and bandwidth against size.
    Allreduce(Common),
    /// Matrix–vector product bandwidth.
    Matvec(Common),
    /// 27B-class decode on 1, 2 and 4 queue stand-ins.
    Decode(Common),
    /// Redraw the charts from a bench.json.
    Chart {
        /// The JSON written by a bench run.
        json: PathBuf,
        /// Folder for the PNGs.
        #[arg(long, default_value = ".")]
        out: PathBuf,
    },
}

#[derive(Args, Debug, Clone)]
pub struct Common {
    /// Adapter name (or index) to measure on, e.g. `nvidia` or `llvmpipe`.
    #[arg(long, default_value = "0")]
    pub adapter: String,
    /// Second adapter for the cross-vendor pair, e.g. `llvmpipe` (empty: none).
    #[arg(long, default_value = "")]
    pub pair: String,
    /// Folder for bench.json and the charts.
    #[arg(long, default_value = "bench-out")]
    pub out: PathBuf,
    /// Member counts measured as queue stand-ins of one VkDevice.
    #[arg(long, value_delimiter = ',', default_value = "1,2,3,4")]
    pub members: Vec<usize>,
    /// Largest all-reduce payload in bytes.
    #[arg(long, default_value_t = 256 << 20)]
    pub max_bytes: u64,
    /// Buffer size for the copy-bandwidth limits.
    #[arg(long, default_value_t = 256 << 20)]
    pub limit_bytes: u64,
    /// Matrix–vector shapes, `ROWSxCOLS` comma-separated (f16 weights).
    #[arg(long, value_delimiter = ',', default_value = "8192x8192,5120x17408,17408x5120")]
    pub matvec_shapes: Vec<String>,
    /// Decode preset for `bench decode`.
    #[arg(long, default_value = "27b")]
    pub preset: String,
    /// Decode tokens.
    #[arg(long, default_value_t = 32)]
    pub tokens: usize,
    /// Bridge spin time in µs (default: CROSSGPU_ALLREDUCE_SPIN_US).
    #[arg(long)]
    pub spin_us: Option<u64>,
    /// All-reduce layouts to measure instead of the default set, `;`-separated in the
    /// CROSSGPU_DEVICES syntax, e.g. `nvidia/2;nvidia*2;nvidia,llvmpipe`.
    #[arg(long)]
    pub layouts: Option<String>,
    /// Skip the wgpu baseline.
    #[arg(long)]
    pub no_baseline: bool,
    /// Modes measured on `--layouts` (comma-separated: bridge, sync_fd, generic).
    #[arg(long, default_value = "bridge,sync_fd,generic")]
    pub modes: String,
    /// Wire precision of the all-reduce: `auto` (f16 from CROSSGPU_F16_WIRE_BYTES up), `f32`
    /// (the same bytes as NCCL's f32 all-reduce) or `f16`.
    #[arg(long, default_value = "auto", value_parser = ["auto", "f32", "f16"])]
    pub wire: String,
    /// Adapters the wgpu baseline's members take round-robin, e.g. `0,1` for two physical
    /// GPUs (default: `--adapter` for every member).
    #[arg(long)]
    pub baseline_adapters: Option<String>,
}

#[derive(Serialize, Default)]
struct Report {
    date: String,
    command: String,
    adapters: Vec<String>,
    limits: Vec<Limits>,
    allreduce: Vec<AllReducePoint>,
    skipped: Vec<String>,
    matvec: Vec<MatvecPoint>,
    decode: Vec<DecodePoint>,
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
    mode: String,
    tokens: Vec<u32>,
}

const SIZES: [u64; 10] =
    [4 << 10, 16 << 10, 32 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20];

fn open(instance: &Instance, spec: &str) -> Result<DeviceGroup> {
    DeviceGroup::open(instance, &GroupSpec::parse(spec)?)
}

fn bar(len: usize, what: &str) -> ProgressBar {
    let b = ProgressBar::new(len as u64);
    b.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    b.set_message(what.to_string());
    b
}

pub fn bench(args: &BenchArgs) -> Result<()> {
    let (c, which) = match &args.what {
        BenchWhat::Chart { json, out } => return chart_from_file(json, out),
        BenchWhat::All(c) => (c, "all"),
        BenchWhat::Limits(c) => (c, "limits"),
        BenchWhat::Allreduce(c) => (c, "allreduce"),
        BenchWhat::Matvec(c) => (c, "matvec"),
        BenchWhat::Decode(c) => (c, "decode"),
    };
    std::fs::create_dir_all(&c.out).map_err(|e| Error::Unsupported(format!("{}: {e}", c.out.display())))?;
    let instance = Instance::new()?;
    let mut r = Report {
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
        ..Default::default()
    };
    let a = &c.adapter;
    let spin = c.spin_us.map(Duration::from_micros);
    if matches!(which, "all" | "limits") {
        let g = open(&instance, a)?;
        r.limits.push(limits::measure(&g.members()[0], c.limit_bytes, 5)?);
        println!("{}", serde_json::to_string_pretty(&r.limits).unwrap_or_default());
        save(&r, &c.out)?;
    }
    if matches!(which, "all" | "allreduce") {
        let sizes: Vec<u64> = SIZES.iter().copied().filter(|&s| s <= c.max_bytes).collect();
        // Layouts: queue stand-ins for each count, two VkDevices, and the cross-vendor pair.
        // Queue stand-ins where the adapter has the queues (lavapipe has one: VkDevices there).
        let queues = GroupSpec::parse(a)?
            .resolve(instance.adapters())?
            .first()
            .map_or(1, |d| instance.adapters()[d.0].caps.queue_count as usize);
        let layout_of =
            |n: usize| if n <= queues { format!("{a}*{n}") } else { vec![a.as_str(); n].join(",") };
        let bridge = ModeRequest::Forced(Mode::HostBridge);
        let all_modes = vec![bridge, ModeRequest::Forced(Mode::SyncFd), ModeRequest::Forced(Mode::Generic)];
        let mut layouts: Vec<(String, Vec<ModeRequest>)> = Vec::new();
        if let Some(list) = &c.layouts {
            let modes = c.modes.split(',').map(ModeRequest::parse).collect::<Result<Vec<_>>>()?;
            for l in list.split(';').map(str::trim).filter(|l| !l.is_empty()) {
                layouts.push((l.to_string(), modes.clone()));
            }
        } else {
            for &n in &c.members {
                if n == 1 {
                    layouts.push((format!("{a}*1"), vec![bridge]));
                    continue;
                }
                // Members sharing one queue (what separate GPUs would see: no engine switching),
                // then one queue each (the switching cost), where the adapter has the queues.
                layouts.push((format!("{a}/{n}"), all_modes.clone()));
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
                    layouts.push((extra, vec![bridge, ModeRequest::Forced(Mode::Generic)]));
                }
            }
        }
        let total = layouts.iter().map(|l| l.1.len()).sum::<usize>() * sizes.len()
            + c.members.iter().filter(|&&n| n > 1).count() * sizes.len();
        let pb = bar(total, "all-reduce");
        for (layout, modes) in &layouts {
            let g = open(&instance, layout)?;
            let max_member_bytes =
                g.members().iter().map(|m| m.adapter().caps.max_storage_buffer_range).min().unwrap_or(0);
            for mode in modes {
                for &bytes in &sizes {
                    pb.inc(1);
                    pb.set_message(format!("{layout} {mode:?} {bytes} B"));
                    if bytes > max_member_bytes {
                        r.skipped.push(format!("{layout} {mode:?} {bytes} B: past a member's maxStorageBufferRange ({max_member_bytes} B)"));
                        continue;
                    }
                    let precision = match c.wire.as_str() {
                        "f32" => Precision::F32,
                        "f16" => Precision::F16,
                        _ => Precision::Auto,
                    };
                    match allreduce::measure(&g, layout, *mode, precision, bytes, spin) {
                        Ok(p) => r.allreduce.push(p),
                        Err(e) => {
                            r.skipped.push(format!("{layout} {mode:?} {bytes} B: {e}"));
                            if matches!(e, Error::Unsupported(_) | Error::MissingExtension { .. }) {
                                pb.inc((sizes.len() - 1) as u64);
                                break; // the mode cannot run on this layout at all
                            }
                        }
                    }
                }
            }
        }
        for &n in c.members.iter().filter(|&&n| n > 1 && !c.no_baseline) {
            for &bytes in &sizes {
                pb.inc(1);
                pb.set_message(format!("wgpu baseline x{n} {bytes} B"));
                match baseline::measure(c.baseline_adapters.as_deref().unwrap_or(a), n, bytes) {
                    Ok(p) => r.allreduce.push(p),
                    Err(e) => r.skipped.push(format!("wgpu baseline x{n} {bytes} B: {e}")),
                }
            }
        }
        pb.finish_and_clear();
        save(&r, &c.out)?;
    }
    if matches!(which, "all" | "matvec") {
        let g = open(&instance, a)?;
        for shape in &c.matvec_shapes {
            let parsed = shape
                .split_once('x')
                .and_then(|(r, c)| Some((r.trim().parse().ok()?, c.trim().parse().ok()?)));
            let Some((rows, cols)) = parsed else {
                return Err(Error::Unsupported(format!("--matvec-shapes: '{shape}' is not ROWSxCOLS")));
            };
            // Every f16 kernel for cols % 8 == 0, side by side (other shapes: recorded as skipped).
            for kernel in crossgpu::MATVEC_F16_KERNELS {
                match matvec::measure_with(&g.members()[0], Some(kernel), rows, cols, 5) {
                    Ok(p) => r.matvec.push(p),
                    Err(e) => r.skipped.push(format!("matvec {rows}x{cols} {kernel}: {e}")),
                }
            }
        }
        save(&r, &c.out)?;
    }
    if matches!(which, "all" | "decode") {
        let mut cfg = DecoderConfig::preset(&c.preset)?;
        cfg.max_seq = cfg.max_seq.max(c.tokens + 4);
        let args = DecodeArgs {
            preset: c.preset.clone(),
            layers: None,
            tokens: c.tokens,
            first: 1,
            seed: None,
            split: None,
            check: false,
            warmup: 2,
        };
        let queues = GroupSpec::parse(a)?
            .resolve(instance.adapters())?
            .first()
            .map_or(1, |d| instance.adapters()[d.0].caps.queue_count as usize);
        let mut decode_layouts: Vec<(String, usize)> = Vec::new();
        for &n in c.members.iter().filter(|&&n| n != 3) {
            // The issue asks for 1, 2 and 4 members; shared queue first, then one queue each.
            decode_layouts.push((if n == 1 { format!("{a}*1") } else { format!("{a}/{n}") }, n));
            if n > 1 {
                decode_layouts
                    .push((if n <= queues { format!("{a}*{n}") } else { vec![a.as_str(); n].join(",") }, n));
            }
        }
        for (layout, n) in decode_layouts {
            let g = open(&instance, &layout)?;
            match run_decode(&g, &cfg, &SplitSpec::Even, &args, true) {
                Ok(d) => r.decode.push(DecodePoint {
                    layout,
                    members: n,
                    tokens_per_s: d.tokens_per_s,
                    cpu_ms_per_token: d.cpu_ms_per_token,
                    record_ms_per_token: d.record_ms_per_token,
                    all_reduces_per_token: d.all_reduces_per_token,
                    submits_per_token_per_member: d.submits_per_token_per_member,
                    mode: d.mode,
                    tokens: d.tokens,
                }),
                Err(e) => r.skipped.push(format!("decode {layout}: {e}")),
            }
        }
        save(&r, &c.out)?;
    }
    for s in &r.skipped {
        println!("skipped: {s}");
    }
    print_tables(&r);
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

fn save(r: &Report, out: &Path) -> Result<()> {
    let path = out.join("bench.json");
    let json = serde_json::to_string_pretty(r).map_err(|e| Error::Unsupported(format!("json: {e}")))?;
    std::fs::write(&path, json).map_err(|e| Error::Unsupported(format!("{}: {e}", path.display())))?;
    if let Err(e) = chart(&r.allreduce, out) {
        eprintln!("warning: no chart drawn: {e}");
    }
    Ok(())
}

fn print_tables(r: &Report) {
    for p in &r.allreduce {
        println!(
            "{:<28} {:<14} {:>10} B {:>4}  {:>10.1} us (p10 {:>9.1}, p90 {:>9.1})  {:>7.2} GB/s{}{}{}",
            p.layout,
            p.mode,
            p.bytes,
            p.wire,
            p.us_per_round.median,
            p.us_per_round.p10,
            p.us_per_round.p90,
            p.algbw_gbps,
            p.host_us_per_round.map_or(String::new(), |h| format!("  host {h:.1} us")),
            p.bridge_blocked_pct.map_or(String::new(), |b| format!("  bridge blocked {b:.0}%")),
            match (p.queue_submit_us, p.bridge_poll_us, p.bridge_signal_us) {
                (Some(q), Some(r), Some(g)) =>
                    format!("  submit {q:.2} us, poll {r:.3} us, signal {g:.2} us"),
                (Some(q), _, _) => format!("  submit {q:.2} us"),
                _ => String::new(),
            },
        );
    }
    for m in &r.matvec {
        println!(
            "matvec {}x{} ({}): {:.0} GB/s, {:.1} us",
            m.rows, m.cols, m.kernel, m.gbps.median, m.us_per_matvec.median
        );
    }
    for d in &r.decode {
        println!(
            "decode {}: {:.2} tokens/s, CPU {:.2} ms/token, {:.1} submits/token/member",
            d.layout, d.tokens_per_s, d.cpu_ms_per_token, d.submits_per_token_per_member
        );
    }
}

fn chart_from_file(json: &Path, out: &Path) -> Result<()> {
    let text =
        std::fs::read_to_string(json).map_err(|e| Error::Unsupported(format!("{}: {e}", json.display())))?;
    let v: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| Error::Unsupported(format!("json: {e}")))?;
    let points: Vec<AllReducePoint> =
        v["allreduce"].as_array().map(|a| a.iter().filter_map(point_from_json).collect()).unwrap_or_default();
    chart(&points, out).map_err(Error::Unsupported)
}

fn point_from_json(v: &serde_json::Value) -> Option<AllReducePoint> {
    let s = &v["us_per_round"];
    Some(AllReducePoint {
        layout: v["layout"].as_str()?.to_string(),
        members: v["members"].as_u64()? as usize,
        mode: v["mode"].as_str()?.to_string(),
        bytes: v["bytes"].as_u64()?,
        wire: if v["wire"].as_str()? == "f16" { "f16" } else { "f32" },
        us_per_round: crossgpu::bench::Summary {
            median: s["median"].as_f64()?,
            p10: s["p10"].as_f64()?,
            p90: s["p90"].as_f64()?,
            samples: s["samples"].as_u64()? as usize,
        },
        algbw_gbps: v["algbw_gbps"].as_f64()?,
        rounds_per_batch: v["rounds_per_batch"].as_u64()? as usize,
        host_us_per_round: v["host_us_per_round"].as_f64(),
        bridge_blocked_pct: v["bridge_blocked_pct"].as_f64(),
        bridge_poll_us: v["bridge_poll_us"].as_f64(),
        bridge_signal_us: v["bridge_signal_us"].as_f64(),
        queue_submit_us: v["queue_submit_us"].as_f64(),
    })
}

/// Latency and bandwidth against size, one line per layout and mode.
fn chart(points: &[AllReducePoint], out: &Path) -> std::result::Result<(), String> {
    use plotters::prelude::*;
    if points.is_empty() {
        return Ok(());
    }
    let mut series: Vec<(String, Vec<&AllReducePoint>)> = Vec::new();
    for p in points {
        let key = format!("{} {}", p.layout, p.mode);
        match series.iter_mut().find(|s| s.0 == key) {
            Some(s) => s.1.push(p),
            None => series.push((key, vec![p])),
        }
    }
    let n_series = series.len().max(1) as f64;
    let e = |e: &dyn std::fmt::Display| e.to_string();
    for (file, title, value, unit) in [
        ("allreduce-latency.png", "all-reduce time per round (pipelined)", 0, "us per round"),
        ("allreduce-bandwidth.png", "all-reduce algorithmic bandwidth", 1, "GB/s"),
    ] {
        let path = out.join(file);
        let root = BitMapBackend::new(&path, (1200, 800)).into_drawing_area();
        root.fill(&WHITE).map_err(|x| e(&x))?;
        let get = |p: &AllReducePoint| if value == 0 { p.us_per_round.median } else { p.algbw_gbps };
        let ys: Vec<f64> = points.iter().map(get).filter(|v| v.is_finite() && *v > 0.0).collect();
        let (lo, hi) =
            (ys.iter().copied().fold(f64::MAX, f64::min) / 1.5, ys.iter().copied().fold(0.0, f64::max) * 1.5);
        let (xlo, xhi) = (
            points.iter().map(|p| p.bytes).min().unwrap_or(1) as f64 / 1.5,
            points.iter().map(|p| p.bytes).max().unwrap_or(2) as f64 * 1.5,
        );
        let mut c = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 28))
            .margin(15)
            .x_label_area_size(50)
            .y_label_area_size(80)
            .build_cartesian_2d((xlo..xhi).log_scale(), (lo.max(1e-3)..hi.max(1e-2)).log_scale())
            .map_err(|x| e(&x))?;
        c.configure_mesh().x_desc("payload per member, bytes").y_desc(unit).draw().map_err(|x| e(&x))?;
        for (i, (name, pts)) in series.iter().enumerate() {
            // Evenly spaced hues, alternating lightness, so neighbours differ.
            let color = HSLColor(i as f64 / n_series, 0.85, if i % 2 == 0 { 0.38 } else { 0.55 }).to_rgba();
            let data: Vec<(f64, f64)> =
                pts.iter().map(|p| (p.bytes as f64, get(p))).filter(|v| v.1 > 0.0).collect();
            c.draw_series(LineSeries::new(data.clone(), color.stroke_width(2)))
                .map_err(|x| e(&x))?
                .label(name.clone())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
            c.draw_series(data.into_iter().map(|p| Circle::new(p, 3, color.filled()))).map_err(|x| e(&x))?;
        }
        c.configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(|x| e(&x))?;
        root.present().map_err(|x| e(&x))?;
    }
    Ok(())
}
