//! Tokens drawn on the devices: the kernels' draws follow the softmax (top-k and top-p
//! restricted) and are, draw for draw, the host sampler's from the same logits at the same
//! position; the decoder's draws on 1, 2 and 3 members in each all-reduce mode equal the host's
//! over its logits read back, every member holding the same token; what the devices cannot
//! draw is refused by `set_sampling` and drawn on the host by `Generation`; misuse is refused.
//! The validation layer is on.

use crate::common::{self, serial};

use crossgpu::model::{Generation, Sampler, Sampling};
use crossgpu::tp::{sampling_chunk_floats, Decoder, DecoderConfig, SplitSpec, SAMPLING_SETTINGS_WORDS};
use crossgpu::{Comm, CommOptions, Error, Mode, ModeRequest};

/// The f64 softmax of `logits / t` over `keep` (the rest 0).
fn softmax_over(logits: &[f32], t: f64, keep: &[usize]) -> Vec<f64> {
    let m = keep.iter().map(|&i| f64::from(logits[i])).fold(f64::NEG_INFINITY, f64::max);
    let mut p = vec![0.0; logits.len()];
    for &i in keep {
        p[i] = ((f64::from(logits[i]) - m) / t).exp();
    }
    let s: f64 = p.iter().sum();
    p.iter().map(|x| x / s).collect()
}

/// Ids by logit, largest first, ties by id.
fn order(logits: &[f32]) -> Vec<usize> {
    let mut o: Vec<usize> = (0..logits.len()).collect();
    o.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
    o
}

/// The draw's distribution: the softmax over the top-k, cut to the nucleus.
fn expected(logits: &[f32], s: &Sampling) -> Vec<f64> {
    let o = order(logits);
    let k = if s.top_k == 0 { logits.len() } else { s.top_k.min(logits.len()) };
    let t = f64::from(s.temperature);
    let p = softmax_over(logits, t, &o[..k]);
    let mut keep = k;
    if s.top_p < 1.0 {
        let mut sum = 0.0;
        for (n, &i) in o[..k].iter().enumerate() {
            sum += p[i];
            if sum >= f64::from(s.top_p) {
                keep = n + 1;
                break;
            }
        }
    }
    softmax_over(logits, t, &o[..keep])
}

/// Where the host's and a device's draw may differ: the two tokens' perturbed values (the
/// host's, in f64) so close that the devices' f32 rounding of logit / T and of the noise's
/// logarithms can swap them.
fn near_tie(logits: &[f32], s: &Sampling, position: usize, a: u32, b: u32) -> bool {
    let host = Sampler::new(*s).unwrap();
    let z = |i: u32| host.perturbed(logits[i as usize], position, i);
    let scale = 1.0 + f64::from(logits[a as usize].abs().max(logits[b as usize].abs()) / s.temperature);
    (z(a) - z(b)).abs() <= 1e-5 * scale
}

fn settings() -> Vec<Sampling> {
    vec![
        Sampling::greedy(),
        Sampling { temperature: 1.0, top_k: 0, top_p: 1.0, seed: 11 },
        Sampling { temperature: 0.6, top_k: 5, top_p: 1.0, seed: 12 },
        Sampling { temperature: 1.4, top_k: 20, top_p: 0.8, seed: 13 },
    ]
}

/// One member's kernels, called directly: 3000 draws at positions 0.. from fixed logits of
/// awkward lengths (37: one chunk; 5000: three, the last partial), every draw the host
/// sampler's at that position (but near ties), and, over 37 tokens, their frequencies the
/// softmax's (top-k and nucleus restricted), each within 5 standard deviations.
#[test]
fn kernel_draws_are_the_hosts_and_follow_the_softmax() {
    let _s = serial();
    let g = common::logical(1);
    let m = &g.members()[0];
    let mut rng = common::rng(77);
    let draws = 3000;
    let room = 64;
    for (n, scale) in [(37, 3.0), (5000, 6.0)] {
        let logits: Vec<f32> = common::scaled(&mut rng, n, scale);
        let lt = m.upload_f32(&logits).unwrap();
        let chunks = m.upload_f32(&vec![0.0; sampling_chunk_floats(n, room)]).unwrap();
        let cand = m.upload_f32(&vec![0.0; 3 * room]).unwrap();
        let token = m.upload_u32(&[0]).unwrap();
        let history = m.upload_u32(&vec![0; draws]).unwrap();
        for s in settings() {
            let settings = m.upload_u32(&s.device_settings(n)).unwrap();
            let ops = m.transformer();
            for p in 0..draws {
                ops.sample_candidates(&lt, &settings, 0, &chunks, &cand, 0, room, p).unwrap();
                ops.select_sampled(&cand, &settings, room, &token, &history, p).unwrap();
            }
            let got = history.read_u32().unwrap();
            let host = Sampler::new(s).unwrap();
            let mut counts = vec![0usize; n];
            let mut differ = 0;
            for (p, &t) in got.iter().enumerate() {
                assert!((t as usize) < n, "{s:?}: draw {p} is token {t}");
                counts[t as usize] += 1;
                let h = host.sample_at(&logits, p).unwrap();
                if h != t {
                    assert!(
                        near_tie(&logits, &s, p, t, h),
                        "{s:?}, {n} logits: draw {p}: device {t}, host {h}, not a near tie"
                    );
                    differ += 1;
                }
            }
            assert!(differ <= draws / 200, "{s:?}: {differ} of {draws} draws differ from the host's");
            eprintln!(
                "{s:?}, {n} logits: {differ} of {draws} draws differ from the host's (near ties); {} tokens drawn",
                counts.iter().filter(|&&c| c > 0).count()
            );
            if n > 100 {
                continue;
            }
            let want = match s.temperature {
                0.0 => {
                    let mut w = vec![0.0; n];
                    w[order(&logits)[0]] = 1.0;
                    w
                }
                _ => expected(&logits, &s),
            };
            for (i, (&c, &p)) in counts.iter().zip(&want).enumerate() {
                let sd = (draws as f64 * p * (1.0 - p)).sqrt();
                let err = (c as f64 - draws as f64 * p).abs();
                assert!(
                    err <= 5.0 * sd + 1.0,
                    "{s:?}: token {i}: {c} draws of {draws}, expected {:.1} (sd {sd:.1})",
                    draws as f64 * p
                );
            }
        }
    }
    common::assert_no_validation_errors();
}

/// The decoder draws on the devices as `set_sampling` says, from the step after the call —
/// also where the step was recorded greedy and is replayed: after every step each member holds
/// the same token, the host sampler draws it from the logits read back at the step's position,
/// and 1, 2 and 3 members (uneven, one holding no vocabulary; DevicePoll replayed, HostBridge,
/// Generic) draw the same tokens.
#[test]
fn decoder_draws_on_every_member_count_and_mode_are_the_hosts() {
    let _s = serial();
    let cfg = DecoderConfig { layers: 2, vocab: 997, max_seq: 16, ..DecoderConfig::small() };
    let (greedy_steps, steps) = (2, 12);
    for s in settings() {
        let mut first: Option<Vec<u32>> = None;
        for (members, split, mode) in [
            (1, "even", None),
            (2, "even", Some(Mode::DevicePoll)),
            (3, "2:1:1", Some(Mode::DevicePoll)),
            (2, "1:3", Some(Mode::HostBridge)),
            (3, "1:0:2", Some(Mode::Generic)),
        ] {
            let g = common::logical(members);
            let comm = match mode {
                None => None,
                Some(mode) => {
                    let opts =
                        CommOptions { mode: ModeRequest::Forced(mode), ..CommOptions::from_env().unwrap() };
                    match Comm::with_options(&g, opts) {
                        Ok(c) => Some(c),
                        Err(Error::Unsupported(why)) if common::mode_refused_by_layout(mode, &why) => {
                            common::skip(common::requirement(mode), &format!("{mode} over {members}: {why}"));
                            continue;
                        }
                        Err(e) => panic!("{mode} over {members} members: {e}"),
                    }
                }
            };
            let split = SplitSpec::parse(split).unwrap();
            let mut d = Decoder::with_comm(&g, cfg.clone(), &split, comm).unwrap();
            assert!(d.device_sampling_unsupported(&s).is_none(), "{s:?} on {members}");
            d.set_token(5).unwrap();
            let mut tokens = Vec::new();
            for step in 0..steps {
                // Greedy first (the step recorded then is replayed after the change).
                let now = if step < greedy_steps { Sampling::greedy() } else { s };
                if step == 0 || step == greedy_steps {
                    d.set_sampling(now).unwrap();
                }
                d.step().unwrap();
                let logits = d.logits().unwrap();
                let each = d.next_tokens().unwrap();
                assert!(each.iter().all(|&t| t == each[0]), "{s:?}, {members} members: tokens {each:?}");
                let p = d.position() - 1;
                let h = Sampler::new(now).unwrap().sample_at(&logits, p).unwrap();
                assert!(
                    h == each[0] || near_tie(&logits, &now, p, each[0], h),
                    "{now:?}, {members} members, position {p}: device {}, host {h}",
                    each[0]
                );
                tokens.push(each[0]);
            }
            let mode = d.comm().map(|c| c.mode());
            eprintln!("{s:?}, {members} members ({mode:?}, replayed {}): {tokens:?}", d.replays());
            match &first {
                None => first = Some(tokens),
                Some(f) => assert_eq!(&tokens, f, "{s:?}: {members} members' tokens ({mode:?})"),
            }
            common::assert_no_validation_errors();
        }
    }
}

/// A top-k past the members' room (and top-p without a top-k) cannot be drawn on the devices:
/// `set_sampling` says why and changes nothing, and `Generation` draws on the host instead —
/// the host sampler's tokens over the decoder's logits. Settings that are wrong are errors.
#[test]
fn draws_the_devices_cannot_make_go_to_the_host() {
    let _s = serial();
    let cfg = DecoderConfig { layers: 1, vocab: 300, max_seq: 12, ..DecoderConfig::small() };
    let g = common::logical(3);
    let mut d = Decoder::new(&g, cfg.clone(), &SplitSpec::Even).unwrap();
    let room = d.sampling_room();
    assert_eq!(room, cfg.hidden / 9, "3 members of hidden {}", cfg.hidden);
    let wide = Sampling { temperature: 0.9, top_k: room + 1, top_p: 1.0, seed: 3 };
    let nucleus = Sampling { temperature: 0.9, top_k: 0, top_p: 0.9, seed: 3 };
    for s in [wide, nucleus] {
        let why = d.device_sampling_unsupported(&s).expect("past the room");
        match d.set_sampling(s) {
            Err(Error::Unsupported(m)) => assert!(m.contains(&why), "{m}"),
            other => panic!("{s:?}: {other:?}"),
        }
        assert_eq!(*d.sampling(), Sampling::greedy());
    }
    for bad in
        [Sampling { temperature: -1.0, ..Sampling::greedy() }, Sampling { top_p: 0.0, ..Sampling::greedy() }]
    {
        assert!(matches!(d.set_sampling(bad), Err(Error::InvalidArgument(_))), "{bad:?}");
    }
    // Generation draws `wide` on the host: the sampler's tokens over each step's logits,
    // replayed here step by step on a second decoder.
    let prompt = [1, 2, 3];
    let got: Vec<u32> = {
        let mut gen = Generation::new(&mut d, &prompt, wide, &[], 6).unwrap();
        assert!(gen.drawn_on_host().is_some());
        gen.by_ref().collect::<Result<_, _>>().unwrap()
    };
    let mut e = Decoder::new(&g, cfg, &SplitSpec::Even).unwrap();
    let host = Sampler::new(wide).unwrap();
    let mut want = Vec::new();
    for (i, &t) in prompt.iter().enumerate() {
        e.set_token(t).unwrap();
        e.step().unwrap();
        if i + 1 == prompt.len() {
            want.push(host.sample_at(&e.logits().unwrap(), e.position() - 1).unwrap());
        }
    }
    while want.len() < 6 {
        e.set_token(*want.last().unwrap()).unwrap();
        e.step().unwrap();
        want.push(host.sample_at(&e.logits().unwrap(), e.position() - 1).unwrap());
    }
    assert_eq!(got, want);
    common::assert_no_validation_errors();
}

/// The kernels' checks: settings of the wrong length or type, room 0 or past 64, candidates
/// not a whole number of members' entries, a slot past them, scratch too short, ids past 2^24,
/// a step past the history.
#[test]
fn sampling_kernels_refuse_misuse() {
    let _s = serial();
    let g = common::logical(1);
    let m = &g.members()[0];
    let ops = m.transformer();
    let logits = m.upload_f32(&[0.5, 1.0, -2.0]).unwrap();
    let settings = m.upload_u32(&Sampling::greedy().device_settings(3)).unwrap();
    let short = m.upload_u32(&[0; SAMPLING_SETTINGS_WORDS - 1]).unwrap();
    let as_f32 = m.upload_f32(&[0.0; SAMPLING_SETTINGS_WORDS]).unwrap();
    let chunks = m.upload_f32(&[0.0; 12]).unwrap();
    let few = m.upload_f32(&[0.0; 11]).unwrap();
    let cand = m.upload_f32(&[0.0; 3 * 4 * 2]).unwrap();
    let token = m.upload_u32(&[0]).unwrap();
    let history = m.upload_u32(&[0; 2]).unwrap();
    let bad = [
        ops.sample_candidates(&logits, &short, 0, &chunks, &cand, 0, 4, 0),
        ops.sample_candidates(&logits, &as_f32, 0, &chunks, &cand, 0, 4, 0),
        ops.sample_candidates(&logits, &settings, 0, &chunks, &cand, 0, 0, 0),
        ops.sample_candidates(&logits, &settings, 0, &chunks, &cand, 0, 65, 0),
        ops.sample_candidates(&logits, &settings, 0, &chunks, &cand, 0, 5, 0),
        ops.sample_candidates(&logits, &settings, 0, &chunks, &cand, 2, 4, 0),
        ops.sample_candidates(&logits, &settings, 0, &few, &cand, 0, 4, 0),
        ops.sample_candidates(&logits, &settings, (1 << 24) - 2, &chunks, &cand, 0, 4, 0),
        ops.select_sampled(&cand, &settings, 4, &token, &history, 2),
        ops.select_sampled(&cand, &short, 4, &token, &history, 0),
        ops.select_sampled(&cand, &settings, 4, &history, &history, 0),
    ];
    for (i, r) in bad.into_iter().enumerate() {
        assert!(r.is_err(), "misuse {i} accepted");
    }
    // And the good call after them works: two members' entries, slot 1.
    ops.sample_candidates(&logits, &settings, 10, &chunks, &cand, 1, 4, 0).unwrap();
    ops.select_sampled(&cand, &settings, 4, &token, &history, 1).unwrap();
    assert_eq!(token.read_u32().unwrap(), vec![11]);
    common::assert_no_validation_errors();
}
