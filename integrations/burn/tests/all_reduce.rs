//! `Comm::all_reduce` of burn tensors on two members (lavapipe devices unless
//! `CROSSGPU_TEST_ADAPTERS` says otherwise): random inputs at awkward shapes over many rounds,
//! each sum checked bitwise against the f32 sum in member order computed on the host, within
//! the f64 reference's bound, and bitwise across members; ordered with burn's own operations;
//! tensors that share memory left unchanged; every refused input refused before any work.

mod common;

use burn::tensor::{DType, Device, Tensor, TensorData};
use crossgpu_burn::{Comm, Error};

fn tensor<const D: usize>(values: &[f32], shape: [usize; D], device: &Device) -> Tensor<D> {
    Tensor::from_data(TensorData::new(values.to_vec(), shape), device)
}

fn read<const D: usize>(t: &Tensor<D>) -> Vec<f32> {
    t.to_data().try_to_vec::<f32>().expect("f32 data")
}

/// Checks `got` (one result per member) against the members' `inputs`: bitwise the f32 sum in
/// member order, within the bound of that sum against the exact (f64) one, bitwise equal
/// across members.
fn check_sums(inputs: &[Vec<f32>], got: &[Vec<f32>], what: &str) {
    let n = inputs.len();
    let u = f64::from(f32::EPSILON) / 2.0;
    for (m, g) in got.iter().enumerate() {
        assert_eq!(g.len(), inputs[0].len(), "{what}: member {m}'s length");
        assert!(
            g.iter().zip(&got[0]).all(|(a, b)| a.to_bits() == b.to_bits()),
            "{what}: member {m}'s sum differs from member 0's"
        );
    }
    for i in 0..inputs[0].len() {
        let f32_sum = inputs.iter().skip(1).fold(inputs[0][i], |s, x| s + x[i]);
        assert_eq!(
            got[0][i].to_bits(),
            f32_sum.to_bits(),
            "{what}: element {i}: {} vs the f32 sum {f32_sum}",
            got[0][i]
        );
        let exact: f64 = inputs.iter().map(|x| f64::from(x[i])).sum();
        let abs: f64 = inputs.iter().map(|x| f64::from(x[i]).abs()).sum();
        let bound = (n as f64 - 1.0) * u * abs * (1.0 + 1e-6);
        assert!(
            (f64::from(got[0][i]) - exact).abs() <= bound,
            "{what}: element {i}: {} vs exact {exact} (bound {bound})",
            got[0][i]
        );
    }
}

#[test]
fn random_tensors_of_awkward_shapes_sum_over_many_rounds() {
    let mut comm = common::comm();
    let devices = comm.devices();
    let n = comm.len();
    let copied = comm.copied_tensors();
    let shapes: [&[usize]; 6] = [&[1], &[3], &[1023], &[37, 61], &[5, 7, 11], &[4099]];
    for round in 0..120u64 {
        let shape = shapes[round as usize % shapes.len()];
        let len: usize = shape.iter().product();
        let inputs: Vec<Vec<f32>> = (0..n).map(|m| common::random(round * 16 + m as u64, len)).collect();
        let got: Vec<Vec<f32>> = match shape.len() {
            1 => {
                let ts = inputs.iter().zip(&devices).map(|(x, d)| tensor(x, [shape[0]], d)).collect();
                comm.all_reduce(ts).expect("all_reduce").iter().map(read).collect()
            }
            2 => {
                let ts =
                    inputs.iter().zip(&devices).map(|(x, d)| tensor(x, [shape[0], shape[1]], d)).collect();
                comm.all_reduce(ts).expect("all_reduce").iter().map(read).collect()
            }
            _ => {
                let ts = inputs
                    .iter()
                    .zip(&devices)
                    .map(|(x, d)| tensor(x, [shape[0], shape[1], shape[2]], d))
                    .collect();
                comm.all_reduce(ts).expect("all_reduce").iter().map(read).collect()
            }
        };
        check_sums(&inputs, &got, &format!("round {round}, shape {shape:?}"));
    }
    // Tensors no other handle shares are summed in their own memory.
    assert_eq!(comm.copied_tensors(), copied, "an owned tensor was copied");
    common::finish(&mut comm);
}

#[test]
fn sixty_four_mebibytes_sum() {
    let mut comm = common::comm();
    let devices = comm.devices();
    let len = 16 << 20;
    let inputs: Vec<Vec<f32>> = (0..comm.len()).map(|m| common::random(9000 + m as u64, len)).collect();
    let ts = inputs.iter().zip(&devices).map(|(x, d)| tensor(x, [len], d)).collect();
    let got: Vec<Vec<f32>> = comm.all_reduce(ts).expect("all_reduce").iter().map(read).collect();
    check_sums(&inputs, &got, "64 MiB");
    common::finish(&mut comm);
}

/// burn work queued before the all-reduce is summed, burn work queued after sees the sum, over
/// rounds that never wait in between (a race shows as a wrong element in a later round).
#[test]
fn ordered_with_burns_own_work() {
    let mut comm = common::comm();
    let devices = comm.devices();
    let n = comm.len();
    let len = 3001;
    let mut pending = Vec::new();
    for round in 0..60u64 {
        let inputs: Vec<Vec<f32>> =
            (0..n).map(|m| common::random(5000 + round * 16 + m as u64, len)).collect();
        // Produced by a burn kernel just before the all-reduce, consumed by one just after.
        let ts = inputs.iter().zip(&devices).map(|(x, d)| tensor(x, [len], d) * 2.0).collect();
        let sums = comm.all_reduce(ts).expect("all_reduce");
        let after: Vec<Tensor<1>> = sums.into_iter().map(|s| s + 1.0).collect();
        pending.push((inputs, after));
    }
    for (round, (inputs, after)) in pending.into_iter().enumerate() {
        let doubled: Vec<Vec<f32>> = inputs.iter().map(|x| x.iter().map(|v| v * 2.0).collect()).collect();
        let want: Vec<f32> =
            (0..len).map(|i| doubled.iter().skip(1).fold(doubled[0][i], |s, x| s + x[i]) + 1.0).collect();
        for (m, t) in after.iter().enumerate() {
            let got = read(t);
            assert!(
                got.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()),
                "round {round}, member {m}: burn's work and the all-reduce out of order"
            );
        }
    }
    common::finish(&mut comm);
}

/// A tensor whose memory another tensor shares (a clone) or that is a strided view (a
/// transpose) is copied before it is summed: the other tensor keeps its values.
#[test]
fn shared_and_strided_tensors_are_not_changed() {
    let mut comm = common::comm();
    let devices = comm.devices();
    let n = comm.len();
    let (rows, cols) = (13, 29);
    let inputs: Vec<Vec<f32>> = (0..n).map(|m| common::random(7000 + m as u64, rows * cols)).collect();
    let originals: Vec<Tensor<2>> =
        inputs.iter().zip(&devices).map(|(x, d)| tensor(x, [rows, cols], d)).collect();

    let copied = comm.copied_tensors();
    let sums = comm.all_reduce(originals.clone()).expect("all_reduce of clones");
    assert_eq!(comm.copied_tensors(), copied + n as u64, "clones summed in place");
    for (m, (o, x)) in originals.iter().zip(&inputs).enumerate() {
        assert_eq!(read(o), *x, "member {m}: the clone's memory was written");
    }
    let got: Vec<Vec<f32>> = sums.iter().map(read).collect();
    check_sums(&inputs, &got, "clones");

    // Transposed views: the sum is of the transposes.
    let sums = comm
        .all_reduce(originals.iter().map(|t| t.clone().transpose()).collect())
        .expect("all_reduce of transposes");
    for (m, (o, x)) in originals.iter().zip(&inputs).enumerate() {
        assert_eq!(read(o), *x, "member {m}: the transposed view's memory was written");
    }
    let transposed: Vec<Vec<f32>> =
        inputs.iter().map(|x| (0..rows * cols).map(|k| x[(k % rows) * cols + k / rows]).collect()).collect();
    let got: Vec<Vec<f32>> = sums.iter().map(read).collect();
    assert_eq!(sums[0].dims(), [cols, rows]);
    check_sums(&transposed, &got, "transposes");
    common::finish(&mut comm);
}

/// Every refused input is refused before any work: the Comm sums correctly afterwards.
#[test]
fn bad_inputs_get_errors_and_the_comm_still_works() {
    let mut comm = common::comm();
    let devices = comm.devices();
    let n = comm.len();
    let ones = |shape: [usize; 2], d: &Device| Tensor::<2>::ones(shape, d);

    let e = comm.all_reduce(vec![ones([2, 3], &devices[0])]).unwrap_err();
    assert!(matches!(e, Error::Count { expected, got: 1, .. } if expected == n), "{e}");

    let mut ts: Vec<Tensor<2>> = devices.iter().map(|d| ones([2, 3], d)).collect();
    ts[1] = ts[1].clone().cast(DType::F16);
    let e = comm.all_reduce(ts).unwrap_err();
    assert!(matches!(e, Error::DType { member: 1, got: DType::F16 }), "{e}");

    let ts: Vec<Tensor<2>> = devices.iter().rev().map(|d| ones([2, 3], d)).collect();
    let e = comm.all_reduce(ts).unwrap_err();
    assert!(matches!(e, Error::Device { member: 0, .. }), "{e}");

    let mut ts: Vec<Tensor<2>> = devices.iter().map(|d| ones([2, 3], d)).collect();
    ts[1] = ones([3, 2], &devices[1]);
    let e = comm.all_reduce(ts).unwrap_err();
    assert!(matches!(e, Error::Shape { member: 1, .. }), "{e}");

    let ts: Vec<Tensor<2>> = devices.iter().map(|d| ones([2, 3], &d.clone().autodiff())).collect();
    let e = comm.all_reduce(ts).unwrap_err();
    assert!(matches!(e, Error::Autodiff { member: 0 }), "{e}");

    // A device crossgpu did not open.
    let mut ts: Vec<Tensor<2>> = devices.iter().map(|d| ones([2, 3], d)).collect();
    let foreign = common::foreign_device(&common::member_adapters(1)[0]);
    ts[0] = ones([2, 3], &foreign);
    let e = comm.all_reduce(ts).unwrap_err();
    assert!(matches!(e, Error::Device { member: 0, .. }), "{e}");
    foreign.sync().expect("the foreign device's work");

    // Nothing was submitted: the next all-reduce is right.
    let inputs: Vec<Vec<f32>> = (0..n).map(|m| common::random(8000 + m as u64, 6)).collect();
    let ts = inputs.iter().zip(&devices).map(|(x, d)| tensor(x, [2, 3], d)).collect();
    let got: Vec<Vec<f32>> =
        comm.all_reduce(ts).expect("all_reduce after the errors").iter().map(read).collect();
    check_sums(&inputs, &got, "after the errors");

    // Empty tensors sum to empty tensors.
    let ts: Vec<Tensor<2>> = devices.iter().map(|d| Tensor::zeros([0, 3], d)).collect();
    let sums = comm.all_reduce(ts).expect("empty");
    assert_eq!(sums[0].dims(), [0, 3]);
    common::finish(&mut comm);
}

#[test]
fn opening_with_nothing_is_an_error() {
    let e = Comm::from_adapters(common::instance(), &[]).unwrap_err();
    assert!(matches!(e, Error::Crossgpu(crossgpu::Error::InvalidArgument(_))), "{e}");
}
