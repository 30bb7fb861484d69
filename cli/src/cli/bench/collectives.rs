//! `crossgpu bench collectives`: every collective's table in the style of nccl-tests (size,
//! count, type, redop, time, algbw, busbw), per layout and mode, measured by
//! `crossgpu::bench::collectives`; the rows also go to a JSON file.

use std::path::PathBuf;

use clap::Args;
use crossgpu::bench::collectives::{measure, CollectivePoint, Kind};
use crossgpu::{DType, DeviceGroup, GroupSpec, Instance, ModeRequest, ReduceOp};

use super::settings::parse_modes;
use crate::cli::{fail, CliResult};

/// `crossgpu bench collectives`.
#[derive(Args, Debug, Clone)]
pub struct CollectivesArgs {
    /// Layouts to measure, `;`-separated, in the CROSSGPU_DEVICES syntax (`0,1` two adapters,
    /// `0/2` two members on one queue of adapter 0).
    #[arg(long, default_value = "0,0")]
    pub layouts: String,
    /// Modes, comma-separated: bridge, sync_fd, poll, generic, auto.
    #[arg(long, default_value = "bridge,poll")]
    pub modes: String,
    /// Collectives, comma-separated: all_reduce, all_gather, reduce_scatter, broadcast, reduce.
    #[arg(long, default_value = "all_reduce,all_gather,reduce_scatter,broadcast,reduce")]
    pub collectives: String,
    /// The reduction of all_reduce, reduce_scatter and reduce: sum, prod, max, min, avg.
    #[arg(long, default_value = "sum")]
    pub op: String,
    /// The element type: f32, f16, bf16, i32, u32.
    #[arg(long, default_value = "f32")]
    pub dtype: String,
    /// The smallest size, bytes (nccl-tests' size: see `crossgpu::bench::collectives`).
    #[arg(long, default_value_t = 4096)]
    pub min_bytes: u64,
    /// The largest size, bytes; sizes go up by factors of 4.
    #[arg(long, default_value_t = 64 << 20)]
    pub max_bytes: u64,
    /// Where the rows go, as JSON.
    #[arg(long, default_value = "bench-collectives.json")]
    pub json: PathBuf,
}

fn parse_dtype(s: &str) -> CliResult<DType> {
    Ok(match s.trim() {
        "f32" => DType::F32,
        "f16" => DType::F16,
        "bf16" => DType::BF16,
        "i32" => DType::I32,
        "u32" => DType::U32,
        _ => return Err(fail(format!("--dtype {s}: expected f32, f16, bf16, i32 or u32"))),
    })
}

fn parse_op(s: &str) -> CliResult<ReduceOp> {
    ReduceOp::ALL
        .into_iter()
        .find(|op| op.to_string() == s.trim())
        .ok_or_else(|| fail(format!("--op {s}: expected sum, prod, max, min or avg")))
}

/// `crossgpu bench collectives`: every flag checked, then the table, layout by layout.
pub fn bench_collectives(a: &CollectivesArgs) -> CliResult {
    crossgpu::check_environment()?;
    let modes: Vec<ModeRequest> = parse_modes(&a.modes)?;
    let kinds = a
        .collectives
        .split(',')
        .map(|k| Kind::parse(k).ok_or_else(|| fail(format!("--collectives: unknown collective {k:?}"))))
        .collect::<CliResult<Vec<_>>>()?;
    let (op, dtype) = (parse_op(&a.op)?, parse_dtype(&a.dtype)?);
    if a.min_bytes == 0 || a.min_bytes > a.max_bytes {
        return Err(fail(format!(
            "--min-bytes {} --max-bytes {}: need 0 < min ≤ max",
            a.min_bytes, a.max_bytes
        )));
    }
    let layouts: Vec<GroupSpec> = a
        .layouts
        .split(';')
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(|l| GroupSpec::parse(l).map_err(|e| e.for_setting("--layouts")))
        .collect::<crossgpu::Result<_>>()?;
    let sizes: Vec<u64> = std::iter::successors(Some(a.min_bytes), |&b| b.checked_mul(4))
        .take_while(|&b| b <= a.max_bytes)
        .collect();
    let instance = Instance::new()?;
    let mut rows: Vec<CollectivePoint> = Vec::new();
    for (spec, text) in layouts.iter().zip(a.layouts.split(';').map(str::trim).filter(|l| !l.is_empty())) {
        let group = DeviceGroup::open(&instance, spec)?;
        for &mode in &modes {
            println!("\n# layout {text} ({} members), mode {mode:?}, {dtype}", group.len());
            println!(
                "# {:>12} {:>11} {:>5} {:>5} {:>15} {:>10} {:>10} {:>9} {:>9} {:>8}",
                "size(B)",
                "count",
                "type",
                "redop",
                "collective",
                "time(us)",
                "p10-p90",
                "algbw",
                "busbw",
                "mode"
            );
            for &kind in &kinds {
                for &bytes in &sizes {
                    match measure(&group, text, mode, kind, op, dtype, bytes) {
                        Ok(p) => {
                            println!(
                                "  {:>12} {:>11} {:>5} {:>5} {:>15} {:>10.1} {:>10} {:>9.2} {:>9.2} {:>8}",
                                p.bytes,
                                p.count,
                                p.dtype,
                                p.op,
                                p.collective,
                                p.us.median,
                                format!("{:.0}-{:.0}", p.us.p10, p.us.p90),
                                p.algbw_gbps,
                                p.busbw_gbps,
                                p.mode
                            );
                            rows.push(p);
                        }
                        Err(e) => println!("  {bytes:>12} {:>15} skipped: {e}", kind.name()),
                    }
                }
            }
        }
    }
    let json = serde_json::to_string_pretty(&rows).map_err(|e| fail(format!("--json: {e}")))?;
    std::fs::write(&a.json, json).map_err(|e| fail(format!("--json {}: {e}", a.json.display())))?;
    println!("\nbench collectives: {} rows, {}", rows.len(), a.json.display());
    Ok(())
}
