//! The tensor-parallel linear layers as burn modules: an MLP block (column-parallel, ReLU,
//! row-parallel) over two members against the same block on one device and against an f64
//! reference within the rounding bound of its dot products; uneven splits; the members' outputs
//! bitwise equal; bad splits and inputs refused.

mod common;

use burn::module::Param;
use burn::nn::Linear;
use burn::tensor::{activation::relu, Device, Tensor, TensorData};
use crossgpu_burn::tp::{even_split, ColumnParallelLinear, RowParallelLinear};
use crossgpu_burn::Error;

fn linear(seed: u64, d_in: usize, d_out: usize, device: &Device) -> (Linear, Vec<f32>, Vec<f32>) {
    let scale = 1.0 / (d_in as f32).sqrt();
    let w: Vec<f32> = common::random(seed, d_in * d_out).iter().map(|v| v * scale).collect();
    let b: Vec<f32> = common::random(seed + 1, d_out).iter().map(|v| v * scale).collect();
    let layer = Linear {
        weight: Param::from_tensor(Tensor::from_data(TensorData::new(w.clone(), [d_in, d_out]), device)),
        bias: Some(Param::from_tensor(Tensor::from_data(TensorData::new(b.clone(), [d_out]), device))),
    };
    (layer, w, b)
}

/// `y = x W + b` in f64 and, per element, `Σ|x w| + |b|` (the scale of its rounding error).
fn reference(
    x: &[f64],
    rows: usize,
    w: &[f32],
    b: &[f32],
    d_in: usize,
    d_out: usize,
) -> (Vec<f64>, Vec<f64>) {
    let mut y = vec![0.0; rows * d_out];
    let mut scale = vec![0.0; rows * d_out];
    for r in 0..rows {
        for j in 0..d_out {
            let mut s = f64::from(b[j]);
            let mut a = f64::from(b[j]).abs();
            for k in 0..d_in {
                let p = x[r * d_in + k] * f64::from(w[k * d_out + j]);
                s += p;
                a += p.abs();
            }
            y[r * d_out + j] = s;
            scale[r * d_out + j] = a;
        }
    }
    (y, scale)
}

fn gamma(n: usize) -> f64 {
    let u = f64::from(f32::EPSILON) / 2.0;
    n as f64 * u / (1.0 - n as f64 * u)
}

#[test]
fn an_mlp_block_over_two_members_matches_one_device_and_the_f64_reference() {
    let mut comm = common::comm();
    let devices = comm.devices();
    let (rows, d_in, hidden, d_out) = (7, 37, 53, 19);
    let (l1, w1, b1) = linear(100, d_in, hidden, &devices[0]);
    let (l2, w2, b2) = linear(200, hidden, d_out, &devices[0]);
    let x = common::random(300, rows * d_in);

    // f64 reference and the bound: the hidden layer's rounding (γ over its dot products of
    // d_in products and a bias) carried through the second layer's |W2|, plus the second
    // layer's own rounding (its d_out dot products of `hidden` terms, a bias, and — split over
    // the members — the all-reduce's one more addition).
    let x64: Vec<f64> = x.iter().map(|&v| f64::from(v)).collect();
    let (h, h_scale) = reference(&x64, rows, &w1, &b1, d_in, hidden);
    let h: Vec<f64> = h.iter().map(|v| v.max(0.0)).collect();
    let (y, y_scale) = reference(&h, rows, &w2, &b2, hidden, d_out);
    let mut bound = vec![0.0; rows * d_out];
    for r in 0..rows {
        for j in 0..d_out {
            let carried: f64 = (0..hidden)
                .map(|k| f64::from(w2[k * d_out + j]).abs() * gamma(d_in + 2) * h_scale[r * hidden + k])
                .sum();
            bound[r * d_out + j] = (carried + gamma(hidden + 3) * y_scale[r * d_out + j]) * 1.01;
        }
    }
    let check = |got: &[f32], what: &str| {
        for i in 0..rows * d_out {
            let err = (f64::from(got[i]) - y[i]).abs();
            assert!(
                err <= bound[i],
                "{what}: element {i}: {} vs {} (error {err:e}, bound {:e})",
                got[i],
                y[i],
                bound[i]
            );
        }
    };

    let input = |d: &Device| Tensor::<2>::from_data(TensorData::new(x.clone(), [rows, d_in]), d);
    let one = l2.forward(relu(l1.forward(input(&devices[0]))));
    check(&one.to_data().try_to_vec::<f32>().unwrap(), "one device");

    for split in [even_split(hidden, 2), vec![1, hidden - 1], vec![40, 13]] {
        let column = ColumnParallelLinear::from_linear(&l1, &split, &devices).expect("column split");
        let row = RowParallelLinear::from_linear(&l2, &split, &devices).expect("row split");
        assert_eq!(column.split(), split);
        assert_eq!(row.split(), split);
        for round in 0..10 {
            let hidden_parts: Vec<Tensor<2>> = column
                .forward(devices.iter().map(input).collect())
                .expect("column forward")
                .into_iter()
                .map(relu)
                .collect();
            let outs = row.forward(&mut comm, hidden_parts).expect("row forward");
            let got: Vec<Vec<f32>> = outs.iter().map(|t| t.to_data().try_to_vec::<f32>().unwrap()).collect();
            for (m, g) in got.iter().enumerate() {
                assert!(
                    g.iter().zip(&got[0]).all(|(a, b)| a.to_bits() == b.to_bits()),
                    "split {split:?}, round {round}: member {m}'s output differs from member 0's"
                );
            }
            check(&got[0], &format!("split {split:?}, round {round}"));
        }
    }
    common::finish(&mut comm);
}

#[test]
fn bad_splits_and_inputs_are_refused() {
    let mut comm = common::comm();
    let devices = comm.devices();
    let (l, _, _) = linear(400, 8, 6, &devices[0]);
    assert_eq!(even_split(7, 3), vec![3, 2, 2]);

    let e = ColumnParallelLinear::from_linear(&l, &[3, 2], &devices).unwrap_err();
    assert!(e.to_string().contains("covers 5"), "{e}");
    let e = ColumnParallelLinear::from_linear(&l, &[6, 0], &devices).unwrap_err();
    assert!(e.to_string().contains("is 0"), "{e}");
    let e = RowParallelLinear::from_linear(&l, &[8], &devices).unwrap_err();
    assert!(matches!(e, Error::Count { expected: 2, got: 1, .. }), "{e}");

    let column = ColumnParallelLinear::from_linear(&l, &[3, 3], &devices).unwrap();
    let e = column.forward(vec![Tensor::<2>::ones([2, 8], &devices[0])]).unwrap_err();
    assert!(matches!(e, Error::Count { .. }), "{e}");
    let e = column.forward(devices.iter().map(|d| Tensor::<2>::ones([2, 7], d)).collect()).unwrap_err();
    assert!(e.to_string().contains("7 features"), "{e}");
    let e = column.forward(devices.iter().rev().map(|d| Tensor::<2>::ones([2, 8], d)).collect()).unwrap_err();
    assert!(matches!(e, Error::Device { member: 0, .. }), "{e}");

    let row = RowParallelLinear::from_linear(&l, &[5, 3], &devices).unwrap();
    let e =
        row.forward(&mut comm, devices.iter().map(|d| Tensor::<2>::ones([2, 4], d)).collect()).unwrap_err();
    assert!(e.to_string().contains("4 features"), "{e}");
    common::finish(&mut comm);
}
