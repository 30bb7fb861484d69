//! `crossgpu bench limits`: copy bandwidths (the device-local copy by kernel variant too),
//! semaphore round trip and submit cost on `--adapter`, and DevicePoll's relay without copies across `--adapter` and `--pair`.

use std::time::Instant;

use crossgpu::bench::limits;

use super::report::{RelayStep, Run};
use super::text::{fmt_bytes, sig3};
use crate::cli::CliResult;

/// `bench limits`, and the first part of `bench all`.
pub fn bench_limits(run: &mut Run) -> CliResult {
    let g = run.open(run.a)?;
    let m = &g.members()[0];
    println!("limits: measuring on {} with {} buffers ...", m.label(), fmt_bytes(run.s.limit_bytes));
    let t = Instant::now();
    let l = limits::measure(m, run.s.limit_bytes, 5)?;
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
    run.r.limits.push(l);
    run.save()?;
    // The device-local copy bound searched by launch and kernel (issue 33), timed on the GPU;
    // on a CPU device over 1 MiB at most (its copy is not what the search is about, and
    // eleven variants of 16 MiB take minutes there).
    let bytes = if run.cpu { run.s.limit_bytes.min(1 << 20) } else { run.s.limit_bytes };
    let variants = limits::copy_variants(m, bytes, 5)?;
    println!(
        "  device-local copy by variant ({} buffers, read + written), median (p10, p90):",
        fmt_bytes(bytes)
    );
    for v in &variants {
        let s = &v.gbps;
        println!("    {:<50} {:>9} GB/s  ({}, {})", v.name, sig3(s.median), sig3(s.p10), sig3(s.p90));
    }
    run.r.copy_variants = variants;
    run.save()?;
    if run.c.pair.is_empty() {
        let why = "relay step across two devices: no --pair (a second device) given";
        println!("  skipped: {why}");
        run.r.skipped.push(why.into());
        return run.save();
    }
    let layout = format!("{},{}", run.a, run.c.pair);
    let g = run.open(&layout)?;
    let relay = limits::relay_step(g.members(), 5)?;
    println!(
        "  {:<52} {:>9} us    ({}, {})  [{layout}]",
        "DevicePoll relay: all arrive, host releases, a step",
        sig3(relay.median),
        sig3(relay.p10),
        sig3(relay.p90)
    );
    run.r.relay_steps.push(RelayStep { layout, step_us: relay });
    run.save()
}
