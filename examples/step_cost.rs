//! Measures the host cost of recording one decode step (no waiting), per member and command.
use crossgpu::tp::{Decoder, DecoderConfig, SplitSpec};
use crossgpu::{DeviceGroup, Instance};
use std::time::Instant;

fn main() {
    let inst = Instance::new().unwrap();
    let group = DeviceGroup::from_env(&inst).unwrap();
    let mut cfg = DecoderConfig::small();
    cfg.layers = 64;
    cfg.max_seq = 64;
    let mut dec = Decoder::new(&group, cfg, &SplitSpec::Even).unwrap();
    group.synchronize().unwrap();
    for k in 0..6 {
        let t = Instant::now();
        dec.step().unwrap();
        let rec = t.elapsed();
        group.synchronize().unwrap();
        println!(
            "step {k}: record+submit {:.2} ms, total {:.2} ms",
            rec.as_secs_f64() * 1e3,
            t.elapsed().as_secs_f64() * 1e3
        );
    }
    println!("{:?}", dec.stats());
}
