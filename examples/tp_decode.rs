//! Tensor-parallel greedy decoding across a group, with the library alone.
//!
//! ```text
//! cargo run --release --example tp_decode              # the small model, 16 tokens
//! CROSSGPU_DEVICES=0x2 cargo run --release --example tp_decode -- 27b 32
//! ```
//!
//! Opens the group `CROSSGPU_DEVICES` names (one member per GPU when unset, as `crossgpu
//! decode` does: `GroupSpec::Gpus`), loads a decoder whose weights are generated on
//! the devices from a seed (each member holds only its slices), decodes greedily, then decodes
//! again on the first member alone and checks the tokens are the same. `crossgpu decode` is the
//! full tool (progress, host-time breakdown, every option).

use std::time::Instant;

use crossgpu::tp::{Decoder, DecoderConfig, SplitSpec};
use crossgpu::{DeviceGroup, GroupSpec, Instance};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let cfg = DecoderConfig::preset(&args.next().unwrap_or_else(|| "small".into()))?;
    let tokens: usize = args.next().map_or(Ok(16), |t| t.parse())?;

    let instance = Instance::new()?;
    let group = DeviceGroup::from_env_or(&instance, &GroupSpec::Gpus)?;
    for m in group.members() {
        println!("{}", m.label());
    }
    let mut decoder = Decoder::new(&group, cfg.clone(), &SplitSpec::from_env()?)?;
    let t = Instant::now();
    let out = decoder.generate(1, tokens, |_| {})?;
    let secs = t.elapsed().as_secs_f64();
    println!(
        "{} members: {tokens} tokens in {secs:.2} s ({:.1} tokens/s)",
        group.len(),
        tokens as f64 / secs
    );
    println!("tokens: {out:?}");

    // The same model on one member decodes the same tokens.
    let first = group.layout()[0].0;
    drop(decoder);
    drop(group);
    let one = DeviceGroup::open(&instance, &GroupSpec::parse(&first.to_string())?)?;
    let alone = Decoder::new(&one, cfg, &SplitSpec::Even)?.generate(1, tokens, |_| {})?;
    if alone != out {
        return Err(format!("one member decoded {alone:?}").into());
    }
    println!("one member: the same {tokens} tokens");
    Ok(())
}
