//! `crossgpu bench`: the measurements of `crossgpu::bench` run side by side, written as JSON and
//! charted (PNG, plotters). docs/BENCHMARKS.md reports `bench limits`, `bench allreduce` and
//! `bench matvec` runs (scripts/gpu-machine/), and `crossgpu decode`.
//!
//! Here: the subcommands, and the run of `all` and of each part alone (every flag checked, the
//! sizes picked, then the parts in order). `settings.rs` has the flags and the sizes they give,
//! `limits.rs`, `allreduce.rs`, `matvec.rs` and `decode.rs` measure, `report.rs` is bench.json,
//! `chart.rs` the charts, `text.rs` the printed numbers; `ranks.rs` and `ranks_mpi.rs` are
//! `bench ranks`, `scaleout.rs` its α–β model, `collectives.rs` `bench collectives`.

mod allreduce;
mod chart;
mod collectives;
mod decode;
mod limits;
mod matvec;
mod ranks;
#[cfg(feature = "mpi")]
mod ranks_mpi;
mod report;
#[cfg_attr(not(feature = "mpi"), allow(dead_code))]
mod scaleout;
mod settings;
mod text;

use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::{Args, Subcommand};
use crossgpu::{GroupSpec, Instance};

use self::report::{Report, Run};
use self::settings::{parse_modes, print_settings, settings, Common};
use crate::cli::{fail, CliResult};

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
    /// Every collective (all-reduce with an op, all-gather, reduce-scatter, broadcast, reduce)
    /// against size, nccl-tests style: time, algbw and busbw per layout and mode.
    Collectives(collectives::CollectivesArgs),
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

/// `crossgpu bench`.
pub fn bench(args: &BenchArgs) -> CliResult {
    crossgpu::check_environment()?;
    let (c, which) = match &args.what {
        BenchWhat::Chart { json, out } => return chart::chart_from_file(json, out),
        BenchWhat::Collectives(c) => return collectives::bench_collectives(c),
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
        limits::bench_limits(&mut run)?;
    }
    if matches!(which, "all" | "allreduce") {
        allreduce::bench_allreduce(&mut run)?;
    }
    if matches!(which, "all" | "matvec") {
        matvec::bench_matvec(&mut run)?;
    }
    if matches!(which, "all" | "decode") {
        decode::bench_decode(&mut run)?;
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
