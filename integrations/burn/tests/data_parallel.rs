//! `Comm::all_reduce_grads`: two replicas of a small model, each on its micro-batch: every
//! member's sums bitwise the f32 sum of the members' own gradients in member order, and (on
//! members of one kind) bitwise what one device accumulating the same micro-batches gets
//! (burn's `GradientsAccumulator`), whether the gradients travel in one bucket or in many (a
//! parameter larger than a bucket alone); SGD steps keep the replicas bitwise equal. Models
//! that are not replicas are refused.

mod common;

use burn::module::{Module, ModuleVisitor, Param};
use burn::nn::Linear;
use burn::optim::{GradientsAccumulator, GradientsParams, SgdConfig};
use burn::tensor::{activation::relu, Device, Tensor, TensorData};
use crossgpu_burn::Error;

#[derive(Module, Debug)]
struct Mlp {
    l1: Linear,
    l2: Linear,
}

impl Mlp {
    fn new(seed: u64, device: &Device) -> Self {
        let layer = |s: u64, d_in: usize, d_out: usize| Linear {
            weight: Param::from_tensor(
                Tensor::from_data(TensorData::new(common::random(s, d_in * d_out), [d_in, d_out]), device)
                    .require_grad(),
            ),
            bias: Some(Param::from_tensor(
                Tensor::from_data(TensorData::new(common::random(s + 1, d_out), [d_out]), device)
                    .require_grad(),
            )),
        };
        Self { l1: layer(seed, 13, 29), l2: layer(seed + 2, 29, 3) }
    }

    fn loss(&self, seed: u64, rows: usize, total: usize, device: &Device) -> Tensor<1> {
        let x = Tensor::<2>::from_data(TensorData::new(common::random(seed, rows * 13), [rows, 13]), device);
        let y =
            Tensor::<2>::from_data(TensorData::new(common::random(seed + 1, rows * 3), [rows, 3]), device);
        let d = self.l2.forward(relu(self.l1.forward(x))) - y;
        (d.clone() * d).sum().div_scalar(total as f32)
    }
}

struct Values(Vec<Vec<u32>>);

impl ModuleVisitor for Values {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        self.0.push(param.val().to_data().try_to_vec::<f32>().unwrap().iter().map(|v| v.to_bits()).collect());
    }
}

fn bits(model: &Mlp) -> Vec<Vec<u32>> {
    let mut v = Values(Vec::new());
    model.visit(&mut v);
    v.0
}

/// The bits of each gradient in `grads`, in `model`'s parameter order.
fn grad_bits(model: &Mlp, grads: &GradientsParams) -> Vec<Vec<u32>> {
    struct G<'a>(&'a GradientsParams, Vec<Vec<u32>>);
    impl ModuleVisitor for G<'_> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            let g = self.0.get::<D>(param.id).unwrap_or_else(|| {
                panic!("no gradient for parameter {} of {} gradients", param.id, self.0.len())
            });
            self.1.push(g.to_data().try_to_vec::<f32>().unwrap().iter().map(|v| v.to_bits()).collect());
        }
    }
    let mut g = G(grads, Vec::new());
    model.visit(&mut g);
    g.1
}

#[test]
fn summed_gradients_are_the_accumulated_ones_bitwise_in_one_bucket_or_many() {
    let mut comm = common::comm();
    let devices: Vec<Device> = comm.devices().into_iter().map(Device::autodiff).collect();
    let n = comm.len();
    let (rows, total) = (11, 11 * n);
    // Devices of one kind run the same kernels with the same rounding: one device accumulating
    // the members' micro-batches then gets the members' bits. Across kinds (a GPU beside
    // lavapipe) only the sum of each member's own gradients is exact.
    let names = comm.names();
    let same_kind = names.iter().all(|name| *name == names[0]);
    if !same_kind {
        eprintln!(
            "NOTE: members of different kinds ({names:?}): checking the sums, not one device's accumulation"
        );
    }
    // 13*29 + 29 + 29*3 + 3 = 496 parameters: one bucket; 100 a bucket: several, the first
    // weight (377) alone.
    for bucket in [crossgpu_burn::BUCKET_ELEMENTS, 100] {
        comm.set_bucket_elements(bucket);
        let init = Mlp::new(500, &devices[0]);
        let mut replicas: Vec<Mlp> = devices.iter().map(|d| init.clone().fork(d)).collect();
        let mut optims: Vec<_> = (0..n).map(|_| SgdConfig::new().init()).collect();
        let mut single = init.clone();
        let mut single_optim = SgdConfig::new().init();
        for step in 0..4u64 {
            let grads: Vec<GradientsParams> = replicas
                .iter()
                .enumerate()
                .map(|(m, model)| {
                    let loss = model.loss(1000 * step + 10 * m as u64, rows, total, &devices[m]);
                    GradientsParams::from_grads(loss.backward(), model)
                })
                .collect();
            // Each member's own gradients, and their f32 sum in member order on the host.
            let own: Vec<Vec<Vec<u32>>> = grads.iter().zip(&replicas).map(|(g, r)| grad_bits(r, g)).collect();
            let host_sum: Vec<Vec<u32>> = (0..own[0].len())
                .map(|p| {
                    (0..own[0][p].len())
                        .map(|i| {
                            own.iter()
                                .skip(1)
                                .fold(f32::from_bits(own[0][p][i]), |s, g| s + f32::from_bits(g[p][i]))
                                .to_bits()
                        })
                        .collect()
                })
                .collect();
            let sums = comm.all_reduce_grads(&replicas[0], grads).expect("all_reduce_grads");
            for (m, g) in sums.iter().enumerate() {
                assert_eq!(
                    grad_bits(&replicas[m], g),
                    host_sum,
                    "bucket {bucket}, step {step}: member {m}'s sums"
                );
            }

            let mut acc = GradientsAccumulator::new();
            for m in 0..n {
                let loss = single.loss(1000 * step + 10 * m as u64, rows, total, &devices[0]);
                acc.accumulate(&single, GradientsParams::from_grads(loss.backward(), &single));
            }
            let accumulated = acc.grads();
            if same_kind {
                let want = grad_bits(&single, &accumulated);
                assert_eq!(
                    host_sum, want,
                    "bucket {bucket}, step {step}: the members' sums against one device's accumulation"
                );
            }

            replicas = replicas
                .into_iter()
                .zip(sums)
                .zip(&mut optims)
                .map(|((r, g), o)| o.step(0.1, r, g))
                .collect();
            single = single_optim.step(0.1, single, accumulated);
            for (m, r) in replicas.iter().enumerate() {
                assert_eq!(
                    bits(r),
                    bits(&replicas[0]),
                    "bucket {bucket}, step {step}: member {m}'s parameters"
                );
                if same_kind {
                    assert_eq!(
                        bits(r),
                        bits(&single),
                        "bucket {bucket}, step {step}: member {m}'s parameters against one device"
                    );
                }
            }
        }
    }
    comm.set_bucket_elements(crossgpu_burn::BUCKET_ELEMENTS);
    common::finish(&mut comm);
}

#[test]
fn models_that_are_not_replicas_are_refused() {
    let mut comm = common::comm();
    let devices: Vec<Device> = comm.devices().into_iter().map(Device::autodiff).collect();
    let n = comm.len();
    // Each member's model made on its own: other parameter ids.
    let models: Vec<Mlp> = devices.iter().map(|d| Mlp::new(600, d)).collect();
    let grads = |models: &[Mlp]| -> Vec<GradientsParams> {
        models
            .iter()
            .enumerate()
            .map(|(m, model)| GradientsParams::from_grads(model.loss(7, 3, 6, &devices[m]).backward(), model))
            .collect()
    };
    let e = comm.all_reduce_grads(&models[0], grads(&models)).unwrap_err();
    assert!(e.to_string().contains("replicas"), "{e}");

    // Replicas moved with `to_device` are no leaves of their own: no gradients.
    let init = Mlp::new(700, &devices[0]);
    let moved: Vec<Mlp> = devices.iter().map(|d| init.clone().to_device(d)).collect();
    let e = comm.all_reduce_grads(&moved[0], grads(&moved)).unwrap_err();
    assert!(e.to_string().contains("use `fork`"), "{e}");

    let e = comm.all_reduce_grads(&models[0], grads(&models[..1])).unwrap_err();
    assert!(matches!(e, Error::Count { got: 1, expected, .. } if expected == n), "{e}");
    common::finish(&mut comm);
}
