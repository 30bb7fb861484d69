//! `crossgpu bench decode`: the run of `crossgpu decode` for `--preset` (27b on a GPU that holds
//! it, else small) on one member (one per GPU), or, where `--members` is given, on each of its
//! counts but 3 (the issue asked for 1, 2 and 4): members sharing a queue first, then one queue
//! each.

use crossgpu::tp::{DecoderConfig, SplitSpec};
use indicatif::ProgressBar;

use super::report::{DecodePoint, Run};
use super::settings::decode_counts;
use super::text::sig3;
use crate::cli::decode::{run_decode, DecodeArgs};
use crate::cli::{plural, CliResult};

/// `bench decode`, and the last part of `bench all`.
pub fn bench_decode(run: &mut Run) -> CliResult {
    let (c, a) = (run.c, run.a);
    let mut cfg = DecoderConfig::preset(&run.s.preset).map_err(|e| e.for_setting("--preset"))?;
    cfg.max_seq = cfg.max_seq.max(c.tokens + 4);
    let args = DecodeArgs {
        prompt: 0,
        preset: run.s.preset.clone(),
        model: None,
        layers: None,
        tokens: c.tokens,
        first: 1,
        seed: None,
        split: None,
        check: false,
        warmup: 2,
        profile: 0,
        no_replay: false,
        steps: Default::default(),
        ranks: false,
        temperature: 0.0,
        top_k: 0,
        top_p: 1.0,
        draw_seed: 0,
        copy_bound_gbps: None,
    };
    let mut decode_layouts: Vec<(String, usize)> = Vec::new();
    // One member per GPU unless --members asks for queue stand-ins: on one GPU they only
    // add all-reduce rounds (3.3x slower on the H200, docs/DEVICES.md).
    let counts = if run.s.defaulted.contains(&"--members") {
        println!("decode: one member (one per GPU; --members 1,2,4 compares queue stand-ins of it)");
        vec![1]
    } else {
        decode_counts(&run.s.members)
    };
    for n in counts {
        // The issue asks for 1, 2 and 4 members; shared queue first, then one queue each.
        decode_layouts.push((if n == 1 { format!("{a}*1") } else { format!("{a}/{n}") }, n));
        if n > 1 {
            decode_layouts.push((if n <= run.queues { format!("{a}*{n}") } else { vec![a; n].join(",") }, n));
        }
    }
    let hidden = ProgressBar::hidden();
    let count = decode_layouts.len();
    for (i, (layout, n)) in decode_layouts.into_iter().enumerate() {
        println!(
            "decode {} of {count}: --preset {} on {layout} ({})",
            i + 1,
            run.s.preset,
            plural(n, "member", "members")
        );
        let g = run.open(&layout)?;
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
                run.r.decode.push(p);
                run.save()?;
            }
            Err(e) => run.skip(&hidden, format!("decode {layout}: {e}"))?,
        }
    }
    Ok(())
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
