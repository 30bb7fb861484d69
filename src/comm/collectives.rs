//! The collectives beside the f32 sum — all-reduce with any [`ReduceOp`] and dtype,
//! broadcast, reduce, all-gather (equal or unequal shares) and reduce-scatter — planned here as
//! rounds of the same two-phase exchange the sum uses (`exchange.rs`), so every transport runs
//! them: each member sends its words into its slot region, and each member combines the regions
//! it needs in member order with `combine_slots.wgsl` (Generic: the same on the host).
//!
//! The promises are the sum's: every member that receives a result receives bitwise the same
//! one; a call refused up front (counts, owners, dtypes, lengths, roots) writes nothing; a
//! failure after submit poisons the communicator; every wait is bounded.

use std::borrow::Borrow;

use super::exchange::{per_word, CombineOp, Exchange, PlaceSpec, RoundSpec, SendSpec};
use super::transport::{RoundContext, RoundWork};
use super::{AllReduceOptions, Comm, Precision};
use crate::error::{Error, Result};
use crate::tensor::{DType, Tensor};

/// How a reduction combines the members' values, in member order, every member computing the
/// same operations: floats (f32; f16 and bf16 widened exactly to f32, the result rounded to
/// nearest even once) round once per operation, integers (i32, u32) wrap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReduceOp {
    /// The sum.
    #[default]
    Sum,
    /// The product.
    Prod,
    /// The largest value (`>`; on a tie, e.g. -0 and +0, the earlier member's). A NaN anywhere
    /// gives NaN.
    Max,
    /// The smallest value (`<`, ties as for `Max`). A NaN anywhere gives NaN.
    Min,
    /// The f32 sum times 1 / members (rounded to f32): one rounding more than a division, the
    /// same bits on every driver. Floats only.
    Avg,
}

impl std::fmt::Display for ReduceOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Sum => "sum",
            Self::Prod => "prod",
            Self::Max => "max",
            Self::Min => "min",
            Self::Avg => "avg",
        })
    }
}

impl ReduceOp {
    /// Every op, for tables and tests.
    pub const ALL: [ReduceOp; 5] = [Self::Sum, Self::Prod, Self::Max, Self::Min, Self::Avg];

    fn combine(self) -> CombineOp {
        match self {
            Self::Sum => CombineOp::Sum,
            Self::Prod => CombineOp::Prod,
            Self::Max => CombineOp::Max,
            Self::Min => CombineOp::Min,
            Self::Avg => CombineOp::Avg,
        }
    }
}

/// A collective's shape: what its rounds step over and what each round does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Collective {
    /// In place: every member ends with the reduction of every member's tensor.
    AllReduce(ReduceOp),
    /// In place: every member ends with the root's tensor.
    Broadcast { root: usize },
    /// In place on the root, which ends with the reduction; the others' tensors stay.
    Reduce { root: usize, op: ReduceOp },
    /// Every member's receive tensor ends with every member's send tensor, in member order.
    AllGather,
    /// Member i's receive tensor ends with its segment of the reduction of the send tensors
    /// (segments in member order, as long as the receive tensors).
    ReduceScatter(ReduceOp),
}

impl Collective {
    /// The name a message uses.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::AllReduce(_) => "all_reduce",
            Self::Broadcast { .. } => "broadcast",
            Self::Reduce { .. } => "reduce",
            Self::AllGather => "all_gather",
            Self::ReduceScatter(_) => "reduce_scatter",
        }
    }

    /// Three words that tell two calls apart (kind, op, root): what the ranks compare.
    #[cfg_attr(not(feature = "mpi"), allow(dead_code))]
    pub(crate) fn code(self) -> [u32; 3] {
        let op =
            self.op().map_or(0, |op| 1 + ReduceOp::ALL.iter().position(|&o| o == op).unwrap_or(0) as u32);
        let kind = match self {
            Self::AllReduce(_) => 0,
            Self::Broadcast { .. } => 1,
            Self::Reduce { .. } => 2,
            Self::AllGather => 3,
            Self::ReduceScatter(_) => 4,
        };
        [kind, op, self.root().unwrap_or(0) as u32]
    }

    /// Whether it writes its first tensors in place (no receive tensors).
    pub(crate) fn in_place(self) -> bool {
        !matches!(self, Self::AllGather | Self::ReduceScatter(_))
    }

    fn op(self) -> Option<ReduceOp> {
        match self {
            Self::AllReduce(op) | Self::Reduce { op, .. } | Self::ReduceScatter(op) => Some(op),
            Self::Broadcast { .. } | Self::AllGather => None,
        }
    }

    fn root(self) -> Option<usize> {
        match self {
            Self::Broadcast { root } | Self::Reduce { root, .. } => Some(root),
            _ => None,
        }
    }

    /// Checks the lengths, dtypes and root of a call with these send and receive tensors (one
    /// of each per member; in place, the receive lengths are the send lengths): `Ok(dtype)`.
    pub(crate) fn check(self, dtypes: &[DType], send: &[usize], recv: &[usize]) -> Result<DType> {
        let name = self.name();
        let nm = send.len();
        let dtype = dtypes.first().copied().unwrap_or(DType::F32);
        if let Some((i, &d)) = dtypes.iter().enumerate().find(|(_, &d)| d != dtype) {
            return Err(Error::DtypeMismatch {
                what: format!("{name} tensor {i} (as tensor 0)"),
                expected: dtype,
                got: d,
            });
        }
        if self.op() == Some(ReduceOp::Avg) && matches!(dtype, DType::I32 | DType::U32) {
            return Err(Error::InvalidArgument(format!(
                "{name} with avg of {dtype} tensors: avg is for floats (f32, f16, bf16); sum the integers and divide"
            )));
        }
        if let Some(root) = self.root().filter(|&r| r >= nm) {
            return Err(Error::IndexOutOfRange {
                what: "root member",
                index: root,
                len: nm,
                of: "members in the communicator",
            });
        }
        let equal = |lens: &[usize], what: &str| match lens.iter().enumerate().find(|(_, &l)| l != lens[0]) {
            Some((i, &l)) => Err(Error::LengthMismatch {
                what: format!("{name} {what} {i} (as {what} 0)"),
                expected: lens[0],
                got: l,
            }),
            None => Ok(()),
        };
        match self {
            Self::AllGather => {
                let total = send.iter().sum::<usize>();
                if let Some((i, &l)) = recv.iter().enumerate().find(|(_, &l)| l != total) {
                    return Err(Error::LengthMismatch {
                        what: format!("{name} receive tensor {i} (the send tensors' elements together)"),
                        expected: total,
                        got: l,
                    });
                }
            }
            Self::ReduceScatter(_) => {
                equal(send, "send tensor")?;
                let total = recv.iter().sum::<usize>();
                if send.first().is_some_and(|&s| s != total) {
                    return Err(Error::LengthMismatch {
                        what: format!("{name} receive tensors' elements together (a send tensor's)"),
                        expected: send[0],
                        got: total,
                    });
                }
            }
            _ => equal(send, "tensor")?,
        }
        Ok(dtype)
    }

    /// The elements the rounds step over.
    pub(crate) fn extent(self, send: &[usize]) -> usize {
        match self {
            Self::AllGather => send.iter().copied().max().unwrap_or(0),
            _ => send.first().copied().unwrap_or(0),
        }
    }

    /// The round over elements `c0 .. c0 + k` of the extent (`c0` a multiple of the elements a
    /// word holds), with these send and receive lengths.
    pub(crate) fn round(self, send: &[usize], recv: &[usize], c0: usize, k: usize) -> RoundSpec {
        let nm = send.len();
        let all = || (0..nm).map(|_| Some(SendSpec { elem: c0, n: k })).collect::<Vec<_>>();
        let reduce = |op: ReduceOp| PlaceSpec {
            dst: 0,
            dst_elem: c0,
            n: k,
            src_elem: 0,
            first: 0,
            count: nm,
            op: op.combine(),
        };
        match self {
            Self::AllReduce(op) => RoundSpec { sends: all(), places: vec![vec![reduce(op)]; nm] },
            Self::Reduce { root, op } => RoundSpec {
                sends: all(),
                places: (0..nm).map(|i| if i == root { vec![reduce(op)] } else { vec![] }).collect(),
            },
            Self::Broadcast { root } => RoundSpec {
                sends: (0..nm).map(|j| (j == root).then_some(SendSpec { elem: c0, n: k })).collect(),
                places: (0..nm)
                    .map(|i| match i == root {
                        true => vec![],
                        false => vec![PlaceSpec {
                            first: root,
                            count: 1,
                            op: CombineOp::Copy,
                            ..reduce(ReduceOp::Sum)
                        }],
                    })
                    .collect(),
            },
            Self::AllGather => {
                let part = |j: usize| (c0 < send[j]).then(|| SendSpec { elem: c0, n: k.min(send[j] - c0) });
                let starts: Vec<usize> =
                    send.iter().scan(0, |s, &l| Some(std::mem::replace(s, *s + l))).collect();
                let places = (0..nm)
                    .flat_map(|j| part(j).map(|s| (j, s)))
                    .map(|(j, s)| PlaceSpec {
                        dst: 1,
                        dst_elem: starts[j] + c0,
                        n: s.n,
                        src_elem: 0,
                        first: j,
                        count: 1,
                        op: CombineOp::Copy,
                    })
                    .collect::<Vec<_>>();
                RoundSpec { sends: (0..nm).map(part).collect(), places: vec![places; nm] }
            }
            Self::ReduceScatter(op) => {
                let mut start = 0;
                let places = recv
                    .iter()
                    .map(|&r| {
                        let (lo, hi) = (c0.max(start), (c0 + k).min(start + r));
                        let p = (lo < hi).then(|| PlaceSpec {
                            dst: 1,
                            dst_elem: lo - start,
                            n: hi - lo,
                            src_elem: lo - c0,
                            first: 0,
                            count: nm,
                            op: op.combine(),
                        });
                        start += r;
                        p.into_iter().collect()
                    })
                    .collect();
                RoundSpec { sends: all(), places }
            }
        }
    }
}

/// Which path an all-reduce of `dtype` tensors with `opts` takes: `None` for the f32 sum (its
/// own transports' path, f16 wire and zero contributions included), else the collective that
/// reduces as `opts.op` says — refused (naming `caller`) where `opts` asks for the f16 wire or
/// zero contributions, which only the f32 sum has. `Comm::all_reduce` and `RankComm::all_reduce`
/// both decide here.
pub(crate) fn all_reduce_beside_the_sum(
    opts: &AllReduceOptions,
    dtype: DType,
    caller: &str,
) -> Result<Option<Collective>> {
    if opts.op == ReduceOp::Sum && dtype == DType::F32 {
        return Ok(None);
    }
    if opts.precision == Precision::F16 || !opts.zero_contribution.is_empty() {
        return Err(Error::InvalidArgument(format!(
            "{caller} with {} of {dtype} tensors: the f16 wire and zero contributions are for the f32 sum only",
            opts.op
        )));
    }
    Ok(Some(Collective::AllReduce(opts.op)))
}

impl Comm {
    /// All-gather (NCCL's allgather, and allgatherv for unequal shares): member i's `recv[i]`
    /// ends with every member's `send[j]`, in member order (`send[0]`'s elements first). The
    /// shares may differ, and be empty; every `recv[i]` holds their total. One dtype for all,
    /// any dtype (the words travel as stored, so every member ends with the same bits). A
    /// receive tensor may not be its member's send tensor.
    ///
    /// Like [`Comm::all_reduce`]: invalid input is an error naming it and writes nothing; a
    /// failure after submit poisons the communicator.
    pub fn all_gather<S: Borrow<Tensor>, R: Borrow<Tensor>>(
        &mut self,
        send: &[S],
        recv: &mut [R],
    ) -> Result<()> {
        let send: Vec<&Tensor> = send.iter().map(Borrow::borrow).collect();
        let recv: Vec<&Tensor> = recv.iter().map(Borrow::borrow).collect();
        self.collective(Collective::AllGather, &send, &recv)
    }

    /// Reduce-scatter: the send tensors (one per member, one length) are reduced with `op` in
    /// member order, and member i's `recv[i]` ends with its segment of the result — segments
    /// in member order, as long as the receive tensors (equal, as NCCL's, or not), which
    /// together hold a send tensor's elements. Dtypes f32, f16, bf16, i32, u32 (see
    /// [`ReduceOp`] for the arithmetic); the segment a member receives is bitwise what every
    /// other member would compute for it. A receive tensor may not be its member's send tensor.
    pub fn reduce_scatter<S: Borrow<Tensor>, R: Borrow<Tensor>>(
        &mut self,
        send: &[S],
        recv: &mut [R],
        op: ReduceOp,
    ) -> Result<()> {
        let send: Vec<&Tensor> = send.iter().map(Borrow::borrow).collect();
        let recv: Vec<&Tensor> = recv.iter().map(Borrow::borrow).collect();
        self.collective(Collective::ReduceScatter(op), &send, &recv)
    }

    /// Broadcast: every member's tensor ends with bitwise the root member's (in place, one
    /// length and dtype for all, any dtype).
    pub fn broadcast<T: Borrow<Tensor>>(&mut self, tensors: &mut [T], root: usize) -> Result<()> {
        let t: Vec<&Tensor> = tensors.iter().map(Borrow::borrow).collect();
        self.collective(Collective::Broadcast { root }, &t, &t)
    }

    /// Reduce: the root member's tensor ends with the reduction of every member's with `op`,
    /// bitwise what [`Comm::all_reduce`] with that op gives; the others' tensors stay as they
    /// were.
    pub fn reduce<T: Borrow<Tensor>>(&mut self, tensors: &mut [T], root: usize, op: ReduceOp) -> Result<()> {
        let t: Vec<&Tensor> = tensors.iter().map(Borrow::borrow).collect();
        self.collective(Collective::Reduce { root, op }, &t, &t)
    }

    /// Checks a collective's tensors before anything is recorded: counts, owners, one dtype,
    /// and that no receive tensor is its member's send tensor. Returns the dtype and the send
    /// and receive lengths ([`Collective::check`] checks those).
    pub(crate) fn check_tensors(
        &self,
        c: Collective,
        send: &[&Tensor],
        recv: &[&Tensor],
    ) -> Result<(DType, Vec<usize>, Vec<usize>)> {
        self.check_healthy()?;
        let name = c.name();
        for (what, ts) in [("send tensor", send), ("receive tensor", recv)] {
            if ts.len() != self.members.len() {
                return Err(Error::LengthMismatch {
                    what: format!("{name}: one {what} per member"),
                    expected: self.members.len(),
                    got: ts.len(),
                });
            }
            for (i, t) in ts.iter().enumerate() {
                t.check_on(&self.members[i].shared, &format!("{name} {what} {i}"))?;
            }
        }
        if !c.in_place() {
            if let Some(i) = (0..send.len()).find(|&i| send[i].id() == recv[i].id()) {
                return Err(Error::InvalidArgument(format!(
                    "{name}: member {i}'s receive tensor is its send tensor; give it a tensor of its own"
                )));
            }
        }
        let dtype = send.first().map_or(DType::F32, |t| t.dtype());
        let tensors =
            send.iter().map(|t| ("send tensor", t)).chain(recv.iter().map(|t| ("receive tensor", t)));
        for (i, (what, t)) in tensors.enumerate() {
            if t.dtype() != dtype {
                let i = i % send.len().max(1);
                return Err(Error::DtypeMismatch {
                    what: format!("{name} {what} {i} (as send tensor 0)"),
                    expected: dtype,
                    got: t.dtype(),
                });
            }
        }
        Ok((dtype, send.iter().map(|t| t.len()).collect(), recv.iter().map(|t| t.len()).collect()))
    }

    /// [`Comm::check_tensors`], then the lengths, dtype and root ([`Collective::check`]).
    fn check_collective(
        &self,
        c: Collective,
        send: &[&Tensor],
        recv: &[&Tensor],
    ) -> Result<(DType, Vec<usize>, Vec<usize>)> {
        let (dtype, send_lens, recv_lens) = self.check_tensors(c, send, recv)?;
        c.check(&vec![dtype; send.len()], &send_lens, &recv_lens)?;
        Ok((dtype, send_lens, recv_lens))
    }

    /// Runs collective `c` over `send` and `recv` (the same tensors in place) on the
    /// communicator's transport, in rounds of at most a slot each.
    pub(crate) fn collective(&mut self, c: Collective, send: &[&Tensor], recv: &[&Tensor]) -> Result<()> {
        let (dtype, send_lens, recv_lens) = self.check_collective(c, send, recv)?;
        let extent = c.extent(&send_lens);
        if extent == 0 {
            return Ok(());
        }
        if let Err(e) = self.transport.begin_call(&self.members) {
            self.poison(&e);
            return Err(e);
        }
        let per = per_word(dtype);
        self.prepare_slots(extent.div_ceil(per) as u64)?;
        let chunk = match self.slot_capacity() as usize {
            0 => extent,
            cap => cap * per,
        };
        let scale = 1.0 / self.members.len() as f32;
        let dst: Vec<[&Tensor; 2]> = send.iter().zip(recv).map(|(&s, &r)| [s, r]).collect();
        let cx =
            RoundContext { members: &self.members, submit_batches: &self.submit_batches, opts: &self.opts };
        let result = (0..extent).step_by(chunk).try_for_each(|c0| {
            let spec = c.round(&send_lens, &recv_lens, c0, chunk.min(extent - c0));
            let x = Exchange { dtype, scale, spec: &spec, send: send.to_vec(), dst: dst.clone() };
            self.transport.run_round(&cx, &mut self.round, &RoundWork::Exchange(&x))
        });
        match result {
            Ok(()) => {
                self.log.note(false, extent);
                Ok(())
            }
            Err(e) => {
                self.poison(&e);
                Err(e)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reduce_scatter_rounds_cut_segments_at_chunk_edges() {
        // Three members receiving 3, 0 and 4 elements of 7, in rounds of 4.
        let c = Collective::ReduceScatter(ReduceOp::Sum);
        let (send, recv) = ([7, 7, 7], [3, 0, 4]);
        let r0 = c.round(&send, &recv, 0, 4);
        let r1 = c.round(&send, &recv, 4, 3);
        let spans = |r: &RoundSpec| -> Vec<Vec<(usize, usize, usize)>> {
            r.places.iter().map(|ps| ps.iter().map(|p| (p.dst_elem, p.n, p.src_elem)).collect()).collect()
        };
        assert_eq!(spans(&r0), vec![vec![(0, 3, 0)], vec![], vec![(0, 1, 3)]]);
        assert_eq!(spans(&r1), vec![vec![], vec![], vec![(1, 3, 0)]]);
    }

    #[test]
    fn all_gather_rounds_send_what_each_share_has_left() {
        let c = Collective::AllGather;
        let (send, recv) = ([5, 0, 2], [7, 7, 7]);
        let r1 = c.round(&send, &recv, 4, 4);
        assert_eq!(r1.sends, vec![Some(SendSpec { elem: 4, n: 1 }), None, None]);
        assert_eq!(
            r1.places[2],
            vec![PlaceSpec {
                dst: 1,
                dst_elem: 4,
                n: 1,
                src_elem: 0,
                first: 0,
                count: 1,
                op: CombineOp::Copy
            }]
        );
    }

    #[test]
    fn checks_name_what_is_wrong() {
        let f = [DType::F32; 3];
        let e = Collective::AllGather.check(&f, &[1, 2, 3], &[6, 5, 6]).unwrap_err().to_string();
        assert!(e.contains("receive tensor 1"), "{e}");
        let e = Collective::Broadcast { root: 3 }.check(&f, &[1, 1, 1], &[1, 1, 1]).unwrap_err().to_string();
        assert!(e.contains("root"), "{e}");
        let e = Collective::AllReduce(ReduceOp::Avg).check(&[DType::I32; 3], &[1; 3], &[1; 3]).unwrap_err();
        assert!(e.to_string().contains("avg"), "{e}");
        let e = Collective::ReduceScatter(ReduceOp::Max).check(&f, &[4, 4, 4], &[1, 1, 1]).unwrap_err();
        assert!(e.to_string().contains("receive tensors"), "{e}");
    }
}
