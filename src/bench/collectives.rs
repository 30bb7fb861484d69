//! Every collective's latency and bandwidth, nccl-tests style: per collective, op, dtype and
//! size, `rounds` calls recorded back to back and one wait (the loop of [`super::allreduce`]);
//! the time per call is the batch's over its calls, summarised over batches. Sizes and
//! bandwidths follow nccl-tests (`doc/PERFORMANCE.md` there): `bytes` is the all-reduce's,
//! broadcast's and reduce's tensor, the all-gather's receive tensor and the reduce-scatter's
//! send tensor; algbw = bytes / time; busbw = algbw × the collective's bus factor (all-reduce
//! 2(n-1)/n, all-gather and reduce-scatter (n-1)/n, broadcast and reduce 1).

use std::time::Instant;

use serde::Serialize;

use super::allreduce::{has_cpu_member, schedule, POLL_ROUNDS_PER_SUBMIT};
use super::{data, summarize, Summary};
use crate::comm::{AllReduceOptions, Comm, CommOptions, Mode, ModeRequest, Precision, ReduceOp};
use crate::error::{Error, Result};
use crate::group::{DeviceGroup, Member};
use crate::tensor::{DType, Tensor};

/// A collective as the table names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `all_reduce` with an op.
    AllReduce,
    /// `all_gather`, equal shares.
    AllGather,
    /// `reduce_scatter` with an op, equal segments.
    ReduceScatter,
    /// `broadcast` from member 0.
    Broadcast,
    /// `reduce` to member 0 with an op.
    Reduce,
}

impl Kind {
    /// Every kind, in the table's order.
    pub const ALL: [Kind; 5] =
        [Self::AllReduce, Self::AllGather, Self::ReduceScatter, Self::Broadcast, Self::Reduce];

    /// Its name in the table and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Self::AllReduce => "all_reduce",
            Self::AllGather => "all_gather",
            Self::ReduceScatter => "reduce_scatter",
            Self::Broadcast => "broadcast",
            Self::Reduce => "reduce",
        }
    }

    /// Parses [`Kind::name`].
    pub fn parse(s: &str) -> Option<Kind> {
        Self::ALL.into_iter().find(|k| k.name() == s.trim())
    }

    /// nccl-tests' bus factor for `n` members.
    pub fn bus_factor(self, n: usize) -> f64 {
        let n = n.max(1) as f64;
        match self {
            Self::AllReduce => 2.0 * (n - 1.0) / n,
            Self::AllGather | Self::ReduceScatter => (n - 1.0) / n,
            Self::Broadcast | Self::Reduce => 1.0,
        }
    }

    fn has_op(self) -> bool {
        matches!(self, Self::AllReduce | Self::ReduceScatter | Self::Reduce)
    }
}

/// One row of the table.
#[derive(Debug, Clone, Serialize)]
pub struct CollectivePoint {
    /// Who took part (the CROSSGPU_DEVICES syntax).
    pub layout: String,
    /// Members taking part.
    pub members: usize,
    /// The mode the communicator took.
    pub mode: String,
    /// [`Kind::name`].
    pub collective: &'static str,
    /// The reduction (`-` for copies).
    pub op: String,
    /// The element type.
    pub dtype: String,
    /// nccl-tests' size, bytes (see the module docs).
    pub bytes: u64,
    /// Elements of that size.
    pub count: usize,
    /// Time per call of a pipelined batch, µs.
    pub us: Summary,
    /// bytes / median time, GB/s.
    pub algbw_gbps: f64,
    /// algbw × the bus factor, GB/s.
    pub busbw_gbps: f64,
    /// Calls recorded back to back per timed batch.
    pub rounds_per_batch: usize,
}

fn upload(m: &Member, dtype: DType, n: usize, seed: u64) -> Result<Tensor> {
    let v = data(seed, n);
    match dtype {
        DType::U32 => m.upload_u32(&v.iter().map(|x| x.to_bits()).collect::<Vec<_>>()),
        DType::I32 => m.upload_i32(&v.iter().map(|x| x.to_bits() as i32).collect::<Vec<_>>()),
        _ => m.upload(&v, &[n], dtype),
    }
}

/// Measures `kind` (with `op` where it reduces) over `group` in `mode` at nccl-tests' size
/// `bytes` of `dtype` (rounded down to equal whole-word shares, as the point's `bytes` says).
pub fn measure(
    group: &DeviceGroup,
    layout: &str,
    mode: ModeRequest,
    kind: Kind,
    op: ReduceOp,
    dtype: DType,
    bytes: u64,
) -> Result<CollectivePoint> {
    let nm = group.len();
    let elem = if dtype.is_half() { 2 } else { 4 };
    // As nccl-tests does: the count rounded down to equal shares (of whole words) per member.
    let unit = nm * if dtype.is_half() { 2 } else { 1 };
    let count = (bytes / elem) as usize / unit * unit;
    if count == 0 {
        return Err(Error::InvalidArgument(format!(
            "bench collectives: {bytes} bytes of {dtype} hold no share for each of {nm} members"
        )));
    }
    let bytes = count as u64 * elem;
    let mut comm = Comm::with_options(group, CommOptions { mode, ..CommOptions::from_env()? })?;
    let members = group.members();
    let share = count / nm;
    let (send_len, recv_len) = match kind {
        Kind::AllGather => (share, count),
        Kind::ReduceScatter => (count, share),
        _ => (count, count),
    };
    let mut send: Vec<Tensor> =
        members.iter().map(|m| upload(m, dtype, send_len, m.index() as u64 + 1)).collect::<Result<_>>()?;
    let mut recv: Vec<Tensor> = match kind {
        Kind::AllGather | Kind::ReduceScatter => {
            members.iter().map(|m| m.empty(&[recv_len], dtype)).collect::<Result<_>>()?
        }
        _ => Vec::new(),
    };
    // The f32 sum on its f32 wire, as NCCL's is exact f32.
    let ar = AllReduceOptions { op, precision: Precision::F32, ..Default::default() };
    let mut call = |comm: &mut Comm| -> Result<()> {
        match kind {
            Kind::AllReduce => comm.all_reduce(&mut send, &ar),
            Kind::AllGather => comm.all_gather(&send, &mut recv),
            Kind::ReduceScatter => comm.reduce_scatter(&send, &mut recv, op),
            Kind::Broadcast => comm.broadcast(&mut send, 0),
            Kind::Reduce => comm.reduce(&mut send, 0, op),
        }
    };
    let (rounds, batches) = schedule(bytes, has_cpu_member(group));
    let poll = comm.mode() == Mode::DevicePoll;
    for _ in 0..rounds.min(20) {
        call(&mut comm)?;
    }
    group.synchronize()?;
    let mut samples = Vec::new();
    for _ in 0..batches {
        let t = Instant::now();
        for r in 1..=rounds {
            call(&mut comm)?;
            if poll && r % POLL_ROUNDS_PER_SUBMIT == 0 {
                members[0].flush()?;
            }
        }
        group.synchronize()?;
        samples.push(t.elapsed().as_secs_f64() * 1e6 / rounds as f64);
    }
    let us = summarize(&samples);
    let algbw = bytes as f64 / (us.median * 1e-6) / 1e9;
    Ok(CollectivePoint {
        layout: layout.to_string(),
        members: nm,
        mode: comm.mode().to_string(),
        collective: kind.name(),
        op: if kind.has_op() { op.to_string() } else { "-".into() },
        dtype: dtype.to_string(),
        bytes,
        count,
        us,
        algbw_gbps: algbw,
        busbw_gbps: algbw * kind.bus_factor(nm),
        rounds_per_batch: rounds,
    })
}
