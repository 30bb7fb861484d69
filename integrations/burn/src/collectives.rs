//! The collectives beside the f32 sum, on burn float tensors (f32, f16, bf16): what
//! burn-collective offers — all-reduce with sum and mean, broadcast, reduce to a root — and
//! NCCL's other two, all-gather and reduce-scatter, plus max, min and product. Each goes
//! through [`crossgpu::embed::WgpuComm`]'s collective of the same name on the tensors' own
//! memory, with the same guarantees as [`Comm::all_reduce`]: every member's result bitwise the
//! same, everything checked before any work is submitted, the call returning once submitted.

use burn::tensor::{DType as BurnDType, Device, Tensor};
use burn_cubecl::{tensor::CubeTensor, CubeBackend, CubeDevice};
use crossgpu::embed::{WgpuComm, WgpuTensor};
use crossgpu::{DType, ReduceOp};
use cubecl::wgpu::{AutoCompiler, WgpuServer};

use crate::comm::Comm;
use crate::error::{Error, Result};

/// crossgpu's dtype of a burn float dtype it can reduce.
fn wire(d: BurnDType) -> Option<DType> {
    match d {
        BurnDType::F32 => Some(DType::F32),
        BurnDType::F16 => Some(DType::F16),
        BurnDType::BF16 => Some(DType::BF16),
        _ => None,
    }
}

impl Comm {
    /// All-reduce with `op` (burn-collective's sum is [`ReduceOp::Sum`], its mean
    /// [`ReduceOp::Avg`]: the sum times 1/members rounded to f32, one rounding more than a
    /// division) of f32, f16 or bf16 tensors, one per member, of one shape and dtype; returns
    /// the results, one per member on its device, bitwise the same. f16 and bf16 accumulate in
    /// f32 and round once to nearest even; max and min keep the earlier member's value on a
    /// tie; a NaN anywhere gives the canonical NaN ([`crossgpu::ReduceOp`] has the rules).
    /// In place where a tensor owns its memory, as [`Comm::all_reduce`].
    pub fn all_reduce_op<const D: usize>(
        &mut self,
        tensors: Vec<Tensor<D>>,
        op: ReduceOp,
    ) -> Result<Vec<Tensor<D>>> {
        self.check_all("all_reduce", &tensors, true)?;
        let prims = self.owned(tensors)?;
        self.submit(&prims, &prims, |w, t, _| w.all_reduce_op(t, op))?;
        Ok(prims.into_iter().map(Tensor::from_primitive::<CubeBackend>).collect())
    }

    /// Broadcast: every member's result is bitwise the `root` member's tensor (one shape and
    /// float dtype for all; the others' values are overwritten where they own their memory).
    pub fn broadcast<const D: usize>(
        &mut self,
        tensors: Vec<Tensor<D>>,
        root: usize,
    ) -> Result<Vec<Tensor<D>>> {
        self.check_all("broadcast", &tensors, true)?;
        self.check_root(root)?;
        let prims = self.owned(tensors)?;
        self.submit(&prims, &prims, |w, t, _| w.broadcast(t, root))?;
        Ok(prims.into_iter().map(Tensor::from_primitive::<CubeBackend>).collect())
    }

    /// Reduce to `root`: the root's result is the reduction with `op` (bitwise what
    /// [`Comm::all_reduce_op`] gives); the other members' tensors come back as they were.
    pub fn reduce<const D: usize>(
        &mut self,
        tensors: Vec<Tensor<D>>,
        root: usize,
        op: ReduceOp,
    ) -> Result<Vec<Tensor<D>>> {
        self.check_all("reduce", &tensors, true)?;
        self.check_root(root)?;
        let prims = self.owned(tensors)?;
        self.submit(&prims, &prims, |w, t, _| w.reduce(t, root, op))?;
        Ok(prims.into_iter().map(Tensor::from_primitive::<CubeBackend>).collect())
    }

    /// All-gather along the first dimension: every member gets the members' tensors
    /// concatenated in member order (NCCL's allgather; the first dimensions may differ, as in
    /// allgatherv, the others must match). The inputs are not changed.
    pub fn all_gather<const D: usize>(&mut self, tensors: Vec<Tensor<D>>) -> Result<Vec<Tensor<D>>> {
        self.check_all("all_gather", &tensors, false)?;
        if D == 0 {
            return Err(crossgpu::Error::InvalidArgument(
                "all_gather of scalars: gather tensors of rank 1 or more".into(),
            )
            .into());
        }
        let mut shape = tensors[0].dims();
        shape[0] = tensors.iter().map(|t| t.dims()[0]).sum();
        let send = self.contiguous(tensors)?;
        let recv = self.outputs(shape, send[0].dtype)?;
        self.submit(&send, &recv, |w, s, r| w.all_gather(s, r))?;
        Ok(recv.into_iter().map(Tensor::from_primitive::<CubeBackend>).collect())
    }

    /// Reduce-scatter along the first dimension: the tensors (one shape, the first dimension a
    /// multiple of the members) are reduced with `op`, and member i gets rows
    /// `i·d/n .. (i+1)·d/n` of the result (NCCL's reduceScatter). The inputs are not changed.
    pub fn reduce_scatter<const D: usize>(
        &mut self,
        tensors: Vec<Tensor<D>>,
        op: ReduceOp,
    ) -> Result<Vec<Tensor<D>>> {
        self.check_all("reduce_scatter", &tensors, true)?;
        let n = self.len();
        let mut shape = tensors[0].dims();
        if D == 0 || !shape[0].is_multiple_of(n) {
            return Err(crossgpu::Error::InvalidArgument(format!(
                "reduce_scatter of shape {shape:?}: the first dimension must be a multiple of the {n} members"
            ))
            .into());
        }
        shape[0] /= n;
        let send = self.contiguous(tensors)?;
        let recv = self.outputs(shape, send[0].dtype)?;
        self.submit(&send, &recv, |w, s, r| w.reduce_scatter(s, r, op))?;
        Ok(recv.into_iter().map(Tensor::from_primitive::<CubeBackend>).collect())
    }

    /// The checks every collective makes first: one tensor per member, each on its member's
    /// device, not autodiff, of one float dtype crossgpu reduces, and of one shape (all
    /// dimensions, or all but the first where `whole_shape` is false).
    fn check_all<const D: usize>(
        &self,
        what: &'static str,
        tensors: &[Tensor<D>],
        whole_shape: bool,
    ) -> Result<DType> {
        let n = self.len();
        if tensors.len() != n {
            return Err(Error::Count { what, expected: n, got: tensors.len() });
        }
        let shape = tensors[0].dims();
        let dtype = tensors[0].dtype();
        for (i, t) in tensors.iter().enumerate() {
            if t.is_autodiff() {
                return Err(Error::Autodiff { member: i });
            }
            if t.dtype() != dtype || wire(t.dtype()).is_none() {
                return Err(Error::DType { member: i, got: t.dtype() });
            }
            let device = t.device();
            if &device != self.device(i) {
                return Err(Error::Device {
                    member: i,
                    got: format!("{device:?}"),
                    expected: format!("{:?}", self.device(i)),
                });
            }
            let dims = t.dims();
            let same = if whole_shape { dims == shape } else { D == 0 || dims[1..] == shape[1..] };
            if !same {
                return Err(Error::Shape { member: i, got: dims.to_vec(), expected: shape.to_vec() });
            }
        }
        Ok(wire(dtype).expect("checked"))
    }

    fn check_root(&self, root: usize) -> Result<()> {
        if root >= self.len() {
            return Err(crossgpu::Error::IndexOutOfRange {
                what: "root member",
                index: root,
                len: self.len(),
                of: "members",
            }
            .into());
        }
        Ok(())
    }

    /// The tensors' primitives, each owning its memory contiguously (copied where another
    /// tensor shares it or it is strided, counted in [`Comm::copied_tensors`]).
    fn owned<const D: usize>(&mut self, tensors: Vec<Tensor<D>>) -> Result<Vec<CubeTensor>> {
        let mut out = Vec::with_capacity(tensors.len());
        for (i, t) in tensors.into_iter().enumerate() {
            let p = primitive(i, t)?;
            let owned = p.can_mut() && p.is_contiguous();
            if !owned {
                self.copied += 1;
            }
            out.push(if owned { p } else { p.copy() });
        }
        Ok(out)
    }

    /// The tensors' primitives, contiguous (copied where strided); read only, so shared memory
    /// is fine.
    fn contiguous<const D: usize>(&mut self, tensors: Vec<Tensor<D>>) -> Result<Vec<CubeTensor>> {
        let mut out = Vec::with_capacity(tensors.len());
        for (i, t) in tensors.into_iter().enumerate() {
            let p = primitive(i, t)?;
            out.push(if p.is_contiguous() { p } else { p.copy() });
        }
        Ok(out)
    }

    /// One zero-filled tensor of `shape` and `dtype` per member (written by burn before
    /// crossgpu's raw commands use its memory, as the embedding's contract asks).
    fn outputs<const D: usize>(&self, shape: [usize; D], dtype: BurnDType) -> Result<Vec<CubeTensor>> {
        (0..self.len())
            .map(|i| {
                let device: &Device = self.device(i);
                primitive(i, Tensor::<D>::zeros(shape, (device, dtype)))
            })
            .collect()
    }

    /// Hands the primitives' memory to `f` as crossgpu tensors: each handle's buffer and
    /// offset (pinned while held), after flushing burn's queued work on every member.
    fn submit(
        &mut self,
        send: &[CubeTensor],
        recv: &[CubeTensor],
        f: impl FnOnce(&mut WgpuComm, &[WgpuTensor<'_>], &[WgpuTensor<'_>]) -> crossgpu::Result<()>,
    ) -> Result<()> {
        let mut held = Vec::with_capacity(send.len() + recv.len());
        for (k, p) in send.iter().chain(recv).enumerate() {
            let i = k % send.len();
            if p.device != CubeDevice::Wgpu(self.cube(i).clone()) {
                return Err(Error::Device {
                    member: i,
                    got: format!("{:?}", p.device),
                    expected: format!("{:?}", self.cube(i)),
                });
            }
            let runtime = |e: &dyn std::fmt::Debug| Error::Runtime { member: i, why: format!("{e:?}") };
            let r = p
                .client
                .get_resource::<WgpuServer<AutoCompiler>>(p.handle.clone())
                .map_err(|e| runtime(&e))?;
            // The handle must hold the tensor's every element, or a collective would reach into
            // a neighbouring allocation. (An f16 tensor of odd length ends inside a word whose
            // other half the kernel writes back unchanged; cubecl starts every allocation at
            // an aligned offset, so no other tensor starts inside it either.)
            let bytes = p.meta.num_elements() * if p.dtype == BurnDType::F32 { 4 } else { 2 };
            if r.resource().size < bytes as u64 {
                return Err(runtime(&format!(
                    "the tensor's memory holds {} bytes, its {} elements need {bytes}",
                    r.resource().size,
                    p.meta.num_elements(),
                )));
            }
            p.client.flush().map_err(|e| runtime(&e))?;
            held.push(r);
        }
        let tensor = |k: usize, p: &CubeTensor| WgpuTensor {
            buffer: &held[k].resource().buffer,
            offset: held[k].resource().offset,
            len: p.meta.num_elements(),
            dtype: wire(p.dtype).unwrap_or(DType::F32),
        };
        let s: Vec<WgpuTensor<'_>> = send.iter().enumerate().map(|(k, p)| tensor(k, p)).collect();
        let r: Vec<WgpuTensor<'_>> =
            recv.iter().enumerate().map(|(k, p)| tensor(send.len() + k, p)).collect();
        f(&mut self.wgpu, &s, &r)?;
        Ok(())
    }
}

fn primitive<const D: usize>(i: usize, t: Tensor<D>) -> Result<CubeTensor> {
    t.try_into_primitive::<CubeBackend>().map_err(|e| Error::Runtime {
        member: i,
        why: format!("not a tensor of burn's wgpu backend without fusion: {e:?}"),
    })
}
