mod common;
use crossgpu::tp::{Decoder, DecoderConfig, SplitSpec};
use std::time::Instant;

#[test]
fn probe_decoder() {
    for (n, layers, vocab) in [(3usize, 2usize, 320usize), (3, 1, 320), (2, 2, 320), (3, 2, 320)] {
        let g = common::logical(n);
        let cfg = DecoderConfig { layers, vocab, max_seq: 40, ..DecoderConfig::small() };
        let mut dec = Decoder::new(&g, cfg, &SplitSpec::Even).unwrap();
        dec.generate(1, 1, |_| {}).unwrap();
        let t1 = Instant::now();
        let toks = dec.generate(1, 16, |_| {}).unwrap();
        eprintln!("n {n} layers {layers} vocab {vocab}: per token {:?} toks {:?}", t1.elapsed() / 16, toks);
    }
}
