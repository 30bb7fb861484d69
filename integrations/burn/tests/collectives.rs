//! The collectives beside the f32 sum on burn tensors, two members (lavapipe devices unless
//! `CROSSGPU_TEST_ADAPTERS` says otherwise): all-reduce with every op (burn-collective's sum
//! and mean among them), broadcast, reduce, all-gather (unequal first dimensions) and
//! reduce-scatter, f32 and f16, random inputs at awkward shapes; each result bit for bit the
//! documented rule computed here (member order, f32 accumulation, f16 rounded to nearest
//! even, ties keep the earlier member), float sums and means within an f64 bound, and bitwise
//! the same on every member; the inputs of all-gather and reduce-scatter unchanged; misuse
//! refused before any work.

mod common;

use burn::tensor::{f16, DType, Device, Tensor, TensorData};
use crossgpu_burn::{Error, ReduceOp};

const OPS: [ReduceOp; 5] = [ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min, ReduceOp::Prod];

/// A tensor of `dtype` holding `values` (f16: rounded to nearest, which `values` already are).
fn tensor<const D: usize>(values: &[f32], shape: [usize; D], dtype: DType, device: &Device) -> Tensor<D> {
    match dtype {
        DType::F16 => {
            let h: Vec<f16> = values.iter().map(|&v| f16::from_f32(v)).collect();
            Tensor::from_data(TensorData::new(h, shape), (device, DType::F16))
        }
        _ => Tensor::from_data(TensorData::new(values.to_vec(), shape), device),
    }
}

/// The bits of every element (f16 in the low half).
fn bits<const D: usize>(t: &Tensor<D>) -> Vec<u32> {
    match t.dtype() {
        DType::F16 => t
            .to_data()
            .try_to_vec::<f16>()
            .expect("f16 data")
            .iter()
            .map(|h| u32::from(h.to_bits()))
            .collect(),
        _ => t.to_data().try_to_vec::<f32>().expect("f32 data").iter().map(|v| v.to_bits()).collect(),
    }
}

/// Random values exactly representable in `dtype`, in [-2, 2), never zero.
fn values(seed: u64, n: usize, dtype: DType) -> Vec<f32> {
    let v = common::random(seed, n);
    match dtype {
        DType::F16 => {
            v.iter().map(|&x| f16::from_f32(x).to_f32()).map(|x| if x == 0.0 { 0.5 } else { x }).collect()
        }
        _ => v,
    }
}

fn narrow(dtype: DType, v: f32) -> u32 {
    match dtype {
        DType::F16 => u32::from(f16::from_f32(v).to_bits()),
        _ => v.to_bits(),
    }
}

/// `op` over one element of each member, by the documented rules; checked against f64 too.
fn combine(dtype: DType, op: ReduceOp, column: &[f32], what: &str) -> u32 {
    let mut acc = column[0];
    for &v in &column[1..] {
        acc = match op {
            ReduceOp::Prod => acc * v,
            ReduceOp::Max if v > acc => v,
            ReduceOp::Min if v < acc => v,
            ReduceOp::Max | ReduceOp::Min => acc,
            _ => acc + v,
        };
    }
    if op == ReduceOp::Avg {
        acc *= 1.0 / column.len() as f32;
    }
    if matches!(op, ReduceOp::Sum | ReduceOp::Avg) {
        let scale = if op == ReduceOp::Avg { 1.0 / column.len() as f64 } else { 1.0 };
        let exact = column.iter().map(|&v| f64::from(v)).sum::<f64>() * scale;
        let abs = column.iter().map(|&v| f64::from(v).abs()).sum::<f64>() * scale;
        let u = f64::from(f32::EPSILON) / 2.0;
        let unit = if dtype == DType::F16 { 1.0 / 2048.0 } else { 0.0 };
        let bound = (column.len() as f64 + 1.0) * u * abs * 1.01 + unit * exact.abs();
        assert!((f64::from(acc) - exact).abs() <= bound, "{what}: {acc} vs f64 {exact}");
    }
    narrow(dtype, acc)
}

fn same_on_every_member(got: &[Vec<u32>], what: &str) {
    for (m, g) in got.iter().enumerate() {
        assert_eq!(g, &got[0], "{what}: member {m} differs from member 0");
    }
}

#[test]
fn every_collective_follows_the_rules_bit_for_bit() {
    let mut comm = common::comm();
    let devices = comm.devices();
    let n = comm.len();
    let mut seed = 1u64;
    for dtype in [DType::F32, DType::F16] {
        for (round, rows) in [1usize, 3, 37, 1001].into_iter().enumerate() {
            let cols = [1usize, 7, 5, 3][round];
            let len = rows * cols;
            let mut fresh = |rows: usize| -> (Vec<Vec<f32>>, Vec<Tensor<2>>) {
                let v: Vec<Vec<f32>> = (0..n)
                    .map(|_| {
                        seed += 1;
                        values(seed, rows * cols, dtype)
                    })
                    .collect();
                let t = v.iter().zip(&devices).map(|(v, d)| tensor(v, [rows, cols], dtype, d)).collect();
                (v, t)
            };
            for op in OPS {
                let what = format!("all_reduce {op} of {len} {dtype:?}");
                let (v, t) = fresh(rows);
                let got: Vec<Vec<u32>> = comm.all_reduce_op(t, op).expect(&what).iter().map(bits).collect();
                same_on_every_member(&got, &what);
                for e in 0..len {
                    let column: Vec<f32> = v.iter().map(|x| x[e]).collect();
                    assert_eq!(got[0][e], combine(dtype, op, &column, &what), "{what}: element {e}");
                }

                let what = format!("reduce {op} to 1 of {len} {dtype:?}");
                let (v, t) = fresh(rows);
                let got: Vec<Vec<u32>> = comm.reduce(t, 1, op).expect(&what).iter().map(bits).collect();
                for e in 0..len {
                    let column: Vec<f32> = v.iter().map(|x| x[e]).collect();
                    assert_eq!(got[1][e], combine(dtype, op, &column, &what), "{what}: element {e}");
                    assert_eq!(got[0][e], narrow(dtype, v[0][e]), "{what}: member 0's tensor changed");
                }

                let what = format!("reduce_scatter {op} of {} {dtype:?}", n * len);
                let (v, t) = fresh(n * rows);
                let inputs: Vec<Vec<u32>> = t.iter().map(bits).collect();
                let keep: Vec<Tensor<2>> = t.to_vec();
                let got: Vec<Vec<u32>> = comm.reduce_scatter(t, op).expect(&what).iter().map(bits).collect();
                for (m, g) in got.iter().enumerate() {
                    assert_eq!(g.len(), len, "{what}: member {m}'s segment");
                    for (e, &b) in g.iter().enumerate() {
                        let column: Vec<f32> = v.iter().map(|x| x[m * len + e]).collect();
                        assert_eq!(b, combine(dtype, op, &column, &what), "{what}: member {m} element {e}");
                    }
                }
                let after: Vec<Vec<u32>> = keep.iter().map(bits).collect();
                assert_eq!(after, inputs, "{what}: an input changed");
            }
            for root in [0, n - 1] {
                let what = format!("broadcast from {root} of {len} {dtype:?}");
                let (v, t) = fresh(rows);
                let got: Vec<Vec<u32>> = comm.broadcast(t, root).expect(&what).iter().map(bits).collect();
                let want: Vec<u32> = v[root].iter().map(|&x| narrow(dtype, x)).collect();
                for g in &got {
                    assert_eq!(g, &want, "{what}");
                }
            }
            // All-gather with unequal first dimensions (member m has rows + m rows).
            let what = format!("all_gather of {dtype:?} with {rows}.. rows");
            let parts: Vec<(Vec<f32>, Tensor<2>)> = (0..n)
                .map(|m| {
                    seed += 1;
                    let v = values(seed, (rows + m) * cols, dtype);
                    let t = tensor(&v, [rows + m, cols], dtype, &devices[m]);
                    (v, t)
                })
                .collect();
            let want: Vec<u32> =
                parts.iter().flat_map(|(v, _)| v.iter().map(|&x| narrow(dtype, x))).collect();
            let gathered = comm.all_gather(parts.iter().map(|(_, t)| t.clone()).collect()).expect(&what);
            for (m, g) in gathered.iter().enumerate() {
                assert_eq!(g.dims(), [(0..n).map(|k| rows + k).sum::<usize>(), cols], "{what}: shape");
                assert_eq!(bits(g), want, "{what}: member {m}");
                assert_eq!(g.dtype(), dtype, "{what}: dtype");
            }
        }
    }
    common::finish(&mut comm);
}

#[test]
fn collective_misuse_is_refused_before_any_work() {
    let mut comm = common::comm();
    let devices = comm.devices();
    let t = |d: &Device, shape: [usize; 2]| Tensor::<2>::ones(shape, d);
    let e = comm.broadcast(vec![t(&devices[0], [2, 2])], 0).unwrap_err();
    assert!(matches!(e, Error::Count { .. }), "{e}");
    let e = comm.broadcast(vec![t(&devices[0], [2, 2]), t(&devices[1], [2, 2])], 2).unwrap_err();
    assert!(e.to_string().contains("root member 2"), "{e}");
    let e =
        comm.all_reduce_op(vec![t(&devices[0], [2, 2]), t(&devices[1], [2, 3])], ReduceOp::Max).unwrap_err();
    assert!(matches!(e, Error::Shape { member: 1, .. }), "{e}");
    let e = comm.all_gather(vec![t(&devices[0], [2, 2]), t(&devices[1], [3, 3])]).unwrap_err();
    assert!(matches!(e, Error::Shape { member: 1, .. }), "{e}");
    let e =
        comm.reduce_scatter(vec![t(&devices[0], [3, 2]), t(&devices[1], [3, 2])], ReduceOp::Sum).unwrap_err();
    assert!(e.to_string().contains("multiple of the 2 members"), "{e}");
    let e = comm.reduce(vec![t(&devices[1], [2, 2]), t(&devices[1], [2, 2])], 0, ReduceOp::Min).unwrap_err();
    assert!(matches!(e, Error::Device { member: 0, .. }), "{e}");
    let ints = |d: &Device| Tensor::<2>::ones([2, 2], d).int();
    let e = comm.all_reduce_op(
        vec![ints(&devices[0]).float(), t(&devices[1], [2, 2]).cast(DType::F16)],
        ReduceOp::Min,
    );
    assert!(matches!(e.unwrap_err(), Error::DType { member: 1, .. }));
    let sums =
        comm.all_reduce_op(vec![t(&devices[0], [2, 2]), t(&devices[1], [2, 2])], ReduceOp::Avg).unwrap();
    assert_eq!(bits(&sums[1]), vec![1f32.to_bits(); 4], "the mean of ones after refused calls");
    common::finish(&mut comm);
}
