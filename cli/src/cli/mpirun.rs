//! What a command started under `mpirun` does first (`decode --ranks`, `bench ranks`; feature
//! `mpi`): MPI initialized as `RankComm` needs it, and this rank's members.

use crossgpu::ranks::local_rank;
use crossgpu::{DeviceGroup, GroupSpec, Instance};
use mpi::traits::Communicator;

use super::{fail, CliResult};

/// MPI initialized as `RankComm` needs it, and this process's rank.
pub fn init_mpi() -> CliResult<(mpi::environment::Universe, usize)> {
    let (universe, threading) = mpi::initialize_with_threading(mpi::Threading::Serialized)
        .ok_or_else(|| fail("MPI was already initialized"))?;
    if threading < mpi::Threading::Serialized {
        return Err(fail(format!("the MPI library gives {threading:?} threads; RankComm needs Serialized")));
    }
    let rank = universe.world().rank() as usize;
    Ok((universe, rank))
}

/// This rank's members: CROSSGPU_DEVICES when set (the same in every rank unless the launcher
/// sets it per rank), else the adapter of this rank's index on its host.
pub fn rank_group(instance: &Instance) -> CliResult<DeviceGroup> {
    Ok(match std::env::var("CROSSGPU_DEVICES") {
        Ok(_) => DeviceGroup::from_env(instance)?,
        Err(_) => {
            let adapters = instance.adapters().len().max(1);
            let spec = (local_rank().unwrap_or(0) % adapters).to_string();
            DeviceGroup::open(instance, &GroupSpec::parse(&spec)?)?
        }
    })
}
