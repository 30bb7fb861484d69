//! One member per distinct vendor or driver: e.g. an AMD or Intel iGPU with an NVIDIA dGPU, or
//! an NVIDIA GPU with lavapipe (Mesa's CPU driver).
//!
//! ```text
//! cargo run --release --example cross_vendor
//! ```
//!
//! Picks the first adapter of each distinct (vendor, driver) pair (on a machine with a single
//! one, two members on it, and says so), prints the all-reduce mode the `Comm` got and why,
//! checks all-reduces at several sizes against an f64 reference and bitwise across members
//! (f32 wire), and decodes with the small tensor-parallel decoder split by measured speed
//! (`SplitSpec::Auto`, or `CROSSGPU_SPLIT` when set), printing the split it chose and comparing
//! its tokens with a one-member run. Prints OK.

use crossgpu::tp::{Decoder, DecoderConfig, SplitSpec};
use crossgpu::{AllReduceOptions, Comm, DeviceGroup, Instance, Precision};

fn value(member: usize, i: usize) -> f32 {
    // Deterministic, mixed-sign, exactly representable inputs.
    let h = (i as u32).wrapping_mul(2_654_435_761).wrapping_add(member as u32 * 40_503) >> 8;
    (h as f32 / 16_777_216.0 - 0.5) * 8.0
}

fn main() {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let instance = Instance::new()?;
    let mut picked: Vec<usize> = Vec::new();
    let mut keys: Vec<(u32, String)> = Vec::new();
    for a in instance.adapters() {
        let key = (a.vendor_id, a.driver_id.clone());
        if !keys.contains(&key) {
            keys.push(key);
            picked.push(a.index);
        }
    }
    for a in instance.adapters() {
        let mark = if picked.contains(&a.index) { "*" } else { " " };
        println!(
            "{mark} adapter {}: {} [{} {}, {}] host import: {}, timeline: {}",
            a.index,
            a.name,
            a.vendor_name(),
            a.device_type,
            a.driver_id,
            a.caps.external_memory_host,
            a.caps.timeline_semaphore
        );
    }
    let devices: Vec<(usize, u32)> = if picked.len() >= 2 {
        println!("{} distinct vendor/driver pairs: one member each", picked.len());
        picked.iter().map(|&i| (i, 1)).collect()
    } else {
        let i = *picked.first().ok_or_else(|| crossgpu::Error::NoDriver("no Vulkan adapter".into()))?;
        println!("only one vendor/driver on this machine: two members (two VkDevices) on adapter {i}");
        vec![(i, 1), (i, 1)]
    };
    let group = DeviceGroup::open_resolved(&instance, &devices)?;
    for m in group.members() {
        println!("  {}", m.label());
    }
    let mut comm = Comm::new(&group)?;
    println!("all-reduce mode: {} ({})", comm.mode(), comm.reason());

    let members = group.members().len();
    let opts = AllReduceOptions { precision: Precision::F32, ..Default::default() };
    let mut ok = true;
    for n in [1usize, 1000, 100_003, 1 << 20] {
        let mut parts = Vec::new();
        for (m, member) in group.members().iter().enumerate() {
            let data: Vec<f32> = (0..n).map(|i| value(m, i)).collect();
            parts.push(member.upload_f32(&data)?);
        }
        let start = std::time::Instant::now();
        comm.all_reduce(&mut parts, &opts)?;
        let results: Vec<Vec<f32>> = parts.iter().map(|t| t.read()).collect::<crossgpu::Result<_>>()?;
        let elapsed = start.elapsed();
        let mut max_excess = 0f64;
        for (i, &got) in results[0].iter().enumerate() {
            let exact: f64 = (0..members).map(|m| f64::from(value(m, i))).sum();
            let abs: f64 = (0..members).map(|m| f64::from(value(m, i)).abs()).sum();
            let tol = (members as f64 - 1.0) * 2f64.powi(-24) * abs;
            let err = (f64::from(got) - exact).abs();
            if err > tol {
                max_excess = max_excess.max(err - tol);
            }
        }
        let bitwise =
            results.iter().all(|r| r.iter().zip(&results[0]).all(|(a, b)| a.to_bits() == b.to_bits()));
        let pass = max_excess == 0.0 && bitwise;
        ok &= pass;
        println!(
            "  {n:>8} elements, f32 wire: within bound: {}, members bitwise equal: {bitwise} ({:.1} ms incl. read-back)",
            max_excess == 0.0,
            elapsed.as_secs_f64() * 1e3
        );
    }
    drop(comm);

    let steps = 16;
    // Mixed hardware: split by measured speed unless CROSSGPU_SPLIT says otherwise.
    let split = match std::env::var("CROSSGPU_SPLIT") {
        Ok(_) => SplitSpec::from_env()?,
        Err(_) => SplitSpec::Auto,
    };
    let mut decoder = Decoder::new(&group, DecoderConfig::small(), &split)?;
    let w: Vec<String> = decoder.plan.weights.iter().map(|v| format!("{v:.3}")).collect();
    println!(
        "split {split:?}: weights {} -> KV heads {:?}, FFN {:?}, vocab {:?}",
        w.join(":"),
        decoder.plan.kv_heads,
        decoder.plan.ffn,
        decoder.plan.vocab
    );
    let tokens = decoder.generate(1, steps, |_| {})?;
    drop(decoder);
    let single = DeviceGroup::open_resolved(&instance, &devices[..1])?;
    let mut reference = Decoder::new(&single, DecoderConfig::small(), &SplitSpec::Even)?;
    let want = reference.generate(1, steps, |_| {})?;
    let same = tokens == want;
    ok &= same;
    println!("small decoder, {steps} tokens over {members} members: {tokens:?}");
    println!("one-member reference:                  {want:?} (equal: {same})");
    if !ok {
        return Err("cross_vendor checks failed: see the lines above".into());
    }
    println!("OK");
    Ok(())
}
