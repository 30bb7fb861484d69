//! bench.json: what a run has measured, and the run that measures it (its instance, flags and
//! sizes). Every point is printed and written to bench.json as soon as it is measured, so an
//! interrupted run keeps what it measured.

use crossgpu::bench::allreduce::AllReducePoint;
use crossgpu::bench::limits::Limits;
use crossgpu::bench::matvec::MatvecPoint;
use crossgpu::{DeviceGroup, GroupSpec, Instance};
use indicatif::ProgressBar;
use serde::Serialize;

use super::settings::{Common, Settings};
use super::text::say;
use crate::cli::{fail, CliResult};

/// What bench.json holds.
#[derive(Serialize, Default)]
pub struct Report {
    pub date: String,
    pub command: String,
    /// Every adapter of the instance.
    pub adapters: Vec<String>,
    /// The adapters measured (`--adapter`, `--pair`, those of `--layouts`), by name.
    pub devices: Vec<String>,
    /// The sizes this run used, given or picked for the device.
    pub settings: Settings,
    pub limits: Vec<Limits>,
    /// The device-local copy by kernel variant and by vkCmdCopyBuffer, on `--adapter`.
    pub copy_variants: Vec<crossgpu::bench::limits::CopyVariant>,
    /// DevicePoll's relay without copies, across `--adapter` and `--pair`.
    pub relay_steps: Vec<RelayStep>,
    pub allreduce: Vec<AllReducePoint>,
    pub skipped: Vec<String>,
    pub matvec: Vec<MatvecPoint>,
    pub decode: Vec<DecodePoint>,
}

#[derive(Serialize)]
pub struct RelayStep {
    pub layout: String,
    pub step_us: crossgpu::bench::Summary,
}

#[derive(Serialize)]
pub struct DecodePoint {
    pub layout: String,
    pub members: usize,
    pub tokens_per_s: f64,
    pub cpu_ms_per_token: f64,
    pub record_ms_per_token: f64,
    pub all_reduces_per_token: f64,
    pub submits_per_token_per_member: f64,
    pub dispatches_per_token_per_member: f64,
    /// Per member: streamed weight bytes × tokens/s ÷ its copy kernel's bandwidth, percent.
    pub weight_streaming_pct: Vec<f64>,
    pub mode: String,
    pub tokens: Vec<u32>,
}

/// Where the run writes and what it has.
pub struct Run<'a> {
    pub instance: &'a Instance,
    pub c: &'a Common,
    pub s: Settings,
    /// The `--adapter` as a layout word (as the user typed it).
    pub a: &'a str,
    /// Queues of the adapter's family 0.
    pub queues: usize,
    pub cpu: bool,
    pub r: Report,
}

impl Run<'_> {
    /// Opens `spec` (a layout, the CROSSGPU_DEVICES syntax) on the run's instance.
    pub fn open(&self, spec: &str) -> crossgpu::Result<DeviceGroup> {
        DeviceGroup::open(self.instance, &GroupSpec::parse(spec)?)
    }

    /// Writes bench.json (through a temporary file and a rename: an interrupt leaves the
    /// previous complete file, never half of one).
    pub fn save(&self) -> CliResult {
        let path = self.c.out.join("bench.json");
        let tmp = self.c.out.join("bench.json.tmp");
        let json = serde_json::to_string_pretty(&self.r).map_err(|e| fail(format!("bench.json: {e}")))?;
        std::fs::write(&tmp, json).map_err(|e| fail(format!("{}: {e}", tmp.display())))?;
        std::fs::rename(&tmp, &path).map_err(|e| fail(format!("{}: {e}", path.display())))?;
        Ok(())
    }

    pub fn skip(&mut self, pb: &ProgressBar, what: String) -> CliResult {
        say(pb, format!("skipped: {what}"));
        self.r.skipped.push(what);
        self.save()
    }
}
