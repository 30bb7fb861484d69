//! `crossgpu bench allreduce`: all-reduce latency and bandwidth against size, on queue stand-ins
//! for each member count, two VkDevices and the cross-vendor pair (or `--layouts`), in each
//! mode, against the wgpu baseline; the charts are drawn at the end.

use std::time::Duration;

use crossgpu::bench::allreduce::{self as ar, AllReducePoint};
use crossgpu::bench::baseline;
use crossgpu::{Error, Mode, ModeRequest, Precision};

use super::chart::{chart, subtitle};
use super::report::Run;
use super::settings::{parse_modes, SIZES};
use super::text::{bar, fmt_bytes, say, sig3};
use crate::cli::{fail, plural, CliResult};

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

/// `bench allreduce`, and the second part of `bench all`.
pub fn bench_allreduce(run: &mut Run) -> CliResult {
    let (c, a, cpu) = (run.c, run.a, run.cpu);
    let sizes: Vec<u64> = SIZES.iter().copied().filter(|&s| s <= run.s.max_bytes).collect();
    if sizes.is_empty() {
        return Err(fail(format!(
            "--max-bytes {}: the smallest payload measured is {} bytes",
            run.s.max_bytes, SIZES[0]
        )));
    }
    // Layouts: queue stand-ins for each count, two VkDevices, and the cross-vendor pair.
    // Queue stand-ins where the adapter has the queues (lavapipe has one: VkDevices there).
    let queues = run.queues;
    let layout_of = |n: usize| if n <= queues { format!("{a}*{n}") } else { vec![a; n].join(",") };
    let bridge = ModeRequest::Forced(Mode::HostBridge);
    let poll = ModeRequest::Forced(Mode::DevicePoll);
    let shared_modes = vec![bridge, ModeRequest::Forced(Mode::SyncFd), ModeRequest::Forced(Mode::Generic)];
    // DevicePoll needs a VkDevice per member (a polling kernel must not wait for work queued
    // behind it).
    let all_modes = vec![bridge, ModeRequest::Forced(Mode::SyncFd), poll, ModeRequest::Forced(Mode::Generic)];
    let mut layouts: Vec<(String, Vec<ModeRequest>)> = Vec::new();
    if let Some(list) = &c.layouts {
        let modes = parse_modes(&c.modes)?;
        for l in list.split(';').map(str::trim).filter(|l| !l.is_empty()) {
            layouts.push((l.to_string(), modes.clone()));
        }
    } else {
        for &n in &run.s.members {
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
        for extra in
            [format!("{a},{a}"), if c.pair.is_empty() { String::new() } else { format!("{a},{}", c.pair) }]
        {
            if !extra.is_empty() && layouts.iter().all(|l| l.0 != extra) {
                layouts.push((extra, vec![bridge, poll, ModeRequest::Forced(Mode::Generic)]));
            }
        }
    }
    let baseline_counts: Vec<usize> =
        if c.no_baseline { Vec::new() } else { run.s.members.iter().copied().filter(|&n| n > 1).collect() };
    let per_mode: u64 = sizes.iter().map(|&b| allreduce_cost(b, cpu)).sum();
    let per_baseline: u64 = sizes.iter().map(|&b| baseline_cost(b, cpu)).sum();
    let total = layouts.iter().map(|l| l.1.len() as u64).sum::<u64>() * per_mode
        + baseline_counts.len() as u64 * per_baseline;
    let points =
        layouts.iter().map(|l| l.1.len()).sum::<usize>() * sizes.len() + baseline_counts.len() * sizes.len();
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
        let g = run.open(layout)?;
        let max_member_bytes =
            g.members().iter().map(|m| m.adapter().caps.max_storage_buffer_range).min().unwrap_or(0);
        for mode in modes {
            for (k, &bytes) in sizes.iter().enumerate() {
                pb.set_message(format!("{layout} {mode:?} {}", fmt_bytes(bytes)));
                if bytes > max_member_bytes {
                    pb.inc(allreduce_cost(bytes, cpu));
                    run.skip(
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
                        run.r.allreduce.push(p);
                        run.save()?;
                    }
                    Err(e) => {
                        let fatal_for_mode =
                            matches!(e, Error::Unsupported(_) | Error::MissingExtension { .. });
                        run.skip(&pb, format!("{layout} {mode:?} {bytes} B: {e}"))?;
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
            pb.set_message(format!("wgpu baseline, {} {}", plural(n, "member", "members"), fmt_bytes(bytes)));
            let got = baseline::measure(adapters, n, bytes);
            pb.inc(baseline_cost(bytes, cpu));
            match got {
                Ok(p) => {
                    say(&pb, allreduce_row(&p));
                    run.r.allreduce.push(p);
                    run.save()?;
                }
                Err(e) => run
                    .skip(&pb, format!("wgpu baseline, {} {bytes} B: {e}", plural(n, "member", "members")))?,
            }
        }
    }
    pb.finish_and_clear();
    match chart(&run.r.allreduce, &c.out, &subtitle(&run.r.devices, &run.r.date)) {
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
