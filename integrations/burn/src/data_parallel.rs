//! Data-parallel training: each member trains a replica of one model on its part of the batch,
//! and [`Comm::all_reduce_grads`] sums the members' gradients, so that every member applies the
//! same update and the replicas stay bitwise equal.
//!
//! The gradients of one step travel as few all-reduces as possible (DDP's buckets): each
//! member's gradients are flattened into buckets of up to [`BUCKET_ELEMENTS`](crate::comm::BUCKET_ELEMENTS) f32 (or what
//! [`Comm::set_bucket_elements`] says) in the module's parameter order, each bucket is all-reduced once, and the sums are handed back as
//! [`GradientsParams`] views of the buckets, ready for the member's optimizer.

use burn::module::{Module, ModuleVisitor, Param, ParamId};
use burn::optim::GradientsParams;
use burn::tensor::Tensor;

use crate::comm::Comm;
use crate::error::{Error, Result};

/// Takes each parameter's gradients (one per member) out of the members' `GradientsParams`,
/// flattened, in the module's parameter order.
struct Collect<'a> {
    grads: &'a mut [GradientsParams],
    /// Per parameter with a gradient: its id and each member's flattened gradient.
    flat: Vec<(ParamId, Vec<Tensor<1>>)>,
    error: Option<Error>,
}

impl ModuleVisitor for Collect<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        if self.error.is_some() {
            return;
        }
        let parts: Vec<Option<Tensor<D>>> = self.grads.iter_mut().map(|g| g.remove::<D>(param.id)).collect();
        if parts.iter().all(Option::is_none) {
            return;
        }
        if let Some(m) = parts.iter().position(Option::is_none) {
            self.error = Some(not_replicas(format!(
                "member {m} has no gradient for parameter {}, member 0 has",
                param.id
            )));
            return;
        }
        let flat = parts
            .into_iter()
            .map(|g| {
                let g = g.expect("checked above");
                let n = g.shape().num_elements();
                g.reshape([n])
            })
            .collect();
        self.flat.push((param.id, flat));
    }
}

/// Hands each parameter's summed gradient back, shaped as the parameter, to every member.
struct Restore<'a> {
    grads: &'a mut [GradientsParams],
    sums: std::collections::HashMap<ParamId, Vec<Tensor<1>>>,
}

impl ModuleVisitor for Restore<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        if let Some(sums) = self.sums.remove(&param.id) {
            let dims = param.dims();
            for (g, s) in self.grads.iter_mut().zip(sums) {
                g.register::<D>(param.id, s.reshape(dims));
            }
        }
    }
}

fn not_replicas(why: String) -> Error {
    Error::Crossgpu(crossgpu::Error::InvalidArgument(format!(
        "all_reduce_grads: {why}; the members' models must be replicas of `module` (made with `module.clone().fork(..)`, which keeps the parameter ids)"
    )))
}

impl Comm {
    /// Sets the most f32 elements one all-reduce of [`Comm::all_reduce_grads`] carries
    /// (at least 1; default [`BUCKET_ELEMENTS`](crate::comm::BUCKET_ELEMENTS)).
    pub fn set_bucket_elements(&mut self, elements: usize) {
        self.bucket_elements = elements.max(1);
    }

    /// Sums the members' gradients of `module`'s parameters: `grads[m]` are member `m`'s
    /// (`GradientsParams::from_grads(loss.backward(), &model_m)`), where each `model_m` is a
    /// replica of `module` on member `m`'s device (`module.clone().fork(&devices[m])`
    /// keeps the parameter ids these are matched by). Returns each member's gradients
    /// replaced by the sums, bitwise the same on every member; a parameter no member has a
    /// gradient for is left out, as burn does (but none at all is an error).
    ///
    /// The sum is what one device would compute over the whole batch when each member's loss
    /// is its part of the whole batch's loss (divide by the whole batch size, not the
    /// member's).
    ///
    /// Errors, before any work is submitted: a wrong number of `grads`; gradients of
    /// parameters `module` does not have, or of some members only, or of none at all; those of [`Comm::all_reduce`].
    pub fn all_reduce_grads<M: Module>(
        &mut self,
        module: &M,
        mut grads: Vec<GradientsParams>,
    ) -> Result<Vec<GradientsParams>> {
        if grads.len() != self.len() {
            return Err(Error::Count { what: "all_reduce_grads", expected: self.len(), got: grads.len() });
        }
        let mut collect = Collect { grads: &mut grads, flat: Vec::new(), error: None };
        module.visit(&mut collect);
        let Collect { flat, error, .. } = collect;
        if let Some(e) = error {
            return Err(e);
        }
        if flat.is_empty() {
            return Err(not_replicas(
                "no member has a gradient of any parameter of `module` (a replica made with `to_device` is not a leaf of its own: use `fork`)".into(),
            ));
        }
        if let Some(m) = grads.iter().position(|g| !g.is_empty()) {
            return Err(not_replicas(format!(
                "member {m} has gradients of parameters `module` does not have"
            )));
        }
        let mut sums = std::collections::HashMap::with_capacity(flat.len());
        let mut bucket: Vec<(ParamId, Vec<Tensor<1>>)> = Vec::new();
        let mut elements = 0;
        let members = self.len();
        let mut flush = |comm: &mut Comm, bucket: &mut Vec<(ParamId, Vec<Tensor<1>>)>| -> Result<()> {
            if bucket.is_empty() {
                return Ok(());
            }
            let lens: Vec<usize> = bucket.iter().map(|(_, parts)| parts[0].dims()[0]).collect();
            let per_member: Vec<Tensor<1>> = (0..members)
                .map(|m| Tensor::cat(bucket.iter().map(|(_, parts)| parts[m].clone()).collect(), 0))
                .collect();
            let summed = comm.all_reduce(per_member)?;
            let mut start = 0;
            for ((id, _), len) in bucket.drain(..).zip(lens) {
                let parts = summed.iter().map(|s| s.clone().slice(start..start + len)).collect();
                sums.insert(id, parts);
                start += len;
            }
            Ok(())
        };
        for (id, parts) in flat {
            let n = parts[0].dims()[0];
            if elements + n > self.bucket_elements {
                flush(self, &mut bucket)?;
                elements = 0;
            }
            elements += n;
            bucket.push((id, parts));
        }
        flush(self, &mut bucket)?;
        module.visit(&mut Restore { grads: &mut grads, sums });
        Ok(grads)
    }
}
