//! The all-reduce against an f64 CPU reference on lavapipe: several logical devices (each its
//! own VkDevice), every mode that the device can do, both wire precisions, awkward sizes, long
//! runs with growth, and teardown. The validation layer (with synchronization validation) is on
//! and any error it reports fails the test.

use crate::common::{self, serial};

use crate::common::reference::{self, wire};
use crossgpu::{
    AllReduceOptions, Comm, CommOptions, DeviceGroup, Error, Mode, ModeRequest, Precision, Tensor,
};
use rand::Rng;

fn options(mode: ModeRequest) -> CommOptions {
    CommOptions { mode, ..CommOptions::from_env().unwrap() }
}

/// Uploads `parts`, all-reduces them and checks every member's result against the reference
/// (`reference::all_reduce`): the wire values summed in f64. The GPU sums N wire values in f32
/// in member order, so the error is at most (N-1) roundings, each ≤ 2^-24 of the running sum's
/// magnitude, itself ≤ Σ|wire values|: |got - want| ≤ (N-1)·2^-24·Σ|x_j|. Also checks that all
/// members hold the same bits. Returns member 0's result.
fn check_round(
    group: &DeviceGroup,
    comm: &mut Comm,
    parts: &[Vec<f32>],
    opts: &AllReduceOptions,
    f16_wire: bool,
) -> Vec<f32> {
    let mut tensors: Vec<Tensor> =
        group.members().iter().zip(parts).map(|(m, p)| m.upload_f32(p).unwrap()).collect();
    comm.all_reduce(&mut tensors, opts).unwrap();
    let results: Vec<Vec<f32>> = tensors.iter().map(|t| t.read().unwrap()).collect();
    let n = parts[0].len();
    let reference = reference::all_reduce(parts, &[], f16_wire);
    for (j, r) in results.iter().enumerate() {
        assert_eq!(r.len(), n);
        for (i, (&g, (want, bound))) in r.iter().zip(reference.pairs()).enumerate() {
            assert!(
                (g as f64 - want).abs() <= bound,
                "member {j} element {i} of {n}: got {g} want {want} (bound {bound:e}, mode {}, f16 wire {f16_wire})",
                comm.mode()
            );
        }
        assert!(
            r.iter().map(|v| v.to_bits()).eq(results[0].iter().map(|v| v.to_bits())),
            "member {j} differs bitwise from member 0 ({} elements, mode {})",
            n,
            comm.mode()
        );
    }
    results[0].clone()
}

const THRESHOLD_ELEMS: usize = (1 << 20) / 4;

#[test]
fn sums_match_reference_for_2_3_4_members_at_awkward_sizes() {
    let _s = serial();
    let mut rng = common::rng(1);
    for members in [2, 3, 4] {
        let group = common::logical(members);
        let mut comm = Comm::with_options(&group, options(ModeRequest::Auto)).unwrap();
        // lavapipe has host import and timelines; Mesa 26's also SYNC_FD semaphores, where
        // `auto` prefers SyncFd (measured faster there: docs/DEVICES.md).
        let sync_fd = group
            .members()
            .iter()
            .all(|m| m.adapter().caps.sync_fd_export && m.adapter().caps.sync_fd_import);
        let want = if sync_fd { Mode::SyncFd } else { Mode::HostBridge };
        assert_eq!(comm.mode(), want, "{}", comm.reason());
        for n in [1, 7, 1000, THRESHOLD_ELEMS - 1, THRESHOLD_ELEMS, (1 << 20) + 3] {
            let parts: Vec<Vec<f32>> = (0..members).map(|_| common::random(&mut rng, n)).collect();
            let auto_f16 = n * 4 >= 1 << 20;
            check_round(&group, &mut comm, &parts, &AllReduceOptions::default(), auto_f16);
            if n < 5000 {
                let f16 = AllReduceOptions { precision: Precision::F16, ..Default::default() };
                check_round(&group, &mut comm, &parts, &f16, true);
            } else if auto_f16 {
                let f32 = AllReduceOptions { precision: Precision::F32, ..Default::default() };
                check_round(&group, &mut comm, &parts, &f32, false);
            }
        }
    }
    common::assert_no_validation_errors();
}

#[test]
fn zero_elements_return_at_once() {
    let _s = serial();
    let group = common::logical(2);
    let mut comm = Comm::with_options(&group, options(ModeRequest::Auto)).unwrap();
    let mut t: Vec<Tensor> = group.members().iter().map(|m| m.upload_f32(&[]).unwrap()).collect();
    comm.all_reduce(&mut t, &AllReduceOptions::default()).unwrap();
    assert_eq!(comm.all_reduce_count(), 0, "an empty all-reduce does no work");
    common::assert_no_validation_errors();
}

#[test]
fn thousand_back_to_back_rounds_with_growth_are_all_correct() {
    let _s = serial();
    let mut rng = common::rng(2);
    let group = common::logical(3);
    let mut comm = Comm::with_options(&group, options(ModeRequest::Forced(Mode::HostBridge))).unwrap();
    let mut max_words = 0usize;
    for round in 0..1000 {
        // Mostly small sizes with occasional larger ones, so the slots grow mid-stream (from
        // 4096 words) several times, with both wires.
        let n = match round % 100 {
            17 => 5_000 + round as usize * 40,
            53 => 300_000 + round as usize * 100,
            _ => rng.random_range(1..3000),
        };
        let f16_wire = n * 4 >= 1 << 20;
        max_words = max_words.max(if f16_wire { n.div_ceil(2) } else { n });
        let parts: Vec<Vec<f32>> = (0..3).map(|_| common::random(&mut rng, n)).collect();
        check_round(&group, &mut comm, &parts, &AllReduceOptions::default(), f16_wire);
    }
    assert_eq!(comm.mode(), Mode::HostBridge, "no fallback happened");
    assert!(comm.slot_capacity() as usize >= max_words, "the slots grew to the largest round");
    common::assert_no_validation_errors();
}

#[test]
fn pipelined_rounds_without_reads_in_between() {
    let _s = serial();
    // The decode pattern: many all-reduces and kernels recorded back to back, one read at the
    // end. Each round adds the sum to an accumulator, so every round's result matters.
    let mut rng = common::rng(3);
    let group = common::logical(3);
    let mut comm = Comm::with_options(&group, options(ModeRequest::Forced(Mode::HostBridge))).unwrap();
    let n = 777;
    let mut acc_ref = vec![0f64; n];
    let accs: Vec<Tensor> =
        group.members().iter().map(|m| m.full(&[n], crossgpu::DType::F32, 0.0).unwrap()).collect();
    for _ in 0..60 {
        let parts: Vec<Vec<f32>> = (0..3).map(|_| common::random(&mut rng, n)).collect();
        let mut t: Vec<Tensor> =
            group.members().iter().zip(&parts).map(|(m, p)| m.upload_f32(p).unwrap()).collect();
        comm.all_reduce(&mut t, &AllReduceOptions::default()).unwrap();
        for (m, (a, x)) in group.members().iter().zip(accs.iter().zip(&t)) {
            m.add(a, x).unwrap();
        }
        for i in 0..n {
            // The GPU's f32 round sum, then the f32 accumulation, as the GPU does them.
            let s = parts[0][i] + parts[1][i] + parts[2][i];
            acc_ref[i] = (acc_ref[i] as f32 + s) as f64;
        }
    }
    let results: Vec<Vec<f32>> = accs.iter().map(|t| t.read().unwrap()).collect();
    for r in &results {
        for i in 0..n {
            assert_eq!(r[i], acc_ref[i] as f32, "element {i}");
        }
    }
    common::assert_no_validation_errors();
}

#[test]
fn generic_agrees_bitwise_with_host_bridge_on_the_f32_wire() {
    let _s = serial();
    let mut rng = common::rng(4);
    let group = common::logical(3);
    let mut bridge = Comm::with_options(&group, options(ModeRequest::Forced(Mode::HostBridge))).unwrap();
    let mut generic = Comm::with_options(&group, options(ModeRequest::Forced(Mode::Generic))).unwrap();
    assert_eq!(generic.mode(), Mode::Generic);
    let f32 = AllReduceOptions { precision: Precision::F32, ..Default::default() };
    for n in [1, 999, 70_001] {
        let parts: Vec<Vec<f32>> = (0..3).map(|_| common::random(&mut rng, n)).collect();
        let a = check_round(&group, &mut bridge, &parts, &f32, false);
        let b = check_round(&group, &mut generic, &parts, &f32, false);
        assert!(
            a.iter().map(|v| v.to_bits()).eq(b.iter().map(|v| v.to_bits())),
            "Generic and HostBridge differ at n = {n}"
        );
    }
    common::assert_no_validation_errors();
}

#[test]
fn sync_fd_is_refused_where_the_driver_lacks_it() {
    let _s = serial();
    let group = common::logical(2);
    let has =
        group.members().iter().all(|m| m.adapter().caps.sync_fd_export && m.adapter().caps.sync_fd_import);
    match Comm::with_options(&group, options(ModeRequest::Forced(Mode::SyncFd))) {
        Ok(mut comm) => {
            assert!(has, "SyncFd was granted on a device without SYNC_FD");
            let mut rng = common::rng(5);
            for n in [1, 1001, 300_000] {
                let parts: Vec<Vec<f32>> = (0..2).map(|_| common::random(&mut rng, n)).collect();
                check_round(&group, &mut comm, &parts, &AllReduceOptions::default(), n * 4 >= 1 << 20);
            }
        }
        Err(e) => {
            assert!(!has, "SyncFd refused on a device that has it: {e}");
            assert!(matches!(e, Error::Unsupported(_)), "{e:?}");
            common::skip(Some("sync_fd"), &format!("SyncFd data path: {} has no SYNC_FD semaphore export/import ({e}); tests/sync_fd.rs runs it under Mesa 26's lavapipe", group.members()[0].adapter().driver_info));
        }
    }
    common::assert_no_validation_errors();
}

#[test]
fn a_single_member_falls_back_to_generic_and_loopback_bridge_works() {
    let _s = serial();
    let group = common::logical(1);
    let comm = Comm::with_options(&group, options(ModeRequest::Auto)).unwrap();
    assert_eq!(comm.mode(), Mode::Generic, "auto with one member");
    drop(comm);
    let mut comm = Comm::with_options(&group, options(ModeRequest::Forced(Mode::HostBridge))).unwrap();
    let parts = vec![common::random(&mut common::rng(6), 513)];
    let got = check_round(
        &group,
        &mut comm,
        &parts,
        &AllReduceOptions { precision: Precision::F32, ..Default::default() },
        false,
    );
    assert_eq!(got, parts[0], "a one-member sum is the identity");
    common::assert_no_validation_errors();
}

#[test]
fn zero_contribution_members_contribute_zeros() {
    let _s = serial();
    let mut rng = common::rng(7);
    let group = common::logical(3);
    let mut comm = Comm::with_options(&group, options(ModeRequest::Auto)).unwrap();
    let n = 1234;
    let parts: Vec<Vec<f32>> = (0..3).map(|_| common::random(&mut rng, n)).collect();
    let mut t: Vec<Tensor> =
        group.members().iter().zip(&parts).map(|(m, p)| m.upload_f32(p).unwrap()).collect();
    comm.all_reduce(&mut t, &AllReduceOptions { zero_contribution: vec![1], ..Default::default() }).unwrap();
    for r in t.iter().map(|t| t.read().unwrap()) {
        for i in 0..n {
            assert_eq!(r[i], parts[0][i] + parts[2][i], "element {i}");
        }
    }
    common::assert_no_validation_errors();
}

#[test]
fn bad_input_is_an_error_and_modifies_nothing() {
    let _s = serial();
    let mut rng = common::rng(8);
    let group = common::logical(2);
    let other = common::logical(2);
    let mut comm = Comm::with_options(&group, options(ModeRequest::Auto)).unwrap();
    let a = common::random(&mut rng, 100);
    let b = common::random(&mut rng, 100);
    let ta = group.member(0).unwrap().upload_f32(&a).unwrap();
    let tb = group.member(1).unwrap().upload_f32(&b).unwrap();
    let short = group.member(1).unwrap().upload_f32(&b[..99]).unwrap();
    let half = group.member(1).unwrap().upload(&b, &[100], crossgpu::DType::F16).unwrap();
    let foreign = other.member(1).unwrap().upload_f32(&b).unwrap();
    let swapped_0 = group.member(1).unwrap().upload_f32(&b).unwrap();
    let swapped_1 = group.member(0).unwrap().upload_f32(&a).unwrap();
    let opts = AllReduceOptions::default();

    assert!(matches!(comm.all_reduce(&mut [&ta], &opts), Err(Error::LengthMismatch { .. })));
    assert!(matches!(comm.all_reduce(&mut [&ta, &tb, &tb], &opts), Err(Error::LengthMismatch { .. })));
    assert!(matches!(comm.all_reduce(&mut [&ta, &short], &opts), Err(Error::LengthMismatch { .. })));
    assert!(matches!(comm.all_reduce(&mut [&ta, &half], &opts), Err(Error::DtypeMismatch { .. })));
    assert!(matches!(comm.all_reduce(&mut [&ta, &foreign], &opts), Err(Error::WrongOwner { .. })));
    assert!(matches!(comm.all_reduce(&mut [&swapped_0, &swapped_1], &opts), Err(Error::WrongOwner { .. })));
    let bad_zero = AllReduceOptions { zero_contribution: vec![5], ..Default::default() };
    assert!(matches!(comm.all_reduce(&mut [&ta, &tb], &bad_zero), Err(Error::IndexOutOfRange { .. })));

    assert_eq!(ta.read().unwrap(), a, "a rejected all-reduce left the tensor as it was");
    assert_eq!(tb.read().unwrap(), b);
    assert_eq!(comm.all_reduce_count(), 0);
    // The communicator is still usable.
    comm.all_reduce(&mut [&ta, &tb], &opts).unwrap();
    let sum: Vec<f32> = a.iter().zip(&b).map(|(x, y)| x + y).collect();
    assert_eq!(ta.read().unwrap(), sum);
    common::assert_no_validation_errors();
}

#[test]
fn all_reduces_larger_than_one_binding_run_in_chunks() {
    let _s = serial();
    // Four members' f32 slots for one half must fit one storage binding (128 MiB on lavapipe),
    // so an f32-wire all-reduce of more than limit / 16 bytes per member runs in chunks.
    let group = common::logical(4);
    let mut comm = Comm::with_options(&group, options(ModeRequest::Forced(Mode::HostBridge))).unwrap();
    // The smallest member's limit (members may be on different adapters).
    let limit =
        group.members().iter().map(|m| m.adapter().caps.max_storage_buffer_range).min().unwrap() as usize;
    let n = limit / 16 + 12_345; // words per member region: limit / 4 bytes / 4 members
    let mut rng = common::rng(10);
    let parts: Vec<Vec<f32>> = (0..4).map(|_| common::random(&mut rng, n)).collect();
    let f32 = AllReduceOptions { precision: Precision::F32, ..Default::default() };
    check_round(&group, &mut comm, &parts, &f32, false);
    assert!((comm.slot_capacity() as usize) < n, "the slots are capped below the payload, so it was chunked");
    assert_eq!(comm.mode(), Mode::HostBridge);
    common::assert_no_validation_errors();
}

#[test]
fn members_sharing_one_queue_reduce_correctly() {
    let _s = serial();
    // `0/3`: three members on one VkDevice and one queue, each with its own stream, buffers,
    // semaphores and slot imports; their submissions interleave on the queue in round order.
    let mut rng = common::rng(11);
    let group = common::group("0/3");
    assert_eq!(group.len(), 3);
    let mut comm = Comm::with_options(&group, options(ModeRequest::Forced(Mode::HostBridge))).unwrap();
    for round in 0..200 {
        let n = [1, 77, 4096, 300_000][round % 4];
        let parts: Vec<Vec<f32>> = (0..3).map(|_| common::random(&mut rng, n)).collect();
        check_round(&group, &mut comm, &parts, &AllReduceOptions::default(), n * 4 >= 1 << 20);
    }
    common::assert_no_validation_errors();
}

#[test]
fn kernel_phase_a_agrees_bitwise_with_the_copy_engine() {
    let _s = serial();
    // `phase_a_kernel_bytes`: up to that wire size, phase A stores into the host slot from a
    // kernel (copy or f16 conversion) instead of the copy engine. Every threshold must give the
    // same bits, in both slot halves, on both wires, as the slots grow, with rounds below and
    // above the threshold alternating (sizes ascend, with small ones between).
    let mut rng = common::rng(12);
    for members in [2, 3, 4] {
        let group = common::logical(members);
        let bridge = options(ModeRequest::Forced(Mode::HostBridge));
        let mut comms: Vec<(&str, Comm)> = [
            ("copy engine always", CommOptions { phase_a_kernel_bytes: 0, ..bridge.clone() }),
            ("kernel up to 4 KiB", CommOptions { phase_a_kernel_bytes: 4096, ..bridge.clone() }),
            ("kernel always", CommOptions { phase_a_kernel_bytes: u64::MAX, ..bridge }),
        ]
        .into_iter()
        .map(|(name, o)| (name, Comm::with_options(&group, o).unwrap()))
        .collect();
        for (k, n) in [1, 1023, 1024, 1025, 5000, 3, 70_001, 262_147, 2, 300_001].into_iter().enumerate() {
            let parts: Vec<Vec<f32>> = (0..members).map(|_| common::random(&mut rng, n)).collect();
            let precision = if k % 2 == 0 { Precision::F32 } else { Precision::F16 };
            let opts = AllReduceOptions { precision, ..Default::default() };
            let f16 = precision == Precision::F16;
            let results: Vec<(&str, Vec<f32>)> = comms
                .iter_mut()
                .map(|(name, c)| (*name, check_round(&group, c, &parts, &opts, f16)))
                .collect();
            for (name, r) in &results[1..] {
                assert!(
                    r.iter().map(|v| v.to_bits()).eq(results[0].1.iter().map(|v| v.to_bits())),
                    "{members} members, n = {n}, {precision:?}: '{name}' differs from '{}'",
                    results[0].0
                );
            }
        }
        assert!(comms.iter().all(|(_, c)| c.mode() == Mode::HostBridge));
    }
    common::assert_no_validation_errors();
}

#[test]
fn members_sharing_a_queue_submit_together_with_the_same_results() {
    let _s = serial();
    // With `joint_submit`, members that share a queue submit each phase as one batch. Pipelined
    // rounds (nothing read between them, the decode pattern) on `0/3` (one queue for all) and
    // `0,0/2` (one member alone, two sharing a queue), on both wires (phase B of f16-wire rounds
    // is submitted at once, also as one batch), must give exactly the CPU's sums, joint or not.
    for spec in ["0/3", "0,0/2"] {
        let group = common::group(spec);
        for joint in [true, false] {
            let mut rng = common::rng(21);
            let opts = CommOptions { joint_submit: joint, ..options(ModeRequest::Forced(Mode::HostBridge)) };
            let mut comm = Comm::with_options(&group, opts).unwrap();
            let n = 5001;
            let accs: Vec<Tensor> =
                group.members().iter().map(|m| m.full(&[n], crossgpu::DType::F32, 0.0).unwrap()).collect();
            let mut acc_ref = vec![0f32; n];
            for round in 0..40 {
                let f16_wire = round % 3 == 1;
                let parts: Vec<Vec<f32>> = (0..3).map(|_| common::random(&mut rng, n)).collect();
                let mut t: Vec<Tensor> =
                    group.members().iter().zip(&parts).map(|(m, p)| m.upload_f32(p).unwrap()).collect();
                let precision = if f16_wire { Precision::F16 } else { Precision::F32 };
                comm.all_reduce(&mut t, &AllReduceOptions { precision, ..Default::default() }).unwrap();
                for (m, (a, x)) in group.members().iter().zip(accs.iter().zip(&t)) {
                    m.add(a, x).unwrap();
                }
                for i in 0..n {
                    // The GPU adds the wire values in member order in f32, then accumulates.
                    let s = parts.iter().fold(0f32, |s, p| s + wire(p[i], f16_wire) as f32);
                    acc_ref[i] += s;
                }
            }
            for (j, a) in accs.iter().enumerate() {
                let got = a.read().unwrap();
                for i in 0..n {
                    assert_eq!(
                        got[i].to_bits(),
                        acc_ref[i].to_bits(),
                        "{spec}, joint {joint}: member {j} element {i}: {} vs {}",
                        got[i],
                        acc_ref[i]
                    );
                }
            }
        }
    }
    common::assert_no_validation_errors();
}
