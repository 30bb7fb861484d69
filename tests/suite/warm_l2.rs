//! The L2 warm (`TransformerOps::warm_l2`, `Decoder::set_warm_l2`): which words the kernel
//! reads, against its CPU twin (a thread stores `WARM_L2_KEY` only where the xor of the words
//! it read equals it, so a planted key shows whether those words, and only those, were read),
//! its bad requests, and that a decoder warming its weights decodes the same bits as one that
//! does not. The validation layer (with synchronization validation) is on: the warm runs
//! beside the norms and attention with no barrier between them.

use crate::common::{self, serial};

use crossgpu::tp::{Decoder, DecoderConfig, SplitSpec, WARM_L2_DISCRETE, WARM_L2_KEY};
use crossgpu::DeviceType;
use crossgpu::{Comm, CommOptions, Error, Mode, ModeRequest};
use rand::Rng;

/// Sectors (32 bytes, 8 words) a workgroup reads, and threads per workgroup.
const SECTORS: usize = 2048;
const THREADS: usize = 256;

/// CPU twin: the xor of the words thread `t` of the tensor's workgroup `g` reads, of a tensor
/// whose first `sectors` sectors are read: each sector's first word, sectors 2048g + t + 256k.
fn thread_xor(words: &[u32], sectors: usize, g: usize, t: usize) -> u32 {
    (0..8).map(|k| SECTORS * g + t + THREADS * k).filter(|&s| s < sectors).fold(0, |a, s| a ^ words[8 * s])
}

/// Every (workgroup, thread) of a tensor's share of the dispatch whose xor is the key.
fn hits(words: &[u32], sectors: usize) -> Vec<(usize, usize)> {
    let groups = sectors.div_ceil(SECTORS);
    (0..groups)
        .flat_map(|g| (0..THREADS).map(move |t| (g, t)))
        .filter(|&(g, t)| thread_xor(words, sectors, g, t) == WARM_L2_KEY)
        .collect()
}

#[test]
fn warm_l2_reads_each_sectors_first_word_of_the_bytes_asked() {
    let _s = serial();
    let g = common::logical(1);
    let m = g.member(0).unwrap();
    let mut rng = common::rng(3301);
    // Awkward lengths: several workgroups, a last partial one, a part-sector end, a byte
    // limit inside the tensor and one past it (capped at the tensor's storage).
    let lens = [70_001usize, 16_411, 5_003];
    let limits = [100_000u64, u64::MAX, 777];
    let sectors: Vec<usize> =
        lens.iter().zip(limits).map(|(&n, b)| (b.min(4 * n as u64) / 32) as usize).collect();
    for round in 0..12 {
        let tensors = 1 + round % 3;
        let mut words: Vec<Vec<u32>> =
            lens[..tensors].iter().map(|&n| (0..n).map(|_| rng.random()).collect()).collect();
        // Plant the key in one thread of one tensor (half the rounds), by fixing one of the
        // words it reads; the rest are random, so no other thread matches (checked).
        let planted = round % 2 == 0;
        if planted {
            let which = rng.random_range(0..tensors);
            let s = rng.random_range(0..sectors[which]);
            let (g, t) = (s / SECTORS, s % THREADS);
            let w = &mut words[which];
            let rest = thread_xor(w, sectors[which], g, t) ^ w[8 * s];
            w[8 * s] = rest ^ WARM_L2_KEY;
        } else {
            // A word no thread reads (the second of a sector, and one past the limit) set so
            // that a thread reading it would match.
            let w = &mut words[0];
            let s = rng.random_range(0..sectors[0]);
            let (g, t) = (s / SECTORS, s % THREADS);
            w[8 * s + 1] = thread_xor(w, sectors[0], g, t) ^ w[8 * s] ^ WARM_L2_KEY;
            let past = 8 * sectors[0];
            w[past] = thread_xor(w, sectors[0], g, t) ^ WARM_L2_KEY;
        }
        let want_hits: usize = (0..tensors).map(|i| hits(&words[i], sectors[i]).len()).sum();
        assert_eq!(want_hits, usize::from(planted), "round {round}: the CPU twin's matches");
        let ts: Vec<_> = words.iter().map(|w| m.upload_u32(w).unwrap()).collect();
        let sink = m.upload_u32(&[0, 0]).unwrap();
        let asked: Vec<_> = ts.iter().zip(limits).collect();
        m.transformer().warm_l2(&asked, &sink).unwrap();
        let got = sink.read_u32().unwrap();
        let want = if planted { WARM_L2_KEY } else { 0 };
        assert_eq!(got, [want, 0], "round {round}: {tensors} tensors, planted {planted}");
        // It reads and changes nothing else.
        for (t, w) in ts.iter().zip(&words) {
            assert_eq!(&t.read_u32().unwrap(), w, "round {round}: a warmed tensor changed");
        }
    }
    common::assert_no_validation_errors();
}

#[test]
fn warm_l2_refuses_bad_requests() {
    let _s = serial();
    let g = common::logical(2);
    let (m, other) = (g.member(0).unwrap(), g.member(1).unwrap());
    let t = m.upload_u32(&[1; 64]).unwrap();
    let sink = m.upload_u32(&[0]).unwrap();
    let ops = m.transformer();
    let invalid = |r: crossgpu::Result<()>, what: &str| {
        assert!(matches!(r, Err(Error::InvalidArgument(_))), "{what}: {r:?}")
    };
    let owner = |r: crossgpu::Result<()>, what: &str| {
        assert!(matches!(r, Err(Error::WrongOwner { .. })), "{what}: {r:?}")
    };
    invalid(ops.warm_l2(&[], &sink), "no tensor");
    invalid(ops.warm_l2(&[(&t, 64); 4], &sink), "four tensors");
    invalid(ops.warm_l2(&[(&t, 64)], &m.upload_u32(&[]).unwrap()), "an empty sink");
    let f32_sink = ops.warm_l2(&[(&t, 64)], &m.upload_f32(&[0.0]).unwrap());
    assert!(matches!(f32_sink, Err(Error::DtypeMismatch { .. })), "an f32 sink: {f32_sink:?}");
    owner(ops.warm_l2(&[(&other.upload_u32(&[1; 64]).unwrap(), 64)], &sink), "another member's tensor");
    owner(ops.warm_l2(&[(&t, 64)], &other.upload_u32(&[0]).unwrap()), "another member's sink");
    // Less than a sector reads nothing and records nothing.
    let before = m.stats().dispatches;
    ops.warm_l2(&[(&t, 31)], &sink).unwrap();
    assert_eq!(m.stats().dispatches, before, "a warm of no whole sector");
    common::assert_no_validation_errors();
}

const STEPS: usize = 6;

/// A decode's tokens, logits' bits, every member's residual stream's bits, and dispatches.
type Run = (Vec<u32>, Vec<u32>, Vec<Vec<u32>>, u64);

/// Tokens, logits, every member's residual stream and dispatches (summed over members) of a
/// decode warming `warm` bytes of each product's weights, its residual norms folded into the
/// products where `fold` (`Decoder::set_fold_norms`).
fn decode(cfg: &DecoderConfig, members: usize, mode: Option<Mode>, fold: bool, warm: u64) -> Option<Run> {
    let g = common::logical(members);
    let comm = match mode {
        None => None,
        Some(mode) => {
            let opts = CommOptions { mode: ModeRequest::Forced(mode), ..CommOptions::from_env().unwrap() };
            match Comm::with_options(&g, opts) {
                Ok(c) => Some(c),
                Err(Error::Unsupported(why)) if common::mode_refused_by_layout(mode, &why) => {
                    common::skip(common::requirement(mode), &format!("{mode} over {members} members: {why}"));
                    return None;
                }
                Err(e) => panic!("{mode} over {members} members: {e}"),
            }
        }
    };
    let mut d = Decoder::with_comm(&g, cfg.clone(), &SplitSpec::Even, comm).unwrap();
    // The default warms where every member is a discrete GPU (the seeded weights are f16), and
    // the decoder warms nothing unless asked.
    let discrete = g.members().iter().all(|m| m.adapter().device_type == DeviceType::Discrete);
    assert_eq!(d.warm_l2_default(), if discrete { WARM_L2_DISCRETE } else { 0 });
    assert_eq!(d.warm_l2_bytes(), 0);
    d.set_warm_l2(warm).unwrap();
    assert_eq!(d.warm_l2_bytes(), warm);
    d.set_fold_norms(fold).unwrap();
    let tokens = d.generate(7, STEPS, |_| {}).unwrap();
    if d.replays() {
        let refused = d.set_warm_l2(warm + 1);
        assert!(matches!(refused, Err(Error::InvalidArgument(_))), "{refused:?}");
    }
    let s = d.stats();
    let bits = |v: Vec<f32>| v.into_iter().map(f32::to_bits).collect::<Vec<_>>();
    let residuals = d.residuals().unwrap().into_iter().map(bits).collect();
    Some((tokens, bits(d.logits().unwrap()), residuals, s.dispatches))
}

/// The warm changes no value: the same tokens, logits and residual streams, bit for bit, on
/// one member (replayed; its norms written, and folded into the products, where the warm runs
/// beside the product that leaves a norm pending) and across two (HostBridge, recorded every
/// step; DevicePoll, fused and replayed), with one more dispatch beside each of a step's norms
/// (or their producers) and attentions (three a layer and the vocabulary's), at a warm that
/// covers whole matrices and one that stops inside the first sectors' workgroup.
#[test]
fn a_decoder_warming_its_weights_decodes_the_same_bits() {
    let _s = serial();
    let cfg = DecoderConfig { layers: 2, vocab: 500, max_seq: 20, ..DecoderConfig::small() };
    let cases = [
        (1, None, false),
        (1, None, true),
        (2, Some(Mode::HostBridge), false),
        (2, Some(Mode::DevicePoll), false),
    ];
    for (members, mode, fold) in cases {
        let Some(cold) = decode(&cfg, members, mode, fold, 0) else { continue };
        for warm in [1 << 20, 4000] {
            let Some(warmed) = decode(&cfg, members, mode, fold, warm) else { continue };
            let what = format!("{members} members, {mode:?}, fold {fold}, warm {warm}");
            assert_eq!(warmed.0, cold.0, "{what}: tokens");
            assert_eq!(warmed.1, cold.1, "{what}: logits bitwise");
            assert_eq!(warmed.2, cold.2, "{what}: residual streams bitwise");
            let warms = ((3 * cfg.layers + 1) * STEPS * members) as u64;
            assert_eq!(warmed.3 - cold.3, warms, "{what}: one warm beside each norm and attention");
        }
    }
    common::assert_no_validation_errors();
}
