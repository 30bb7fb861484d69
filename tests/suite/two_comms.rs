//! Two communicators on one group (a tensor-parallel and a data-parallel one, a library's and
//! the application's own) in every mode and every pair of modes: calls interleaved, one
//! dropped with its rounds unread or read, one kept alive beside the other, and a replayed
//! decoder beside a second communicator. Every sum is checked against the f64 reference and
//! bitwise across members; the validation layer is on.

use crate::common;

use crate::common::{reference, serial};
use crossgpu::tp::{Decoder, DecoderConfig, SplitSpec};
use crossgpu::{AllReduceOptions, Comm, CommOptions, DeviceGroup, Error, Mode, ModeRequest, Tensor};

const MODES: [Mode; 4] = [Mode::HostBridge, Mode::SyncFd, Mode::DevicePoll, Mode::Generic];

/// A communicator of `mode` over `group`, or `None`, said loudly, where the devices or the
/// test layout cannot run it (SyncFd on a driver without SYNC_FD, DevicePoll with too few
/// llvmpipe threads); `CROSSGPU_TEST_REQUIRE` turns those skips into failures.
fn comm(group: &DeviceGroup, mode: Mode) -> Option<Comm> {
    let opts = CommOptions { mode: ModeRequest::Forced(mode), ..CommOptions::from_env().unwrap() };
    match Comm::with_options(group, opts) {
        Ok(c) => {
            assert_eq!(c.mode(), mode, "{}", c.reason());
            Some(c)
        }
        Err(Error::Unsupported(why)) if common::mode_refused_by_layout(mode, &why) => {
            common::skip(common::requirement(mode), &format!("{mode} over {} members: {why}", group.len()));
            None
        }
        Err(e) => panic!("{mode} over {} members: {e}", group.len()),
    }
}

/// One all-reduce in flight: the inputs and the tensors that will hold the sum.
struct Pending {
    parts: Vec<Vec<f32>>,
    tensors: Vec<Tensor>,
}

fn start(group: &DeviceGroup, comm: &mut Comm, rng: &mut impl rand::Rng, n: usize) -> Pending {
    let parts: Vec<Vec<f32>> = group.members().iter().map(|_| common::random(rng, n)).collect();
    let mut tensors: Vec<Tensor> =
        group.members().iter().zip(&parts).map(|(m, p)| m.upload_f32(p).unwrap()).collect();
    comm.all_reduce(&mut tensors, &AllReduceOptions::default())
        .unwrap_or_else(|e| panic!("{} all-reduce of {n}: {e}", comm.mode()));
    Pending { parts, tensors }
}

/// Reads every member's sum: bitwise equal across members, within the f64 bound.
fn check(what: &str, p: Pending) {
    let reference = reference::all_reduce(&p.parts, &[], false);
    let got: Vec<Vec<f32>> =
        p.tensors.iter().map(|t| t.read().unwrap_or_else(|e| panic!("{what}: read: {e}"))).collect();
    for (j, g) in got.iter().enumerate() {
        common::assert_bits(&format!("{what}: member {j} vs member 0"), g, &got[0]);
    }
    common::assert_within_ev(what, &got[0], &reference);
}

/// Every order a user might use two communicators `a` and `b` in.
fn scenarios(group: &DeviceGroup, ma: Mode, mb: Mode, rng: &mut impl rand::Rng) {
    let n = group.len();
    let what = |s: &str| format!("{n} members, a = {ma}, b = {mb}: {s}");
    let sizes = [64, 1000, 4099];
    // b used once and read back, then a again, twice, b alive.
    {
        let Some(mut a) = comm(group, ma) else { return };
        check(&what("a alone"), start(group, &mut a, rng, 64));
        let Some(mut b) = comm(group, mb) else { return };
        check(&what("b once"), start(group, &mut b, rng, 64));
        for (k, &s) in sizes.iter().enumerate() {
            check(&what(&format!("a after b, call {k}, b alive")), start(group, &mut a, rng, s));
        }
        check(&what("b again after a"), start(group, &mut b, rng, 333));
    }
    // b dropped with its round unread, then a.
    {
        let Some(mut a) = comm(group, ma) else { return };
        check(&what("a first"), start(group, &mut a, rng, 64));
        let Some(mut b) = comm(group, mb) else { return };
        let unread = start(group, &mut b, rng, 64);
        drop(b);
        for &s in &sizes {
            check(&what(&format!("a after b dropped unread ({s})")), start(group, &mut a, rng, s));
        }
        // The dropped communicator's round still completed.
        check(&what("b's unread round, after b was dropped"), unread);
    }
    // b dropped after a read, a dropped first, then both made again.
    {
        let Some(mut a) = comm(group, ma) else { return };
        let Some(mut b) = comm(group, mb) else { return };
        check(&what("b before a"), start(group, &mut b, rng, 64));
        drop(b);
        check(&what("a after b dropped read"), start(group, &mut a, rng, 64));
        let Some(mut b) = comm(group, mb) else { return };
        drop(a);
        check(&what("b after a dropped"), start(group, &mut b, rng, 64));
    }
    // Interleaved, nothing read until the end: rounds of both ride in the same submits.
    {
        let Some(mut a) = comm(group, ma) else { return };
        let Some(mut b) = comm(group, mb) else { return };
        let mut pending = Vec::new();
        for k in 0..12 {
            let s = sizes[k % sizes.len()] + k;
            let c = if k % 3 == 1 { &mut b } else { &mut a };
            pending.push((k, start(group, c, rng, s)));
        }
        for (k, p) in pending {
            check(&what(&format!("interleaved call {k}")), p);
        }
    }
}

#[test]
fn two_communicators_on_one_group_in_every_mode() {
    let _s = serial();
    let mut rng = common::rng(71);
    for members in [2, 3, 4] {
        let group = common::logical(members);
        for ma in MODES {
            for mb in MODES {
                // Every same-mode pair, and every pair with DevicePoll (whose stream hooks are
                // what a second communicator could disturb); the rest adds nothing new.
                if ma == mb || ma == Mode::DevicePoll || mb == Mode::DevicePoll {
                    scenarios(&group, ma, mb, &mut rng);
                }
            }
        }
    }
    common::assert_no_validation_errors();
}

/// A replayed decoder (DevicePoll, its rounds fused and replayed) beside a second DevicePoll
/// communicator on the same group that all-reduces between its steps: the decoder's tokens are
/// those of one member, and the second communicator's sums are right.
#[test]
fn a_replayed_decoder_beside_a_second_communicator() {
    let _s = serial();
    let mut rng = common::rng(72);
    let cfg = DecoderConfig { layers: 2, vocab: 500, max_seq: 24, ..DecoderConfig::small() };
    let want = {
        let g = common::logical(1);
        let mut d = Decoder::new(&g, cfg.clone(), &SplitSpec::Even).unwrap();
        d.generate(5, 12, |_| {}).unwrap()
    };
    for members in [2, 3] {
        let group = common::logical(members);
        let Some(decoder_comm) = comm(&group, Mode::DevicePoll) else { continue };
        let mut d = Decoder::with_comm(&group, cfg.clone(), &SplitSpec::Even, Some(decoder_comm)).unwrap();
        assert!(d.replays());
        for second in [Mode::DevicePoll, Mode::HostBridge] {
            let Some(mut other) = comm(&group, second) else { continue };
            let mut tokens = Vec::new();
            let mut first = 5;
            let mut pending = Vec::new();
            for k in 0..4 {
                tokens.extend(d.generate(first, 3, |_| {}).unwrap());
                first = *tokens.last().unwrap();
                pending.push(start(&group, &mut other, &mut rng, 100 + k));
            }
            for (k, p) in pending.into_iter().enumerate() {
                check(&format!("{members} members: {second} beside the decoder, call {k}"), p);
            }
            assert_eq!(tokens, want, "{members} members, {second} beside: the decoder's tokens");
            // Start again from position 0 for the next pairing.
            d = Decoder::with_comm(&group, cfg.clone(), &SplitSpec::Even, comm(&group, Mode::DevicePoll))
                .unwrap();
            drop(other);
        }
    }
    common::assert_no_validation_errors();
}
