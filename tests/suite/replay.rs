//! A decode step recorded once and replayed (`Decoder::replays`): the devices keep the position
//! and advance it, so one pre-recorded command buffer per token does what recording every
//! step does: the same tokens, and the same bits of the logits and of the residual stream, one
//! submit per token, and nothing left behind. The validation layer is on.

use crate::common;

use crate::common::serial;
use crossgpu::tp::{Decoder, DecoderConfig, SplitSpec};
use crossgpu::{Comm, CommOptions, DeviceGroup, Error, Mode, ModeRequest};

/// Tokens of two `generate` calls (the second continues where the first stopped), the logits,
/// the residual stream, and submits per token.
type Run = (Vec<u32>, Vec<u32>, Vec<f32>, Vec<Vec<f32>>, f64);

fn run(cfg: &DecoderConfig, replay: bool) -> Run {
    let g = common::logical(1);
    let mut d = Decoder::new(&g, cfg.clone(), &SplitSpec::Even).unwrap();
    d.set_replay(replay);
    assert_eq!(d.replays(), replay);
    let before = d.stats();
    let first = d.generate(7, 9, |_| {}).unwrap();
    let second = d.generate(first[8], 4, |_| {}).unwrap();
    let after = d.stats();
    let submits = (after.submits - before.submits) as f64 / 13.0;
    assert_eq!(after.tokens, 13);
    (first, second, d.logits().unwrap(), d.residuals().unwrap(), submits)
}

#[test]
fn replayed_steps_give_the_bits_of_recorded_steps() {
    let _s = serial();
    let small = DecoderConfig { layers: 2, vocab: 500, max_seq: 20, ..DecoderConfig::small() };
    // A hidden size that is not a multiple of 8 takes the unfused path (three products, two
    // ropes and kv_store, each reading the position from the device).
    let odd = DecoderConfig { hidden: 100, ffn: 72, ..small.clone() };
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    for cfg in [small, odd] {
        let recorded = run(&cfg, false);
        let replayed = run(&cfg, true);
        let what = format!("hidden {}", cfg.hidden);
        assert_eq!(replayed.0, recorded.0, "{what}: tokens of the first generate");
        assert_eq!(replayed.1, recorded.1, "{what}: tokens of the second generate");
        assert_eq!(bits(&replayed.2), bits(&recorded.2), "{what}: logits bitwise");
        assert_eq!(bits(&replayed.3[0]), bits(&recorded.3[0]), "{what}: residual stream bitwise");
        // One submit per token either way (plus each generate's read of the history): a replay
        // is submitted with whatever the step's stream holds, never beside it.
        assert_eq!(replayed.4, recorded.4, "{what}: submits per token");
        eprintln!("{what}: submits per token: recorded {:.2}, replayed {:.2}", recorded.4, replayed.4);
    }
    common::assert_no_validation_errors();
}

#[test]
fn a_replayed_decoder_stops_at_the_cache_and_leaves_nothing_behind() {
    let _s = serial();
    let before = crossgpu::live_objects();
    {
        let g = common::logical(1);
        let cfg = DecoderConfig { layers: 1, vocab: 300, max_seq: 6, ..DecoderConfig::small() };
        let mut d = Decoder::new(&g, cfg.clone(), &SplitSpec::Even).unwrap();
        let tokens = d.generate(3, 6, |_| {}).unwrap();
        assert_eq!(tokens.len(), 6);
        // The seventh position is past the cache: refused on the host before anything is
        // submitted, and the decoder still answers.
        let e = d.step().unwrap_err();
        assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
        assert_eq!(d.position(), 6);
        assert_eq!(d.logits().unwrap().len(), cfg.vocab);
        // Several members record their rounds with the host: no replay there.
        let g2 = common::logical(2);
        let d2 = Decoder::new(&g2, cfg, &SplitSpec::Even).unwrap();
        assert!(!d2.replays());
    }
    assert_eq!(crossgpu::live_objects(), before, "live Vulkan objects after dropping the decoders");
    common::assert_no_validation_errors();
}

/// A DevicePoll communicator over `g`, or `None` (said loudly) where DevicePoll cannot run
/// there: too few llvmpipe threads, or (GPU machine layouts) two members on one GPU.
fn device_poll(g: &DeviceGroup) -> Option<Comm> {
    let opts =
        CommOptions { mode: ModeRequest::Forced(Mode::DevicePoll), ..CommOptions::from_env().unwrap() };
    match Comm::with_options(g, opts) {
        Ok(c) => Some(c),
        Err(Error::Unsupported(why)) if common::device_poll_refused_by_layout(&why) => {
            common::skip(Some("poll"), &format!("DevicePoll over {} members: {why}", g.len()));
            None
        }
        Err(e) => panic!("DevicePoll over {} members: {e}", g.len()),
    }
}

/// Tokens, logits, every member's residual stream, all-reduces and submits per token per member.
type PollRun = (Vec<u32>, Vec<u32>, Vec<Vec<f32>>, f64, f64);

/// DevicePoll over `members` devices (`common::logical`): `replay_steps` replayed steps, then
/// recorded ones up to nine, then (if `back`) three replayed again. `None` (said loudly) where
/// DevicePoll cannot run there.
fn poll_run(cfg: &DecoderConfig, members: usize, replay_steps: usize, back: bool) -> Option<PollRun> {
    let g = common::logical(members);
    let comm = device_poll(&g)?;
    let mut d = Decoder::with_comm(&g, cfg.clone(), &SplitSpec::Even, Some(comm)).unwrap();
    assert!(d.replays(), "DevicePoll's fused rounds of the small model fit a ring");
    let before = d.stats();
    d.set_replay(replay_steps > 0);
    let mut tokens = d.generate(5, replay_steps.max(1), |_| {}).unwrap();
    d.set_replay(false);
    assert!(!d.replays());
    let last = *tokens.last().unwrap();
    tokens.extend(d.generate(last, 9 - replay_steps.max(1), |_| {}).unwrap());
    if back {
        d.set_replay(true);
        let last = *tokens.last().unwrap();
        tokens.extend(d.generate(last, 3, |_| {}).unwrap());
    }
    let s = d.stats();
    let steps = (s.tokens - before.tokens) as f64;
    let all_reduces = (s.all_reduces - before.all_reduces) as f64 / steps;
    let submits = (s.submits - before.submits) as f64 / steps / members as f64;
    let history = tokens.clone();
    Some((history, bits(&d.logits().unwrap()), d.residuals().unwrap(), all_reduces, submits))
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// DevicePoll's rounds replayed: the devices advance the round numbers with the position, so a
/// recorded step's rounds run again as the communicator's next rounds. Replayed steps, recorded
/// steps after them (the slot entries are settled first) and replayed steps again give the
/// bits of recording every step, with the same all-reduces per token.
#[test]
fn device_poll_replays_its_rounds_as_new_rounds() {
    let _s = serial();
    let cfg = DecoderConfig { layers: 2, vocab: 500, max_seq: 20, ..DecoderConfig::small() };
    for members in [2, 3] {
        let Some(recorded) = poll_run(&cfg, members, 0, false) else { continue };
        let Some(replayed) = poll_run(&cfg, members, 9, false) else { continue };
        let Some(mixed) = poll_run(&cfg, members, 5, true) else { continue };
        // The twelve tokens of the mixed run, recorded throughout on one member.
        let recorded_12 = {
            let g = common::logical(1);
            let mut d = Decoder::new(&g, cfg.clone(), &SplitSpec::Even).unwrap();
            d.set_replay(false);
            d.generate(5, 12, |_| {}).unwrap()
        };
        let what = format!("{members} members");
        assert_eq!(replayed.0, recorded.0, "{what}: tokens, replayed");
        assert_eq!(replayed.1, recorded.1, "{what}: logits bitwise, replayed");
        for (i, (a, b)) in replayed.2.iter().zip(&recorded.2).enumerate() {
            assert_eq!(bits(a), bits(b), "{what}: member {i}'s residual stream, replayed");
        }
        assert_eq!(mixed.0, recorded_12, "{what}: tokens, replayed then recorded then replayed");
        assert_eq!(replayed.3, recorded.3, "{what}: all-reduces per token");
        assert_eq!(replayed.3, (2 * cfg.layers) as f64, "{what}: all-reduces per token");
        eprintln!(
            "{what}: submits per token per member: recorded {:.2}, replayed {:.2}",
            recorded.4, replayed.4
        );
    }
    common::assert_no_validation_errors();
}

/// A replay that cannot be submitted on every member (a lost device, injected) leaves the
/// members out of step: the step's error says why, every later step is refused, and with
/// DevicePoll the communicator is poisoned, which ends the other members' waits at once, so
/// nothing hangs.
#[test]
fn a_replay_submitted_on_some_members_only_stops_the_decoder() {
    let _s = serial();
    let cfg = DecoderConfig { layers: 1, vocab: 300, max_seq: 16, ..DecoderConfig::small() };
    // One member.
    {
        let g = common::logical(1);
        let mut d = Decoder::new(&g, cfg.clone(), &SplitSpec::Even).unwrap();
        assert!(d.replays());
        d.generate(3, 3, |_| {}).unwrap();
        g.member(0).unwrap().inject_device_lost();
        let e = d.step().unwrap_err();
        assert!(matches!(e, Error::DeviceLost { .. }), "{e}");
        let again = d.step().unwrap_err();
        assert!(matches!(again, Error::Poisoned(..)), "{again}");
    }
    // DevicePoll over two members: the second one's submit fails after the first one's went out.
    let g = common::logical(2);
    let Some(comm) = device_poll(&g) else { return };
    let mut d = Decoder::with_comm(&g, cfg, &SplitSpec::Even, Some(comm)).unwrap();
    assert!(d.replays());
    d.generate(3, 3, |_| {}).unwrap();
    g.member(1).unwrap().inject_device_lost();
    let e = d.step().unwrap_err();
    assert!(matches!(e, Error::DeviceLost { .. }), "{e}");
    let again = d.step().unwrap_err();
    assert!(matches!(again, Error::Poisoned(..)), "{again}");
    // Member 0's replayed step ran into waits that the poisoning ended: it finishes.
    g.member(0).unwrap().synchronize().ok();
    drop(d);
    common::assert_no_validation_errors();
}
