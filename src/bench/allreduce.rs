//! All-reduce latency and bandwidth in a pipelined loop: `rounds` all-reduces recorded back to
//! back (the decode pattern: nothing waits between them), then one wait; the time per round is
//! that batch's time over its rounds. Batches repeat for the summary.

use std::time::{Duration, Instant};

use serde::Serialize;

use super::{data, summarize, Summary};
use crate::comm::{AllReduceOptions, Comm, CommOptions, ModeRequest, Precision};
use crate::error::Result;
use crate::group::DeviceGroup;
use crate::tensor::Tensor;

/// One measured configuration.
#[derive(Debug, Clone, Serialize)]
pub struct AllReducePoint {
    /// Who took part, e.g. `nvidia*2` (queue stand-ins) or `nvidia,nvidia` (VkDevices).
    pub layout: String,
    /// Members taking part.
    pub members: usize,
    /// `HostBridge`, `SyncFd`, `Generic`, or `wgpu baseline`.
    pub mode: String,
    /// Payload per member, bytes (f32).
    pub bytes: u64,
    /// Precision exchanged between members: `f32` or `f16`.
    pub wire: &'static str,
    /// Time per round of a pipelined batch, µs.
    pub us_per_round: Summary,
    /// Algorithmic bandwidth: payload bytes / time per round, GB/s (median).
    pub algbw_gbps: f64,
    /// Rounds recorded back to back per timed batch.
    pub rounds_per_batch: usize,
    /// Host time per round spent recording and submitting (the batch's time inside
    /// `all_reduce`, less the streams' waits for the in-flight limit), µs, median over
    /// batches: a round cannot be faster than this. `None` for the wgpu baseline.
    pub host_us_per_round: Option<f64>,
    /// Share of the measured rounds that the host bridge released only after blocking in the
    /// driver (its spin time ran out), percent; `None` without a bridge.
    pub bridge_blocked_pct: Option<f64>,
    /// Mean host time of one driver call over the measured rounds, µs: the bridge reading a
    /// `done` value, the bridge signalling a `go`, a member's `vkQueueSubmit` (queue lock
    /// included). `None` where they do not apply.
    pub bridge_poll_us: Option<f64>,
    /// See `bridge_poll_us`.
    pub bridge_signal_us: Option<f64>,
    /// See `bridge_poll_us`.
    pub queue_submit_us: Option<f64>,
    /// DevicePoll rounds record no submit: the loop submits every member after this many
    /// rounds, as a caller that submits while it records would. `None` in the other modes,
    /// which submit phase A in every round.
    pub rounds_per_submit: Option<usize>,
}

/// Rounds between the DevicePoll loop's submits: enough that a submit's fixed cost on the GPU
/// (docs/BENCHMARKS.md, "Limits") is spread thin, few enough that the GPU starts early.
pub const POLL_ROUNDS_PER_SUBMIT: usize = 8;

/// Rounds per batch and batches for a payload: many small rounds, a few large ones; a quarter
/// of the rounds and half the batches (at least 3 of 2) where a member is a CPU device, whose
/// rounds take milliseconds (its figures check the harness, they are not the product's).
pub fn schedule(bytes: u64, cpu: bool) -> (usize, usize) {
    let (rounds, batches) = match bytes {
        0..=262_144 => (200, 10),
        262_145..=4_194_304 => (50, 8),
        4_194_305..=67_108_864 => (10, 6),
        _ => (3, 5),
    };
    if cpu {
        ((rounds / 4).max(3), (batches / 2).max(3))
    } else {
        (rounds, batches)
    }
}

/// Whether a member of `group` is a CPU device (lavapipe).
pub(crate) fn has_cpu_member(group: &DeviceGroup) -> bool {
    group.members().iter().any(|m| m.adapter().device_type == vk_native::DeviceType::Cpu)
}

/// Measures `mode` on `group` at `bytes` of f32 payload per member.
pub fn measure(
    group: &DeviceGroup,
    layout: &str,
    mode: ModeRequest,
    precision: Precision,
    bytes: u64,
    spin: Option<Duration>,
) -> Result<AllReducePoint> {
    let mut opts = CommOptions { mode, ..CommOptions::from_env()? };
    if let Some(s) = spin {
        opts.spin = Some(s);
    }
    let mut comm = Comm::with_options(group, opts)?;
    let n = (bytes / 4) as usize;
    let mut tensors: Vec<Tensor> = group
        .members()
        .iter()
        .map(|m| m.upload_f32(&data(m.index() as u64 + 1, n)))
        .collect::<Result<_>>()?;
    let ar = AllReduceOptions { precision, ..Default::default() };
    let (rounds, batches) = schedule(bytes, has_cpu_member(group));
    let poll = comm.mode() == crate::comm::Mode::DevicePoll;
    for _ in 0..rounds.min(20) {
        comm.all_reduce(&mut tensors, &ar)?;
    }
    group.synchronize()?;
    let waited = || group.members().iter().map(|m| m.stats().backpressure_wait).sum::<Duration>();
    let submitted = || {
        group
            .members()
            .iter()
            .map(|m| m.stats())
            .fold((0, Duration::ZERO), |a, s| (a.0 + s.queue_submits, a.1 + s.queue_submit_time))
    };
    let (bridge0, submit0) = (comm.bridge_stats(), submitted());
    let mut samples = Vec::new();
    let mut host = Vec::new();
    for _ in 0..batches {
        let w0 = waited();
        let t = Instant::now();
        for r in 1..=rounds {
            comm.all_reduce(&mut tensors, &ar)?;
            if poll && r % POLL_ROUNDS_PER_SUBMIT == 0 {
                group.members()[0].flush()?;
            }
        }
        let issued = t.elapsed().saturating_sub(waited() - w0);
        group.synchronize()?;
        samples.push(t.elapsed().as_secs_f64() * 1e6 / rounds as f64);
        host.push(issued.as_secs_f64() * 1e6 / rounds as f64);
    }
    let s = summarize(&samples);
    let bridge = match (bridge0, comm.bridge_stats()) {
        (Some(b), Some(a)) => Some(a.since(&b)),
        _ => None,
    };
    let (submits, submit_time) = submitted();
    let queue_submit_us = (submits > submit0.0)
        .then(|| (submit_time - submit0.1).as_secs_f64() * 1e6 / (submits - submit0.0) as f64);
    let f16 = match precision {
        Precision::F16 => true,
        Precision::F32 => false,
        Precision::Auto => bytes >= comm_threshold(&comm),
    };
    Ok(AllReducePoint {
        layout: layout.to_string(),
        members: group.len(),
        mode: comm.mode().to_string(),
        bytes,
        wire: if comm.mode() == crate::comm::Mode::Generic || !f16 { "f32" } else { "f16" },
        us_per_round: s,
        algbw_gbps: bytes as f64 / (s.median * 1e-6) / 1e9,
        rounds_per_batch: rounds,
        host_us_per_round: Some(summarize(&host).median),
        bridge_blocked_pct: bridge.map(|b| b.blocked_pct()),
        bridge_poll_us: bridge.map(|b| b.mean_call_us().0),
        bridge_signal_us: bridge.map(|b| b.mean_call_us().1),
        queue_submit_us,
        rounds_per_submit: poll.then_some(POLL_ROUNDS_PER_SUBMIT),
    })
}

fn comm_threshold(comm: &Comm) -> u64 {
    comm.f16_threshold_bytes()
}
