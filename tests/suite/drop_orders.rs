//! Dropping the tensors, the `Comm` and the group in every order (all 6 permutations), with a
//! round in flight, after the Comm was poisoned by a timeout, and after a device loss: nothing
//! crashes or hangs, the validation layer reports nothing (it reports objects left alive at
//! device destruction), and every live Vulkan object is freed (`crossgpu::live_objects()` returns
//! to its starting counts). Its own test binary, and one test at a time, because the counters
//! are process-wide.

use crate::common;

use std::time::Duration;

use crate::common::serial;
use crossgpu::{
    AllReduceOptions, Comm, CommOptions, DeviceGroup, Error, Mode, ModeRequest, Precision, Tensor,
};

#[derive(Debug, Clone, Copy, PartialEq)]
enum Item {
    Tensors,
    Comm,
    Group,
}

const ORDERS: [[Item; 3]; 6] = {
    use Item::*;
    [
        [Tensors, Comm, Group],
        [Tensors, Group, Comm],
        [Comm, Tensors, Group],
        [Comm, Group, Tensors],
        [Group, Tensors, Comm],
        [Group, Comm, Tensors],
    ]
};

#[derive(Debug, Clone, Copy, PartialEq)]
enum State {
    /// Two rounds in flight: an f16-wire one (phase B submitted) and an f32-wire one (phase B
    /// not yet submitted), nothing read.
    InFlight,
    /// The bridge timed out on a withheld release and the Comm is poisoned.
    Poisoned,
    /// Member 1's device was lost and an all-reduce failed on it.
    DeviceLost,
}

const N: usize = 3000;

fn parts() -> Vec<Vec<f32>> {
    let mut rng = common::rng(5);
    (0..2).map(|_| common::random(&mut rng, N)).collect()
}

/// Builds the state, drops the three items in `order`, and checks the counters.
fn scenario(mode: Mode, state: State, order: [Item; 3]) {
    let what = format!("{mode}, {state:?}, order {order:?}");
    let before = crossgpu::live_objects();
    let group = common::logical(2);
    let timeout = if state == State::Poisoned { Duration::from_millis(200) } else { Duration::from_secs(60) };
    let opts = CommOptions { mode: ModeRequest::Forced(mode), timeout, ..CommOptions::from_env().unwrap() };
    let mut comm = Comm::with_options(&group, opts).unwrap();
    let during = crossgpu::live_objects();
    assert!(during.recorders >= before.recorders + 2 && during.devices > before.devices, "{what}: counted");
    let p = parts();
    let mut t: Vec<Tensor> = group.members().iter().zip(&p).map(|(m, p)| m.upload_f32(p).unwrap()).collect();
    let f16 = AllReduceOptions { precision: Precision::F16, ..Default::default() };
    let f32 = AllReduceOptions { precision: Precision::F32, ..Default::default() };
    // What the tensors hold after both rounds, when they complete: the f16-wire sum s (f32 sum
    // of the f16-rounded parts, in every mode: Generic rounds to the wire too), then s + s.
    let s: Vec<f32> = (0..N)
        .map(|i| {
            let w = |v: f32| crossgpu::f16_saturating(v).to_f32();
            w(p[0][i]) + w(p[1][i])
        })
        .collect();
    let mut expect_sum = false;
    match state {
        State::InFlight => {
            comm.all_reduce(&mut t, &f16).unwrap();
            comm.all_reduce(&mut t, &f32).unwrap();
            expect_sum = true;
        }
        State::Poisoned => {
            comm.withhold_release(1);
            comm.all_reduce(&mut t, &f32).unwrap();
            // Past the bridge's bound, then a growth, which waits for round 1 and fails.
            std::thread::sleep(Duration::from_millis(400));
            let big: Vec<Tensor> = group
                .members()
                .iter()
                .map(|m| m.full(&[20_000], crossgpu::DType::F32, 1.0).unwrap())
                .collect();
            let mut big = big;
            let e = comm.all_reduce(&mut big, &f32).unwrap_err();
            assert!(matches!(e, Error::Timeout { .. }), "{what}: {e:?}");
            assert!(matches!(comm.all_reduce(&mut t, &f32), Err(Error::Poisoned(..))), "{what}");
        }
        State::DeviceLost => {
            comm.all_reduce(&mut t, &f32).unwrap();
            group.members()[1].inject_device_lost();
            let e = comm.all_reduce(&mut t, &f32).unwrap_err();
            assert!(matches!(e, Error::DeviceLost { .. }), "{what}: {e:?}");
        }
    }
    let (mut t, mut comm, mut group) = (Some(t), Some(comm), Some(group));
    for (k, item) in order.iter().enumerate() {
        match item {
            Item::Tensors => {
                let t = t.take().unwrap();
                // Tensors dropped last have outlived the Comm and the group: their rounds
                // completed, with the right values.
                if k == 2 && expect_sum {
                    for (j, x) in t.iter().enumerate() {
                        let r = x.read().unwrap();
                        for i in 0..N {
                            assert_eq!(r[i], s[i] + s[i], "{what}: member {j} element {i}");
                        }
                    }
                }
                drop(t);
            }
            Item::Comm => drop(comm.take()),
            Item::Group => drop(group.take()),
        }
    }
    let after = crossgpu::live_objects();
    assert_eq!(before, after, "{what}: live Vulkan objects before and after");
    common::assert_no_validation_errors();
}

fn all_orders(modes: &[Mode], state: State) {
    let _s = serial();
    // Open and drop one group first, so that whatever the process keeps (the instance) exists
    // before the first count.
    drop(common::logical(1));
    for &mode in modes {
        for order in ORDERS {
            scenario(mode, state, order);
        }
    }
    common::assert_no_validation_errors();
}

#[test]
fn drop_orders_with_rounds_in_flight_free_everything() {
    all_orders(&[Mode::HostBridge, Mode::Generic], State::InFlight);
}

#[test]
fn drop_orders_after_a_timeout_poisoned_the_comm_free_everything() {
    all_orders(&[Mode::HostBridge], State::Poisoned);
}

#[test]
fn drop_orders_after_a_device_loss_free_everything() {
    all_orders(&[Mode::HostBridge, Mode::Generic], State::DeviceLost);
}

/// The group alone: tensors of a dropped group, and a group that never had a Comm.
#[test]
fn a_group_and_its_tensors_in_both_orders_free_everything() {
    let _s = serial();
    drop(common::logical(1));
    for tensors_first in [true, false] {
        let before = crossgpu::live_objects();
        let group: DeviceGroup = common::logical(2);
        let t: Vec<Tensor> =
            group.members().iter().map(|m| m.full(&[100], crossgpu::DType::F32, 2.0).unwrap()).collect();
        if tensors_first {
            drop(t);
            drop(group);
        } else {
            drop(group);
            assert_eq!(t[1].read().unwrap(), vec![2.0; 100], "a tensor outlives its group");
            drop(t);
        }
        assert_eq!(crossgpu::live_objects(), before, "tensors first: {tensors_first}");
    }
    common::assert_no_validation_errors();
}
