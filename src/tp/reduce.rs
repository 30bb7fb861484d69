//! What a tensor-parallel layer sums its members' partials with: the one-process [`Comm`], or
//! (feature `mpi`) the communicator across MPI ranks, [`crate::ranks::RankComm`], whose
//! members are this process's share of a model split over every rank's members.

use crate::comm::{AllReduceOptions, Comm};
use crate::error::Result;
use crate::tensor::Tensor;

/// Sums one tensor per member of this process with every other member's partial, in place:
/// afterwards every member (of every process) holds the same bits.
pub trait Reducer {
    /// The all-reduce of `parts` (one per member of this process, in member order).
    fn all_reduce(&mut self, parts: &mut [&Tensor], opts: &AllReduceOptions) -> Result<()>;

    /// The one-process communicator behind this one, for what only it does (rounds fused
    /// into the next kernel, a step recorded once and replayed); `None` across ranks.
    fn local(&mut self) -> Option<&mut Comm> {
        None
    }
}

impl Reducer for Comm {
    fn all_reduce(&mut self, parts: &mut [&Tensor], opts: &AllReduceOptions) -> Result<()> {
        Comm::all_reduce(self, parts, opts)
    }

    fn local(&mut self) -> Option<&mut Comm> {
        Some(self)
    }
}

#[cfg(feature = "mpi")]
impl Reducer for crate::ranks::RankComm {
    fn all_reduce(&mut self, parts: &mut [&Tensor], opts: &AllReduceOptions) -> Result<()> {
        crate::ranks::RankComm::all_reduce(self, parts, opts)
    }
}
