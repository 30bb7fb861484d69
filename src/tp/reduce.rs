//! What a tensor-parallel layer sums its members' partials with: the one-process [`Comm`], or
//! (feature `mpi`) the communicator across MPI ranks, [`crate::ranks::RankComm`], whose
//! members are this process's share of a model split over every rank's members.

use crate::comm::fused::FusedRound;
use crate::comm::{AllReduceOptions, Comm};
use crate::error::Result;
use crate::tensor::Tensor;

/// Sums one tensor per member of this process with every other member's partial, in place
/// (afterwards every member, of every process, holds the same bits), and gathers the members'
/// tensors.
pub trait Reducer {
    /// The all-reduce of `parts` (one per member of this process, in member order).
    fn all_reduce(&mut self, parts: &mut [&Tensor], opts: &AllReduceOptions) -> Result<()>;

    /// The all-gather of `send` (one per member of this process) into every member's `recv`,
    /// in global member order.
    fn all_gather(&mut self, send: &[&Tensor], recv: &mut [&Tensor]) -> Result<()>;

    /// A round of `n` elements the caller records into its own kernels (DevicePoll), or
    /// `None` where this reducer has none (then [`Reducer::all_reduce`] gives the same bits).
    #[doc(hidden)]
    fn fused_round(&mut self, _n: usize) -> Result<Option<FusedRound<'_>>> {
        Ok(None)
    }
}

impl Reducer for Comm {
    fn all_reduce(&mut self, parts: &mut [&Tensor], opts: &AllReduceOptions) -> Result<()> {
        Comm::all_reduce(self, parts, opts)
    }

    fn all_gather(&mut self, send: &[&Tensor], recv: &mut [&Tensor]) -> Result<()> {
        Comm::all_gather(self, send, recv)
    }

    fn fused_round(&mut self, n: usize) -> Result<Option<FusedRound<'_>>> {
        Comm::fused_round(self, n)
    }
}

#[cfg(feature = "mpi")]
impl Reducer for crate::ranks::RankComm {
    fn all_reduce(&mut self, parts: &mut [&Tensor], opts: &AllReduceOptions) -> Result<()> {
        crate::ranks::RankComm::all_reduce(self, parts, opts)
    }

    fn all_gather(&mut self, send: &[&Tensor], recv: &mut [&Tensor]) -> Result<()> {
        crate::ranks::RankComm::all_gather(self, send, recv)
    }
}
