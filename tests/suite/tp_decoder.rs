//! Tensor parallelism, the decoder's configuration and its refusals: `SplitSpec` parsing, bad
//! shapes, weights and tokens, models too large for the devices, sizes that overflow, and the
//! unfused path decoding the same tokens on 1, 2 and 3 members. The decoder against the f64
//! model is tested in `tests/tp_model.rs`. The validation layer (with synchronization
//! validation) is on and any error it reports fails the test.
//!
//! Tests whose failure message starts with `BUG (file): ...` document library bugs found while
//! writing them (bad requests that are accepted or panic); they fail until the library is fixed.

use crate::common;

use crate::common::{assert_bits, no_panic, serial};
use crossgpu::tp::{split_ranges, Decoder, DecoderConfig, SplitSpec};
use crossgpu::Error;

/// A decoder small enough to load in milliseconds.
fn tiny() -> DecoderConfig {
    DecoderConfig {
        hidden: 64,
        ffn: 128,
        layers: 1,
        q_heads: 4,
        kv_heads: 2,
        head_dim: 16,
        vocab: 100,
        max_seq: 4,
        ..DecoderConfig::small()
    }
}

#[test]
fn split_spec_parse_accepts_good_and_rejects_malformed_strings() {
    let _s = serial();
    for (s, want) in [
        ("even", SplitSpec::Even),
        (" EVEN ", SplitSpec::Even),
        ("", SplitSpec::Even),
        ("2:1", SplitSpec::Weighted(vec![2.0, 1.0])),
        ("1:0:1", SplitSpec::Weighted(vec![1.0, 0.0, 1.0])),
        (" 0.5 : 0.25 ", SplitSpec::Weighted(vec![0.5, 0.25])),
        ("3", SplitSpec::Weighted(vec![3.0])),
    ] {
        assert_eq!(SplitSpec::parse(s).unwrap(), want, "'{s}'");
    }
    for s in [
        "2:x", "1:-1", "0:0", "0", "inf:1", "1:nan", "nan", ":", "1::2", "1:2:", ":1", "abc", "-1", "1e400",
        "2,1", "even:1",
    ] {
        match SplitSpec::parse(s) {
            Err(Error::BadConfig { name, .. }) => assert_eq!(name, "CROSSGPU_SPLIT", "'{s}'"),
            other => panic!("SplitSpec::parse('{s}') = {other:?}, want a BadConfig error"),
        }
    }
    assert_eq!(SplitSpec::Even.weights(3).unwrap(), vec![1.0; 3]);
    assert!(matches!(SplitSpec::parse("2:1").unwrap().weights(3), Err(Error::BadConfig { .. })));
}

#[test]
fn decoder_rejects_bad_requests() {
    let _s = serial();
    let g1 = common::logical(1);
    let g2 = common::logical(2);
    let g3 = common::logical(3);
    // Weights count ≠ members.
    for (g, w) in [(&g2, vec![1.0, 1.0, 1.0]), (&g3, vec![2.0, 1.0]), (&g1, vec![1.0, 1.0])] {
        let r = Decoder::new(g, tiny(), &SplitSpec::Weighted(w.clone()));
        assert!(
            matches!(r, Err(Error::BadConfig { .. })),
            "{} members, weights {w:?}: {:?}",
            g.len(),
            r.err()
        );
    }
    // All-zero, negative or non-finite weights (built directly, not parsed).
    for w in [vec![0.0, 0.0], vec![-1.0, 2.0], vec![f64::NAN, 1.0], vec![f64::INFINITY, 1.0]] {
        let r = Decoder::new(&g2, tiny(), &SplitSpec::Weighted(w.clone()));
        assert!(r.is_err(), "weights {w:?} must be rejected");
    }
    // Shapes: q_heads not a multiple of kv_heads, no KV heads, odd head_dim, zero sizes.
    let bad_shapes = [
        DecoderConfig { q_heads: 6, kv_heads: 4, ..tiny() },
        DecoderConfig { q_heads: 3, kv_heads: 2, ..tiny() },
        DecoderConfig { kv_heads: 0, ..tiny() },
        DecoderConfig { head_dim: 15, ..tiny() },
        DecoderConfig { head_dim: 0, ..tiny() },
        DecoderConfig { hidden: 0, ..tiny() },
        DecoderConfig { vocab: 0, ..tiny() },
        DecoderConfig { max_seq: 0, ..tiny() },
        DecoderConfig { layers: 0, ..tiny() },
    ];
    for cfg in bad_shapes {
        for g in [&g1, &g2] {
            let r = Decoder::new(g, cfg.clone(), &SplitSpec::Even);
            assert!(
                matches!(r, Err(Error::InvalidArgument(_))),
                "{cfg:?} on {} members: {:?}",
                g.len(),
                r.err()
            );
        }
    }
    assert!(DecoderConfig::preset("medium").is_err());
    // Several members without a communicator.
    assert!(matches!(
        Decoder::with_comm(&g2, tiny(), &SplitSpec::Even, None),
        Err(Error::InvalidArgument(_))
    ));
    // Tokens beyond the vocabulary.
    for g in [&g1, &g2] {
        let mut d = Decoder::new(g, tiny(), &SplitSpec::Even).unwrap();
        let e = d.set_token(100).unwrap_err();
        assert!(matches!(e, Error::IndexOutOfRange { what: "token id", index: 100, len: 100, .. }), "{e:?}");
        assert_eq!(e.to_string(), "token id 100 out of range: there are 100 tokens in the vocabulary");
        assert!(matches!(d.set_token(u32::MAX), Err(Error::IndexOutOfRange { .. })));
        assert!(matches!(d.generate(100, 1, |_| {}), Err(Error::IndexOutOfRange { .. })));
        assert_eq!(d.position(), 0, "a rejected token decodes nothing");
        d.set_token(99).unwrap();
    }
    // Past max_seq: in one call, and step by step after filling the cache.
    for g in [&g1, &g3] {
        let mut d = Decoder::new(g, tiny(), &SplitSpec::Even).unwrap();
        assert!(matches!(d.generate(1, 5, |_| {}), Err(Error::InvalidArgument(_))), "{} members", g.len());
        let mut d = Decoder::new(g, tiny(), &SplitSpec::Even).unwrap();
        let mut seen = Vec::new();
        let tokens = d.generate(1, 4, |i| seen.push(i)).unwrap();
        assert_eq!(seen, vec![0, 1, 2, 3], "on_step once per step, in order");
        assert_eq!(tokens.len(), 4);
        assert!(tokens.iter().all(|&t| t < 100), "{tokens:?}");
        assert_eq!(d.position(), 4);
        assert!(matches!(d.step(), Err(Error::InvalidArgument(_))));
        assert!(matches!(d.generate(1, 1, |_| {}), Err(Error::InvalidArgument(_))));
        assert_eq!(d.position(), 4);
    }
    common::assert_no_validation_errors();
}

/// Issue 13, tool 5: a model the members cannot hold is refused before anything is
/// allocated, naming the device and what it needs: a tensor past one binding
/// (`maxStorageBufferRange`), and members on one adapter together past its device-local heap.
#[test]
fn decoder_too_large_for_the_devices_is_refused_before_allocating() {
    let _s = serial();
    let g2 = common::logical(2);
    let caps = g2.members()[0].adapter().caps.clone();
    let before = crossgpu::live_objects();
    // One vocabulary row block past the binding: the replicated embedding table alone.
    let rows = (caps.max_storage_buffer_range / (2 * 256) + 64) as usize;
    let wide = DecoderConfig { vocab: rows.min((1 << 24) - 1), hidden: 256, ..tiny() };
    if (wide.vocab * wide.hidden * 2) as u64 > caps.max_storage_buffer_range {
        let e = Decoder::new(&g2, wide, &SplitSpec::Even).err().expect("refused");
        assert!(
            matches!(&e, Error::Unsupported(m) if m.contains("embedding table") && m.contains("maxStorageBufferRange")),
            "{e}"
        );
    } else {
        eprintln!(
            "SKIPPED the binding case: this device binds {} bytes, more than any vocabulary below 2^24 needs",
            caps.max_storage_buffer_range
        );
    }
    // Many layers of modest tensors: more than the heap, for each member alone (so also when
    // the members are separate GPUs). A lower bound of one member's weight bytes per layer:
    let per_member_layer = 3 * 2048 * 2048 + 4 * 2048 * 512;
    let layers = (caps.device_local_heap_bytes / per_member_layer as u64 + 1) as usize;
    let deep =
        DecoderConfig { hidden: 2048, ffn: 2048, q_heads: 16, kv_heads: 4, head_dim: 128, layers, ..tiny() };
    let e = Decoder::new(&g2, deep.clone(), &SplitSpec::Even).err().expect("refused");
    assert!(
        matches!(&e, Error::OutOfDeviceMemory { detail, .. } if detail.contains("GiB") && detail.contains("nothing was allocated")),
        "{e}"
    );
    // The plan's footprint is what was compared: over the heap for one member alone.
    let plan = crossgpu::tp::Plan::new(&deep, &[1.0, 1.0]).unwrap();
    let one = plan.footprint(&deep, 0).bytes;
    assert!(one > caps.device_local_heap_bytes, "{one} bytes vs heap {}", caps.device_local_heap_bytes);
    assert_eq!(crossgpu::live_objects().buffers, before.buffers, "nothing was allocated");
    common::assert_no_validation_errors();
}

/// A hidden size that is not a multiple of 8 takes the unfused path (three products, ropes
/// and kv_store; gate, up and silu_mul): it runs, and decodes the same tokens on one, two and
/// three members, the members' residual streams bitwise equal.
#[test]
fn decoder_without_fused_kernels_decodes_the_same_tokens_on_every_member_count() {
    let _s = serial();
    let cfg =
        DecoderConfig { hidden: 60, ffn: 100, head_dim: 6, q_heads: 4, kv_heads: 2, max_seq: 6, ..tiny() };
    let mut tokens = Vec::new();
    for n in [1, 2, 3] {
        let g = common::logical(n);
        let mut d = Decoder::new(&g, cfg.clone(), &SplitSpec::Even).unwrap();
        let got = d.generate(3, 5, |_| {}).unwrap();
        assert!(got.iter().all(|&t| (t as usize) < cfg.vocab), "{got:?}");
        let r = d.residuals().unwrap();
        for (i, x) in r.iter().enumerate().skip(1) {
            assert_bits(&format!("{n} members: member {i}'s residual"), x, &r[0]);
        }
        tokens.push(got);
    }
    assert!(tokens.iter().all(|t| *t == tokens[0]), "tokens by member count: {tokens:?}");
    common::assert_no_validation_errors();
}

/// The same for the decoder's shapes and the split: sizes whose products overflow must be
/// errors, not panics.
#[test]
fn decoder_shapes_and_splits_reject_huge_sizes_without_panicking() {
    let _s = serial();
    let g = common::logical(1);
    let huge = [
        ("max_seq: usize::MAX", DecoderConfig { max_seq: usize::MAX, ..tiny() }),
        ("head_dim: 2^62", DecoderConfig { head_dim: 1 << 62, ..tiny() }),
        ("hidden: 2^40, ffn: 2^40", DecoderConfig { hidden: 1 << 40, ffn: 1 << 40, ..tiny() }),
    ];
    let mut bad = Vec::new();
    for (what, cfg) in huge {
        match no_panic(|| Decoder::new(&g, cfg.clone(), &SplitSpec::Even).map(|_| ())) {
            Ok(Err(_)) => {}
            Ok(Ok(())) => bad.push(format!("Decoder::new with {what}: accepted")),
            Err(msg) => bad.push(format!("Decoder::new with {what}: panicked: {msg}")),
        }
        if let Err(msg) = no_panic(|| cfg.parameters()) {
            bad.push(format!("DecoderConfig {{ {what} }}.parameters(): panicked: {msg}"));
        }
    }
    for (total, granularity) in [(usize::MAX, 1usize), (usize::MAX, 1 << 62)] {
        match no_panic(|| split_ranges(total, granularity, &[1.0, 1.0])) {
            Ok(Ok(r)) if r.last().map(|r| r.end) == Some(total) => {}
            Ok(Ok(r)) => bad.push(format!("split_ranges({total}, {granularity}, [1, 1]) = {r:?}")),
            Ok(Err(_)) => {}
            Err(msg) => bad.push(format!("split_ranges({total}, {granularity}, [1, 1]): panicked: {msg}")),
        }
    }
    g.synchronize().unwrap();
    common::assert_no_validation_errors();
    assert!(
        bad.is_empty(),
        "BUG (src/tp/model.rs, src/tp/split.rs): DecoderConfig::validate does not bound the sizes, so \
         Decoder::new and DecoderConfig::parameters multiply them unchecked, and split_ranges \
         overflows computing its cuts; each panics on bad input instead of returning an error:\n  {}",
        bad.join("\n  ")
    );
}
