//! `crossgpu decode` (also `examples/tp_decode.rs`): greedy decoding of the tensor-parallel
//! decoder on a group, with tokens/s, all-reduces and submits per token, and `--check` against
//! a one-member run.

use std::time::Instant;

use clap::Args;
use crossgpu::tp::{Decoder, DecoderConfig, SplitSpec};
use crossgpu::{DeviceGroup, Error, GroupSpec, Instance, Result};
use indicatif::{ProgressBar, ProgressStyle};

/// Options of `crossgpu decode`.
#[derive(Args, Debug, Clone)]
pub struct DecodeArgs {
    /// Model shape: `small` (CI) or `27b` (hidden 5120, FFN 17408, 64 layers, 40/8 heads).
    #[arg(long, default_value = "small")]
    pub preset: String,
    /// Override the number of layers.
    #[arg(long)]
    pub layers: Option<usize>,
    /// Tokens to decode.
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
    /// Decode this many tokens first, untimed.
    #[arg(long, default_value_t = 2)]
    pub warmup: usize,
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
) -> Result<DecodeReport> {
    let t0 = Instant::now();
    let mut dec = Decoder::new(group, cfg.clone(), split)?;
    for m in group.members() {
        m.synchronize()?;
    }
    let mode =
        dec.comm().map_or("none (one member)".to_string(), |c| format!("{} ({})", c.mode(), c.reason()));
    if show {
        println!(
            "loaded {:.3}B parameters on {} member(s) in {:.1} s; split: KV heads {:?}, FFN {:?}, vocab {:?}",
            cfg.parameters() as f64 / 1e9,
            group.len(),
            t0.elapsed().as_secs_f64(),
            dec.plan.kv_heads,
            dec.plan.ffn,
            dec.plan.vocab
        );
        let w: Vec<String> = dec.plan.weights.iter().map(|v| format!("{v:.3}")).collect();
        println!("split weights ({split:?}): {}", w.join(":"));
        println!("all-reduce mode: {mode}");
    }
    let warm = args.warmup.min(cfg.max_seq.saturating_sub(args.tokens));
    let mut tokens = Vec::new();
    if warm > 0 {
        tokens.extend(dec.generate(args.first, warm, |_| {})?);
    }
    let before = dec.stats();
    let bar = if show { ProgressBar::new(args.tokens as u64) } else { ProgressBar::hidden() };
    bar.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} tokens {per_sec} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let next = tokens.last().copied().unwrap_or(args.first);
    let (c0, w0) = (cpu_time_s(), Instant::now());
    let out = dec.generate(next, args.tokens, |_| bar.inc(1))?;
    let wall = w0.elapsed().as_secs_f64();
    let cpu = cpu_time_s() - c0;
    bar.finish_and_clear();
    let after = dec.stats();
    let n = args.tokens.max(1) as f64;
    let bridge = match (before.bridge, after.bridge) {
        (Some(b), Some(a)) => Some(a.since(&b)),
        _ => None,
    };
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
        mode,
    };
    if show {
        println!(
            "{} members: {:.2} tokens/s, CPU {:.2} ms/token (recording and submitting {:.2} ms, of which waiting for the in-flight limit {:.2} ms), {:.1} all-reduces and {:.1} submits per token per member",
            group.len(),
            report.tokens_per_s,
            report.cpu_ms_per_token,
            report.record_ms_per_token,
            report.backpressure_ms_per_token,
            report.all_reduces_per_token,
            report.submits_per_token_per_member
        );
        if let Some(p) = report.bridge_blocked_pct {
            println!("host bridge: {p:.1}% of rounds released only after blocking (spin time ran out)");
        }
        if let (Some(q), Some((r, g))) = (report.queue_submit_us, report.bridge_call_us) {
            println!("driver calls: vkQueueSubmit {q:.2} us, bridge reads a done value {r:.3} us, signals a go {g:.2} us (means)");
        }
        println!("tokens: {:?}", report.tokens);
    }
    Ok(report)
}

/// `crossgpu decode`.
pub fn decode(args: &DecodeArgs) -> Result<()> {
    let mut cfg = DecoderConfig::preset(&args.preset)?;
    if let Some(l) = args.layers {
        cfg.layers = l;
    }
    if let Some(s) = args.seed {
        cfg.seed = s;
    }
    if args.tokens + args.warmup > cfg.max_seq {
        cfg.max_seq = args.tokens + args.warmup;
    }
    let split = match &args.split {
        Some(s) => SplitSpec::parse(s)?,
        None => SplitSpec::from_env()?,
    };
    let instance = Instance::new()?;
    let group = DeviceGroup::from_env(&instance)?;
    println!("group of {} members:", group.len());
    for m in group.members() {
        println!("  {}", m.label());
    }
    let report = run_decode(&group, &cfg, &split, args, true)?;
    if args.check {
        // The same model on the first member's adapter alone.
        let first_adapter = group.layout()[0].0;
        drop(group);
        let single = DeviceGroup::open(&instance, &GroupSpec::parse(&first_adapter.to_string())?)?;
        println!("--check: decoding again on one member ({})", single.members()[0].label());
        let one = run_decode(&single, &cfg, &SplitSpec::Even, args, true)?;
        if one.tokens != report.tokens {
            return Err(Error::Unsupported(format!(
                "--check failed: the group ({}) gave {:?}, one member {:?}",
                report.mode, report.tokens, one.tokens
            )));
        }
        println!("--check: same {} tokens as one member", one.tokens.len());
    }
    Ok(())
}
