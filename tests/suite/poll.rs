//! DevicePoll (`CROSSGPU_ALLREDUCE=poll`) on lavapipe: several VkDevices, bitwise equal to
//! HostBridge on the same inputs and within the f64 bound, many rounds in one submit, growth,
//! refusals where a polling kernel could wait for work behind it, and a member that never
//! arrives. The validation layer is on; any error it reports fails the test.

use crate::common;

// One test at a time (`serial`): every polling kernel holds one of llvmpipe's threads, and
// tests running side by side would starve each other's relays and peers (not what is tested
// here).
use crate::common::{reference, serial};
use crossgpu::{
    AllReduceOptions, Comm, CommOptions, DeviceGroup, Error, Mode, ModeRequest, Precision, Tensor,
};

fn options(mode: Mode) -> CommOptions {
    CommOptions { mode: ModeRequest::Forced(mode), ..CommOptions::from_env().unwrap() }
}

/// A DevicePoll communicator over `group`, or `None` (said loudly) where it is refused: where
/// llvmpipe has fewer threads than members (`./dev.sh test` sets LP_NUM_THREADS so that it
/// never does), or, on the GPU machine's layouts (`CROSSGPU_TEST_ADAPTERS`), where members
/// land on one GPU twice.
fn poll_comm(group: &DeviceGroup, opts: CommOptions) -> Option<Comm> {
    match Comm::with_options(group, opts) {
        Err(Error::Unsupported(why)) if common::device_poll_refused_by_layout(&why) => {
            common::skip(Some("poll"), &format!("DevicePoll over {} members: {why}", group.len()));
            None
        }
        r => Some(r.unwrap()),
    }
}

/// Uploads `parts` to the members, all-reduces each set with `comm` (in one submit per member
/// when `rounds` > 1: nothing is read until the end) and returns every member's results.
fn reduce_rounds(
    group: &DeviceGroup,
    comm: &mut Comm,
    rounds: &[Vec<Vec<f32>>],
    opts: &AllReduceOptions,
) -> Vec<Vec<Vec<u32>>> {
    let mut all: Vec<Vec<Tensor>> = Vec::new();
    for parts in rounds {
        let mut tensors: Vec<Tensor> =
            group.members().iter().zip(parts).map(|(m, p)| m.upload_f32(p).unwrap()).collect();
        comm.all_reduce(&mut tensors, opts).unwrap();
        all.push(tensors);
    }
    all.iter()
        .map(|ts| ts.iter().map(|t| t.read().unwrap().iter().map(|v| v.to_bits()).collect()).collect())
        .collect()
}

/// Checks `got` (one round's results per member) against the f64 sum of the wire values
/// (`reference::all_reduce`): (N-1) f32 roundings of at most 2^-24 of Σ|x_j| each; and that all
/// members agree bitwise.
fn check_bound(parts: &[Vec<f32>], got: &[Vec<u32>], f16_wire: bool) {
    let reference = reference::all_reduce(parts, &[], f16_wire);
    for (j, r) in got.iter().enumerate() {
        assert_eq!(r, &got[0], "member {j} differs bitwise from member 0");
        for (i, &bits) in r.iter().enumerate() {
            let (want, bound) = (reference.v[i], reference.e[i]);
            let v = f32::from_bits(bits) as f64;
            assert!((v - want).abs() <= bound, "element {i}: got {v} want {want} (bound {bound:e})");
        }
    }
}

#[test]
fn bitwise_equal_to_host_bridge_for_2_3_4_members() {
    let _s = serial();
    let mut rng = common::rng(41);
    for members in [2, 3, 4] {
        let group = common::logical(members);
        let Some(mut poll) = poll_comm(&group, options(Mode::DevicePoll)) else { continue };
        assert_eq!(poll.mode(), Mode::DevicePoll, "{}", poll.reason());
        let mut bridge = Comm::with_options(&group, options(Mode::HostBridge)).unwrap();
        for (n, precision) in [
            (1, Precision::F32),
            (7, Precision::F16),
            (1000, Precision::F32),
            (4099, Precision::F16),
            (70_001, Precision::F32),
        ] {
            let rounds: Vec<Vec<Vec<f32>>> =
                (0..3).map(|_| (0..members).map(|_| common::random(&mut rng, n)).collect()).collect();
            let opts = AllReduceOptions { precision, ..Default::default() };
            let a = reduce_rounds(&group, &mut poll, &rounds, &opts);
            let b = reduce_rounds(&group, &mut bridge, &rounds, &opts);
            assert_eq!(a, b, "{members} members, n = {n}, {precision:?}: DevicePoll differs from HostBridge");
            for (parts, got) in rounds.iter().zip(&a) {
                check_bound(parts, got, precision == Precision::F16);
            }
        }
    }
    common::assert_no_validation_errors();
}

#[test]
fn thousand_rounds_with_growth_and_shrink_in_few_submits() {
    let _s = serial();
    let mut rng = common::rng(42);
    let group = common::logical(3);
    let Some(mut comm) = poll_comm(&group, options(Mode::DevicePoll)) else { return };
    let submit_count = || group.members().iter().map(|m| m.stats().submits).sum::<u64>();
    let mut submits = 0;
    let mut since = submit_count();
    // Sizes rise past the first slot capacity (4096 words) and fall again; f16 rounds go out at
    // once, f32 rounds ride in one command buffer until the ring is used up.
    let sizes = [5, 4097, 3, 20_000, 17, 1000, 9000, 2];
    let mut pending: Vec<(Vec<Vec<f32>>, Vec<Tensor>, bool)> = Vec::new();
    for round in 0..1000 {
        let n = sizes[round % sizes.len()];
        let f16 = round % 7 == 3;
        let parts: Vec<Vec<f32>> = (0..3).map(|_| common::random(&mut rng, n)).collect();
        let mut tensors: Vec<Tensor> =
            group.members().iter().zip(&parts).map(|(m, p)| m.upload_f32(p).unwrap()).collect();
        let precision = if f16 { Precision::F16 } else { Precision::F32 };
        comm.all_reduce(&mut tensors, &AllReduceOptions { precision, ..Default::default() }).unwrap();
        pending.push((parts, tensors, f16));
        // Read back every 50 rounds: many rounds ride in one submit in between.
        if pending.len() == 50 {
            submits += submit_count() - since;
            for (parts, tensors, f16) in pending.drain(..) {
                let got: Vec<Vec<u32>> =
                    tensors.iter().map(|t| t.read().unwrap().iter().map(|v| v.to_bits()).collect()).collect();
                check_bound(&parts, &got, f16);
            }
            since = submit_count();
        }
    }
    assert!(comm.slot_capacity() >= 20_000, "the slots grew: {}", comm.slot_capacity());
    // Uploads submit (one per tensor) and f16 rounds go out at once; f32 rounds add no submit
    // of their own.
    // HostBridge makes at least one per member and round (3000 here).
    assert!(submits < 1000, "{submits} submits for 1000 rounds on 3 members");
    eprintln!("1000 DevicePoll rounds on 3 members: {submits} submits besides read-backs");
    common::assert_no_validation_errors();
}

#[test]
fn refused_where_a_wait_could_block_its_own_queue() {
    let _s = serial();
    // Members sharing one queue of a VkDevice (lavapipe has one queue: no stand-ins on
    // separate queues here; the same check refuses those).
    let group = common::group("0/2");
    match Comm::with_options(&group, options(Mode::DevicePoll)) {
        Err(Error::Unsupported(why)) => {
            assert!(why.contains("CROSSGPU_ALLREDUCE=poll") && why.contains("share a VkDevice"), "{why}")
        }
        other => panic!("0/2: DevicePoll must be refused, got {:?}", other.map(|c| c.mode())),
    }
    // One member.
    let group = common::logical(1);
    match Comm::with_options(&group, options(Mode::DevicePoll)) {
        Err(Error::Unsupported(why)) => assert!(why.contains("at least two members"), "{why}"),
        other => panic!("one member: DevicePoll must be refused, got {:?}", other.map(|c| c.mode())),
    }
    // `auto` never picks it.
    let group = common::logical(2);
    let comm =
        Comm::with_options(&group, CommOptions { mode: ModeRequest::Auto, ..options(Mode::DevicePoll) })
            .unwrap();
    assert_ne!(comm.mode(), Mode::DevicePoll, "auto picks DevicePoll only where measured faster");
}

#[test]
fn a_member_that_never_arrives_is_an_error_not_a_hang() {
    let _s = serial();
    let mut rng = common::rng(43);
    let group = common::logical(2);
    let opts = CommOptions { timeout: std::time::Duration::from_millis(2000), ..options(Mode::DevicePoll) };
    let Some(mut comm) = poll_comm(&group, opts) else { return };
    assert!(
        comm.poll_bound().is_some_and(|b| b <= std::time::Duration::from_millis(2000)),
        "{:?}",
        comm.poll_bound()
    );
    // One good round first.
    let parts: Vec<Vec<f32>> = (0..2).map(|_| common::random(&mut rng, 333)).collect();
    let got = reduce_rounds(&group, &mut comm, std::slice::from_ref(&parts), &AllReduceOptions::default());
    check_bound(&parts, &got[0], false);
    // A bystander tensor on member 0 that the failed round must not touch.
    let keep = common::random(&mut rng, 100);
    let bystander = group.members()[0].upload_f32(&keep).unwrap();
    comm.withhold_release(1);
    let mut tensors: Vec<Tensor> =
        group.members().iter().zip(&parts).map(|(m, p)| m.upload_f32(p).unwrap()).collect();
    comm.all_reduce(&mut tensors, &AllReduceOptions::default()).unwrap();
    let err = group.members()[0].synchronize().expect_err("the wait ran out");
    let msg = err.to_string();
    assert!(matches!(err, Error::Timeout { .. }), "{msg}");
    assert!(
        msg.contains("member 1") && msg.contains("did not arrive"),
        "names the member and says why: {msg}"
    );
    assert!(msg.contains("round 2"), "names the round: {msg}");
    match comm.all_reduce(&mut tensors, &AllReduceOptions::default()) {
        Err(Error::Poisoned(..)) | Err(Error::Timeout { .. }) => {}
        other => panic!("the communicator must refuse further work: {other:?}"),
    }
    assert_eq!(bystander.read().unwrap(), keep, "no other tensor touched");
    drop(comm);
    // The members work on, and a new communicator over them does too.
    let mut comm = poll_comm(&group, options(Mode::DevicePoll)).expect("refused once, not twice");
    let got = reduce_rounds(&group, &mut comm, std::slice::from_ref(&parts), &AllReduceOptions::default());
    check_bound(&parts, &got[0], false);
    common::assert_no_validation_errors();
}

/// On llvmpipe a DevicePoll wait gives up after about a second whatever `CROSSGPU_TIMEOUT_MS`
/// says (its loops end after 65,535 trips and a wait is a bounded chain of dispatches):
/// `poll_bound` and `reason` say so, instead of promising the timeout.
#[test]
fn the_short_wait_on_llvmpipe_is_said() {
    let _s = serial();
    let group = common::logical(2);
    if group.members()[0].adapter().driver_id != "MESA_LLVMPIPE" {
        common::skip(None, "the members are not lavapipe: their waits last the timeout");
        return;
    }
    let opts = CommOptions { timeout: std::time::Duration::from_secs(60), ..options(Mode::DevicePoll) };
    let Some(comm) = poll_comm(&group, opts) else { return };
    let bound = comm.poll_bound().expect("DevicePoll");
    assert!(bound < std::time::Duration::from_secs(10), "{bound:?}");
    assert!(
        comm.reason().contains("gives up after about") && comm.reason().contains("65,535"),
        "{}",
        comm.reason()
    );
}
