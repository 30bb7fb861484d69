//! The SyncFd all-reduce (members release each other through SYNC_FD payloads, no host bridge)
//! on a driver that has SYNC_FD semaphores: Mesa 26's lavapipe, which `./dev.sh test` runs these
//! tests under (`scripts/newer-lavapipe.sh`). Debian 12's lavapipe has none: there the tests
//! skip, saying so; under the newer lavapipe (CROSSGPU_TEST_WRAPPER set) a refusal fails them.
//! Bitwise equal to HostBridge on both wires, within the f64 bound, over many rounds with
//! growth, no file descriptor left behind, and a failed import is an error that poisons the
//! communicator without a hang. The validation layer is on.

use crate::common;

use crate::common::reference;
use crossgpu::{
    AllReduceOptions, Comm, CommOptions, DeviceGroup, Error, Mode, ModeRequest, Precision, Tensor,
};

fn options(mode: Mode) -> CommOptions {
    CommOptions { mode: ModeRequest::Forced(mode), ..CommOptions::from_env().unwrap() }
}

/// A SyncFd communicator over `group`, or `None` (said loudly) where the driver has no SYNC_FD.
fn sync_fd(group: &DeviceGroup) -> Option<Comm> {
    match Comm::with_options(group, options(Mode::SyncFd)) {
        Ok(c) => Some(c),
        Err(e @ (Error::Unsupported(_) | Error::MissingExtension { .. })) => {
            if std::env::var_os("CROSSGPU_TEST_WRAPPER").is_some() {
                panic!("SyncFd refused under scripts/newer-lavapipe.sh, whose lavapipe has SYNC_FD: {e}");
            }
            common::skip(
                Some("sync_fd"),
                &format!(
                    "SyncFd: {} has no SYNC_FD semaphores ({e}); ./dev.sh test runs this under \
                     Mesa 26's lavapipe (scripts/newer-lavapipe.sh)",
                    group.members()[0].adapter().driver_info
                ),
            );
            None
        }
        Err(e) => panic!("SyncFd over {} members: {e}", group.len()),
    }
}

fn upload(group: &DeviceGroup, parts: &[Vec<f32>]) -> Vec<Tensor> {
    group.members().iter().zip(parts).map(|(m, p)| m.upload_f32(p).unwrap()).collect()
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// Every member's result within the f64 bound of the wire values' sum, and all bitwise equal;
/// returns member 0's.
fn check(what: &str, tensors: &[Tensor], parts: &[Vec<f32>], f16_wire: bool) -> Vec<f32> {
    let want = reference::all_reduce(parts, &[], f16_wire);
    let results: Vec<Vec<f32>> = tensors.iter().map(|t| t.read().unwrap()).collect();
    for (j, r) in results.iter().enumerate() {
        for (i, (&g, (w, bound))) in r.iter().zip(want.pairs()).enumerate() {
            assert!((g as f64 - w).abs() <= bound, "{what}: member {j} element {i}: {g} vs {w} ± {bound}");
        }
        assert_eq!(bits(r), bits(&results[0]), "{what}: member {j} differs from member 0");
    }
    results[0].clone()
}

#[test]
fn sync_fd_equals_host_bridge_bitwise_for_2_3_4_members() {
    let _s = common::serial();
    let mut rng = common::rng(41);
    for members in [2, 3, 4] {
        let group = common::logical(members);
        let Some(mut sync) = sync_fd(&group) else { return };
        assert_eq!(sync.mode(), Mode::SyncFd, "{}", sync.reason());
        let mut bridge = Comm::with_options(&group, options(Mode::HostBridge)).unwrap();
        for (precision, f16_wire) in [(Precision::F32, false), (Precision::F16, true)] {
            let opts = AllReduceOptions { precision, ..Default::default() };
            for n in [1, 7, 1001, 65_537, 300_003] {
                let parts: Vec<Vec<f32>> = (0..members).map(|_| common::random(&mut rng, n)).collect();
                let what = format!("{members} members, n = {n}, f16 wire {f16_wire}");
                let mut a = upload(&group, &parts);
                sync.all_reduce(&mut a, &opts).unwrap();
                let got = check(&format!("SyncFd, {what}"), &a, &parts, f16_wire);
                let mut b = upload(&group, &parts);
                bridge.all_reduce(&mut b, &opts).unwrap();
                let want = check(&format!("HostBridge, {what}"), &b, &parts, f16_wire);
                assert_eq!(bits(&got), bits(&want), "{what}: SyncFd vs HostBridge");
            }
        }
    }
    common::assert_no_validation_errors();
}

/// Open file descriptors of this process.
fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map(|d| d.count()).unwrap_or(0)
}

#[test]
fn thousand_rounds_with_growth_leave_no_file_descriptor_behind() {
    let _s = common::serial();
    let mut rng = common::rng(42);
    let group = common::logical(3);
    let before = open_fds();
    {
        let Some(mut comm) = sync_fd(&group) else { return };
        let opts = AllReduceOptions { precision: Precision::F32, ..Default::default() };
        // Sizes rise past the first slot capacity (4096 words) and fall again.
        let sizes = |k: usize| if k < 500 { 1 + k * 97 } else { 1 + (999 - k) * 97 };
        let mut pending: Vec<(Vec<Tensor>, Vec<Vec<f32>>, usize)> = Vec::new();
        for k in 0..1000 {
            let n = sizes(k);
            let parts: Vec<Vec<f32>> = (0..3).map(|_| common::random(&mut rng, n)).collect();
            let mut t = upload(&group, &parts);
            comm.all_reduce(&mut t, &opts).unwrap();
            // Every 50th round is read and checked; the others run back to back.
            if k % 50 == 49 {
                pending.push((t, parts, k));
                for (t, parts, k) in pending.drain(..) {
                    check(&format!("round {k}, n = {}", parts[0].len()), &t, &parts, false);
                }
            }
        }
        assert!(comm.slot_capacity() > 4096, "the slots grew");
        group.synchronize().unwrap();
    }
    let after = open_fds();
    assert_eq!(after, before, "open file descriptors before and after 1000 SyncFd rounds");
    common::assert_no_validation_errors();
}

#[test]
fn a_failed_sync_fd_import_poisons_the_comm_and_nothing_hangs() {
    let _s = common::serial();
    let mut rng = common::rng(43);
    let group = common::logical(2);
    let Some(mut comm) = sync_fd(&group) else { return };
    let opts = AllReduceOptions { precision: Precision::F32, ..Default::default() };
    let parts: Vec<Vec<f32>> = (0..2).map(|_| common::random(&mut rng, 1000)).collect();
    let mut t = upload(&group, &parts);
    comm.all_reduce(&mut t, &opts).unwrap();
    check("before the fault", &t, &parts, false);
    let bystander_values = common::random(&mut rng, 333);
    let bystander = group.members()[1].upload_f32(&bystander_values).unwrap();

    comm.inject_sync_fd_import_failure();
    let mut t = upload(&group, &parts);
    let e = comm.all_reduce(&mut t, &opts).unwrap_err();
    assert!(e.to_string().contains("vkImportSemaphoreFdKHR"), "names the import: {e}");
    let later = comm.all_reduce(&mut t, &opts).unwrap_err();
    assert!(matches!(later, Error::Poisoned(..)), "later calls are refused: {later:?}");
    // The members still work and nothing else was touched.
    common::assert_bits("bystander", &bystander.read().unwrap(), &bystander_values);
    drop(comm);
    group.synchronize().unwrap();
    // A new communicator over the same members works.
    let mut fresh = Comm::with_options(&group, options(Mode::SyncFd)).unwrap();
    let mut t = upload(&group, &parts);
    fresh.all_reduce(&mut t, &opts).unwrap();
    check("a new communicator after the fault", &t, &parts, false);
    common::assert_no_validation_errors();
}
