//! `crossgpu bench ranks`: its flags, checked before MPI starts, and the answer of a crossgpu
//! built without the `mpi` feature. The measurement under `mpirun` is `ranks_mpi.rs`.

use clap::Args;

use crate::cli::{fail, CliResult};

/// `crossgpu bench ranks`.
#[derive(Args, Debug, Clone)]
pub struct RanksArgs {
    /// All-reduce payloads, bytes of f32 per member (multiples of 4).
    #[arg(long, value_delimiter = ',', default_value = "32768,262144,4194304,67108864")]
    pub sizes: Vec<usize>,
    /// Timed calls per size and method (after 3 unmeasured ones).
    #[arg(long, default_value_t = 30)]
    pub iters: usize,
    /// The model's layers (two all-reduces each) [default: the 27B-class preset's].
    #[arg(long, default_value_t = 64)]
    pub layers: usize,
    /// The model's hidden size: an all-reduced activation is this many f32.
    #[arg(long, default_value_t = 5120)]
    pub hidden: usize,
    /// One host's time for one token, ms [default: one H200 decoding the 27B-class preset,
    /// 65.05 tokens/s, docs/BENCHMARKS.md].
    #[arg(long, default_value_t = 15.37)]
    pub token_ms: f64,
}

impl RanksArgs {
    /// The sizes, every flag checked before MPI starts.
    pub fn checked_sizes(&self) -> CliResult<Vec<usize>> {
        if self.sizes.is_empty() || self.sizes.iter().any(|&b| b == 0 || b % 4 != 0) {
            return Err(fail(format!(
                "--sizes {:?}: each must be a positive multiple of 4 bytes",
                self.sizes
            )));
        }
        if self.iters == 0 || self.layers == 0 || self.hidden == 0 {
            return Err(fail("--iters, --layers and --hidden must be at least 1"));
        }
        if !(self.token_ms.is_finite() && self.token_ms > 0.0) {
            return Err(fail(format!("--token-ms {}: must be a positive number", self.token_ms)));
        }
        Ok(self.sizes.clone())
    }
}

/// `crossgpu bench ranks` in a crossgpu built without MPI: the flags checked, then how to build
/// it with MPI.
#[cfg(not(feature = "mpi"))]
pub fn bench_ranks(args: &RanksArgs) -> CliResult {
    args.checked_sizes()?;
    Err(fail(
        "bench ranks: this crossgpu was built without MPI; build it with `cargo build --release -p crossgpu-cli --features mpi` (Debian: apt-get install libopenmpi-dev openmpi-bin libclang-dev) and start it under mpirun",
    ))
}
