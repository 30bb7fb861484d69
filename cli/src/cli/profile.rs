//! `crossgpu decode --profile`: a token's (or the prompt's) GPU time by kernel, from a
//! timestamp after every command.

use std::collections::BTreeMap;
use std::time::Instant;

use crossgpu::tp::Decoder;
use crossgpu::{DeviceGroup, Member};

use super::{plural, CliResult};

/// One member's profile: kernel name -> (commands, ns).
type ByKernel = BTreeMap<String, (usize, f64)>;

/// Adds what each member timed since its last read to its profile.
fn take_profiles(members: &[Member], by_kernel: &mut [ByKernel]) -> CliResult {
    for (m, map) in members.iter().zip(by_kernel) {
        for (name, ns) in m.take_profile()? {
            let e = map.entry(name.to_string()).or_default();
            e.0 += 1;
            e.1 += ns;
        }
    }
    Ok(())
}

/// Takes the prompt once more from position 0 with a timestamp after every command and prints,
/// per member, its GPU time by kernel; the decoder is left where it was.
pub(super) fn profile_prompt(group: &DeviceGroup, dec: &mut Decoder, prompt: &[u32]) -> CliResult {
    let members = group.members();
    let len = prompt.len();
    let back = dec.position();
    group.synchronize()?;
    for m in members {
        m.start_profile(65_536)?;
    }
    dec.rewind(0)?;
    let t = Instant::now();
    dec.prefill(prompt)?;
    let wall = t.elapsed().as_secs_f64() * 1e6;
    let mut by_kernel = vec![ByKernel::new(); members.len()];
    take_profiles(members, &mut by_kernel)?;
    dec.rewind(back.min(len))?;
    println!(
        "GPU profile of the {len}-token prompt (timestamps after every command; a command's time includes the barrier and any wait before it); host wall time {wall:.0} us"
    );
    print_profile(members, &by_kernel, 1.0, "prompt");
    Ok(())
}

/// Decodes `tokens` more tokens one at a time with a timestamp after every command and prints,
/// per member, the GPU time per token by kernel: what a token's time is made of.
pub(super) fn profile(group: &DeviceGroup, dec: &mut Decoder, tokens: usize) -> CliResult {
    let members = group.members();
    group.synchronize()?;
    // A recording runs many times and carries no timestamps: profile recorded steps.
    dec.set_replay(false);
    for m in members {
        m.start_profile(16_384)?;
    }
    // Per member: kernel name -> (commands, ns), over all profiled tokens.
    let mut by_kernel = vec![ByKernel::new(); members.len()];
    let mut walls = Vec::new();
    for _ in 0..tokens {
        let t = Instant::now();
        dec.step()?;
        for m in members {
            m.flush()?;
        }
        group.synchronize()?;
        walls.push(t.elapsed().as_secs_f64() * 1e6);
        take_profiles(members, &mut by_kernel)?;
    }
    let n = tokens as f64;
    println!(
        "GPU profile, {} one at a time (timestamps after every command; a command's time includes the barrier and any wait before it); host wall time per token {:.0} us",
        plural(tokens, "token", "tokens"),
        walls.iter().sum::<f64>() / n
    );
    print_profile(members, &by_kernel, n, "token");
    Ok(())
}

/// Per member, the GPU time by kernel over `n` units (tokens, or one prompt), largest first.
fn print_profile(members: &[Member], by_kernel: &[ByKernel], n: f64, unit: &str) {
    for (m, map) in members.iter().zip(by_kernel) {
        let total: f64 = map.values().map(|v| v.1).sum();
        println!("  {}: {:.0} us of GPU timeline per {unit}", m.label(), total / 1e3 / n);
        let mut rows: Vec<_> = map.iter().collect();
        rows.sort_by(|a, b| b.1 .1.total_cmp(&a.1 .1));
        for (name, (count, ns)) in rows {
            println!(
                "    {name:<28} {:>6.1} per {unit} {:>9.1} us per {unit} {:>7.2} us each {:>5.1}%",
                *count as f64 / n,
                ns / 1e3 / n,
                ns / 1e3 / *count as f64,
                100.0 * ns / total.max(1.0)
            );
        }
    }
}
