//! Tensor-parallel linear layers as burn modules over a [`Comm`]'s members (the Megatron
//! split): a [`ColumnParallelLinear`] splits a layer's output features, so each member computes
//! its columns of the output from the whole input, without communication; a
//! [`RowParallelLinear`] splits the input features, so each member multiplies its share of the
//! input by its rows of the weight and the all-reduce sums the members' partial products. A
//! column layer, an element-wise activation, then a row layer (an MLP block) takes one
//! all-reduce, and every member ends with bitwise the same output.
//!
//! Both are built from a burn [`Linear`] (`weight` `[d_input, d_output]`, as burn stores it)
//! and a split: how many features each member takes, in member order (see [`even_split`]).

use burn::module::{Module, Param};
use burn::nn::Linear;
use burn::tensor::{Device, Tensor};

use crate::comm::Comm;
use crate::error::{Error, Result};

/// `dim` features over `members` members as evenly as they go, the first members taking one
/// more where `dim` does not divide.
pub fn even_split(dim: usize, members: usize) -> Vec<usize> {
    (0..members).map(|m| dim / members + usize::from(m < dim % members)).collect()
}

/// Checks `split` against a dimension of `dim` over `devices`, and gives each member's range.
fn ranges(
    split: &[usize],
    dim: usize,
    devices: &[Device],
    what: &str,
) -> Result<Vec<std::ops::Range<usize>>> {
    if split.len() != devices.len() {
        return Err(Error::Count {
            what: "split (one share per member)",
            expected: devices.len(),
            got: split.len(),
        });
    }
    if let Some(m) = split.iter().position(|&s| s == 0) {
        return Err(invalid(format!(
            "member {m}'s share of the {what} is 0: every member needs at least one feature"
        )));
    }
    if split.iter().sum::<usize>() != dim {
        return Err(invalid(format!(
            "the split {split:?} covers {} {what}, the layer has {dim}",
            split.iter().sum::<usize>()
        )));
    }
    let mut start = 0;
    Ok(split
        .iter()
        .map(|&s| {
            start += s;
            start - s..start
        })
        .collect())
}

fn invalid(why: String) -> Error {
    Error::Crossgpu(crossgpu::Error::InvalidArgument(why))
}

/// Checks that `inputs` has one tensor per shard, each on its shard's device with `width`
/// features (the last dimension) where `width(m)` says.
fn check_inputs<const D: usize>(
    shards: &[Linear],
    inputs: &[Tensor<D>],
    what: &'static str,
    width: impl Fn(usize) -> usize,
) -> Result<()> {
    if inputs.len() != shards.len() {
        return Err(Error::Count { what, expected: shards.len(), got: inputs.len() });
    }
    for (m, (x, shard)) in inputs.iter().zip(shards).enumerate() {
        let device = shard.weight.val().device();
        if x.device() != device {
            return Err(Error::Device {
                member: m,
                got: format!("{:?}", x.device()),
                expected: format!("{device:?}"),
            });
        }
        let last = x.dims()[D - 1];
        if last != width(m) {
            return Err(invalid(format!(
                "{what}: member {m}'s input has {last} features, its shard takes {}",
                width(m)
            )));
        }
    }
    Ok(())
}

/// A linear layer whose output features are split across the members: member `m` holds the
/// weight's columns (and the bias's elements) of its share and computes those columns of the
/// output from the whole input.
#[derive(Module, Debug)]
pub struct ColumnParallelLinear {
    /// Each member's part, on its device, in member order.
    pub shards: Vec<Linear>,
}

impl ColumnParallelLinear {
    /// Splits `linear`'s output features by `split` (one share per member, in member order,
    /// none zero, summing to `d_output`) over `devices` (one per member: [`Comm::devices`]).
    pub fn from_linear(linear: &Linear, split: &[usize], devices: &[Device]) -> Result<Self> {
        let weight = linear.weight.val();
        let [d_input, d_output] = weight.dims();
        let ranges = ranges(split, d_output, devices, "output features")?;
        let shards = ranges
            .into_iter()
            .zip(devices)
            .map(|(cols, device)| Linear {
                weight: Param::from_tensor(
                    weight.clone().slice([0..d_input, cols.clone()]).to_device(device),
                ),
                bias: linear
                    .bias
                    .as_ref()
                    .map(|b| Param::from_tensor(b.val().slice([cols]).to_device(device))),
            })
            .collect();
        Ok(Self { shards })
    }

    /// Each member's share of the output features, in member order.
    pub fn split(&self) -> Vec<usize> {
        self.shards.iter().map(|s| s.weight.dims()[1]).collect()
    }

    /// Member `m`'s columns of the output from member `m`'s copy of the whole input
    /// (`inputs[m]`, `[.., d_input]`, on member `m`'s device): `[.., split[m]]` each.
    ///
    /// Errors: a wrong number of inputs, an input on another device or of another width.
    pub fn forward<const D: usize>(&self, inputs: Vec<Tensor<D>>) -> Result<Vec<Tensor<D>>> {
        check_inputs(&self.shards, &inputs, "ColumnParallelLinear inputs", |m| {
            self.shards[m].weight.dims()[0]
        })?;
        Ok(inputs.into_iter().zip(&self.shards).map(|(x, shard)| shard.forward(x)).collect())
    }
}

/// A linear layer whose input features are split across the members: member `m` holds the
/// weight's rows of its share; the members' partial products are summed by the all-reduce
/// and the bias is added after the sum, on every member.
#[derive(Module, Debug)]
pub struct RowParallelLinear {
    /// Each member's rows of the weight (no bias), on its device, in member order.
    pub shards: Vec<Linear>,
    /// The whole bias on each member's device (empty for a layer without bias).
    pub bias: Vec<Param<Tensor<1>>>,
}

impl RowParallelLinear {
    /// Splits `linear`'s input features by `split` (one share per member, in member order,
    /// none zero, summing to `d_input`) over `devices` (one per member: [`Comm::devices`]).
    pub fn from_linear(linear: &Linear, split: &[usize], devices: &[Device]) -> Result<Self> {
        let weight = linear.weight.val();
        let [d_input, d_output] = weight.dims();
        let ranges = ranges(split, d_input, devices, "input features")?;
        let shards = ranges
            .into_iter()
            .zip(devices)
            .map(|(rows, device)| Linear {
                weight: Param::from_tensor(weight.clone().slice([rows, 0..d_output]).to_device(device)),
                bias: None,
            })
            .collect();
        let bias = match &linear.bias {
            Some(b) => devices.iter().map(|d| Param::from_tensor(b.val().to_device(d))).collect(),
            None => Vec::new(),
        };
        Ok(Self { shards, bias })
    }

    /// Each member's share of the input features, in member order.
    pub fn split(&self) -> Vec<usize> {
        self.shards.iter().map(|s| s.weight.dims()[0]).collect()
    }

    /// The whole output on every member (bitwise the same) from each member's share of the
    /// input (`inputs[m]`, `[.., split[m]]`, on member `m`'s device): one all-reduce over
    /// `comm`, whose members must be the layer's devices in order.
    ///
    /// Errors: a wrong number of inputs, an input on another device or of another width;
    /// the all-reduce's.
    pub fn forward<const D: usize>(&self, comm: &mut Comm, inputs: Vec<Tensor<D>>) -> Result<Vec<Tensor<D>>> {
        check_inputs(&self.shards, &inputs, "RowParallelLinear inputs", |m| self.shards[m].weight.dims()[0])?;
        let partials = inputs.into_iter().zip(&self.shards).map(|(x, shard)| shard.forward(x)).collect();
        let sums = comm.all_reduce(partials)?;
        if self.bias.is_empty() {
            return Ok(sums);
        }
        Ok(sums.into_iter().zip(&self.bias).map(|(y, b)| y + b.val().unsqueeze()).collect())
    }
}
