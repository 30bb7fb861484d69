//! The flags of `bench all`, `limits`, `allreduce`, `matvec` and `decode`, and the sizes they
//! give. Sizes fit the device: what a flag does not give is picked for the `--adapter`'s kind
//! (GPU sizes as in docs/BENCHMARKS.md; small ones on a CPU device such as lavapipe, where the
//! GPU sizes would run for hours), and a given value the device cannot do is refused, naming the
//! flag, before anything is measured.

use std::path::PathBuf;

use clap::Args;
use crossgpu::bench::limits;
use crossgpu::tp::{DecoderConfig, Plan, SplitSpec};
use crossgpu::{AdapterInfo, DeviceType, ModeRequest};
use serde::Serialize;

use super::text::fmt_bytes;
use crate::cli::{fail, plural, CliResult};

/// The flags of `bench all`, `limits`, `allreduce`, `matvec` and `decode`.
#[derive(Args, Debug, Clone)]
pub struct Common {
    /// Adapter name (or index) to measure on, e.g. `nvidia` or `llvmpipe`.
    #[arg(long, default_value = "0")]
    pub adapter: String,
    /// Second adapter for the cross-vendor pair, e.g. `llvmpipe` (empty: none).
    #[arg(long, default_value = "")]
    pub pair: String,
    /// Folder for bench.json and the charts (created; checked writable before measuring).
    #[arg(long, default_value = "bench-out")]
    pub out: PathBuf,
    /// Member counts measured as queue stand-ins of one VkDevice [default: 1,2,3,4 on a GPU,
    /// 1,2 on a CPU device].
    #[arg(long, value_delimiter = ',')]
    pub members: Option<Vec<usize>>,
    /// Largest all-reduce payload in bytes [default: 256 MiB on a GPU, 1 MiB on a CPU device;
    /// at most the adapter's maxStorageBufferRange].
    #[arg(long)]
    pub max_bytes: Option<u64>,
    /// Buffer size for the copy-bandwidth limits [default: 256 MiB on a GPU, 16 MiB on a CPU
    /// device; at most the adapter's maxStorageBufferRange].
    #[arg(long)]
    pub limit_bytes: Option<u64>,
    /// Matrix–vector shapes, `ROWSxCOLS` comma-separated (f16 weights) [default:
    /// 8192x8192,5120x17408,17408x5120 on a GPU, 1024x1024 on a CPU device].
    #[arg(long, value_delimiter = ',')]
    pub matvec_shapes: Option<Vec<String>>,
    /// Decode preset (`small` or `27b`) [default: 27b on a GPU that holds it, else small].
    #[arg(long)]
    pub preset: Option<String>,
    /// Decode tokens (at least 1).
    #[arg(long, default_value_t = 32)]
    pub tokens: usize,
    /// Bridge spin time in µs (default: CROSSGPU_ALLREDUCE_SPIN_US).
    #[arg(long)]
    pub spin_us: Option<u64>,
    /// All-reduce layouts to measure instead of the default set, `;`-separated in the
    /// CROSSGPU_DEVICES syntax, e.g. `nvidia/2;nvidia*2;nvidia,llvmpipe`.
    #[arg(long)]
    pub layouts: Option<String>,
    /// Skip the wgpu baseline.
    #[arg(long)]
    pub no_baseline: bool,
    /// Modes measured on `--layouts` (comma-separated: bridge, sync_fd, poll, generic).
    #[arg(long, default_value = "bridge,sync_fd,poll,generic")]
    pub modes: String,
    /// Wire precision of the all-reduce: `auto` (f16 from CROSSGPU_F16_WIRE_BYTES up), `f32`
    /// (the same bytes as NCCL's f32 all-reduce) or `f16`.
    #[arg(long, default_value = "auto", value_parser = ["auto", "f32", "f16"])]
    pub wire: String,
    /// Adapters the wgpu baseline's members take round-robin, e.g. `0,1` for two physical
    /// GPUs (default: `--adapter` for every member).
    #[arg(long)]
    pub baseline_adapters: Option<String>,
}

/// The sizes of a run: each flag's value, or the default picked for the device.
#[derive(Serialize, Default, Clone, Debug)]
pub struct Settings {
    /// `--adapter`'s name.
    pub adapter: String,
    /// Whether it is a CPU device (small defaults).
    pub cpu_device: bool,
    pub members: Vec<usize>,
    pub max_bytes: u64,
    pub limit_bytes: u64,
    pub matvec_shapes: Vec<String>,
    pub preset: String,
    pub tokens: usize,
    pub wire: String,
    /// The flags among these that took a default.
    pub defaulted: Vec<&'static str>,
}

pub const SIZES: [u64; 10] =
    [4 << 10, 16 << 10, 32 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20];

/// GPU defaults (docs/BENCHMARKS.md).
const GPU_MEMBERS: [usize; 4] = [1, 2, 3, 4];
const GPU_MAX_BYTES: u64 = 256 << 20;
const GPU_LIMIT_BYTES: u64 = 256 << 20;
const GPU_MATVEC: [&str; 3] = ["8192x8192", "5120x17408", "17408x5120"];
/// CPU-device defaults (lavapipe): `bench all` in well under a minute on two cores.
const CPU_MEMBERS: [usize; 2] = [1, 2];
const CPU_MAX_BYTES: u64 = 1 << 20;
const CPU_LIMIT_BYTES: u64 = 16 << 20;
const CPU_MATVEC: [&str; 1] = ["1024x1024"];

/// Parses `ROWSxCOLS`.
pub fn parse_shape(shape: &str) -> Option<(usize, usize)> {
    let (r, c) = shape.split_once(['x', 'X'])?;
    let (r, c) = (r.trim().parse().ok()?, c.trim().parse().ok()?);
    (r > 0 && c > 0).then_some((r, c))
}

/// Why `cfg` does not fit `n` members on adapter `a` (all on that one device), or `None`: each
/// member's largest tensor against maxStorageBufferRange, all of them against the largest
/// device-local heap (what `Decoder::load` checks, before opening anything).
fn decode_misfit(cfg: &DecoderConfig, n: usize, a: &AdapterInfo) -> Option<String> {
    let plan = match SplitSpec::Even.weights(n).and_then(|w| Plan::new(cfg, &w)) {
        Ok(p) => p,
        Err(e) => return Some(e.to_string()),
    };
    let fp: Vec<_> = (0..n).map(|i| plan.footprint(cfg, i)).collect();
    let largest = fp.iter().map(|f| f.largest).max_by_key(|l| l.1).unwrap_or(("none", 0));
    let total = fp.iter().map(|f| f.bytes).fold(0u64, u64::saturating_add);
    let range = a.caps.max_storage_buffer_range;
    let heap = a.caps.device_local_heap_bytes;
    if largest.1 > range {
        Some(format!(
            "on {} its {} needs {} bytes in one tensor, more than {} binds in one buffer ({range} bytes, maxStorageBufferRange)",
            plural(n, "member", "members"),
            largest.0,
            largest.1,
            a.name
        ))
    } else if heap > 0 && total > heap {
        Some(format!(
            "it needs {:.1} GiB on {}, more than {}'s largest device-local heap ({:.1} GiB)",
            total as f64 / (1u64 << 30) as f64,
            plural(n, "member", "members"),
            a.name,
            heap as f64 / (1u64 << 30) as f64
        ))
    } else {
        None
    }
}

/// The member counts the decode runs on (the issue asked for 1, 2 and 4).
pub fn decode_counts(members: &[usize]) -> Vec<usize> {
    members.iter().copied().filter(|&n| n != 3).collect()
}

/// Each size flag's value, or the default for `a`'s kind; a given value `a` cannot do is an
/// error naming the flag. Only the flags `which` uses are checked.
pub fn settings(c: &Common, which: &str, a: &AdapterInfo) -> CliResult<Settings> {
    let cpu = a.device_type == DeviceType::Cpu;
    let range = a.caps.max_storage_buffer_range;
    let name = &a.name;
    let uses = |part: &str| which == "all" || which == part;
    let mut s = Settings {
        adapter: name.clone(),
        cpu_device: cpu,
        tokens: c.tokens,
        wire: c.wire.clone(),
        ..Default::default()
    };
    let binds = |flag: &str, v: u64| {
        fail(format!("{flag} {v}: {name} binds at most {range} bytes in one buffer (maxStorageBufferRange)"))
    };

    s.members = match &c.members {
        Some(m) => {
            if let Some(bad) = m.iter().find(|&&n| n == 0) {
                return Err(fail(format!("--members {bad}: a layout needs at least 1 member")));
            }
            let mut v = Vec::new();
            for &n in m {
                if !v.contains(&n) {
                    v.push(n);
                }
            }
            v
        }
        None => {
            s.defaulted.push("--members");
            if cpu {
                CPU_MEMBERS.to_vec()
            } else {
                GPU_MEMBERS.to_vec()
            }
        }
    };

    s.max_bytes = match c.max_bytes {
        Some(v) if uses("allreduce") && v < SIZES[0] => {
            return Err(fail(format!("--max-bytes {v}: the smallest payload measured is {} bytes", SIZES[0])))
        }
        Some(v) if uses("allreduce") && v > range => return Err(binds("--max-bytes", v)),
        Some(v) => v,
        None => {
            s.defaulted.push("--max-bytes");
            (if cpu { CPU_MAX_BYTES } else { GPU_MAX_BYTES }).min(range)
        }
    };

    let align = a.caps.min_imported_host_pointer_alignment.max(4096);
    s.limit_bytes = match c.limit_bytes {
        Some(v) if uses("limits") && v > range => return Err(binds("--limit-bytes", v)),
        Some(v) if uses("limits") && (v < limits::MIN_BYTES || !v.is_multiple_of(align)) => {
            return Err(fail(format!(
                "--limit-bytes {v}: must be a multiple of {align} bytes and at least {}",
                limits::MIN_BYTES
            )))
        }
        Some(v) => v,
        None => {
            s.defaulted.push("--limit-bytes");
            (if cpu { CPU_LIMIT_BYTES } else { GPU_LIMIT_BYTES }).min(range / align * align)
        }
    };

    s.matvec_shapes = match &c.matvec_shapes {
        Some(shapes) => {
            for shape in shapes {
                let Some((rows, cols)) = parse_shape(shape) else {
                    return Err(fail(format!(
                        "--matvec-shapes: '{shape}' is not ROWSxCOLS (positive numbers)"
                    )));
                };
                let bytes = (rows as u64).saturating_mul(cols as u64).saturating_mul(2);
                if uses("matvec") && bytes > range {
                    return Err(fail(format!(
                        "--matvec-shapes {shape}: its f16 weights are {bytes} bytes; {name} binds at most {range} bytes in one buffer (maxStorageBufferRange)"
                    )));
                }
            }
            shapes.iter().map(|s| s.trim().to_string()).collect()
        }
        None => {
            s.defaulted.push("--matvec-shapes");
            let fits = |sh: &&&str| parse_shape(sh).is_some_and(|(r, c)| (r * c * 2) as u64 <= range);
            let picked: Vec<String> = if cpu { &CPU_MATVEC[..] } else { &GPU_MATVEC[..] }
                .iter()
                .filter(fits)
                .map(|s| s.to_string())
                .collect();
            if picked.is_empty() {
                CPU_MATVEC.iter().map(|s| s.to_string()).collect()
            } else {
                picked
            }
        }
    };

    let counts = decode_counts(&s.members);
    let fits = |preset: &str| -> CliResult<Option<String>> {
        let mut cfg = DecoderConfig::preset(preset).map_err(|e| e.for_setting("--preset"))?;
        cfg.max_seq = cfg.max_seq.max(c.tokens + 4);
        let misfits: Vec<String> = counts.iter().filter_map(|&n| decode_misfit(&cfg, n, a)).collect();
        Ok((!counts.is_empty() && misfits.len() == counts.len()).then(|| misfits[0].clone()))
    };
    s.preset = match &c.preset {
        Some(p) => {
            let why = fits(p)?;
            if let (true, Some(why)) = (uses("decode"), why) {
                return Err(fail(format!("--preset {p}: {why}; pass --preset small")));
            }
            p.clone()
        }
        None => {
            s.defaulted.push("--preset");
            if !cpu && fits("27b")?.is_none() {
                "27b".into()
            } else {
                "small".into()
            }
        }
    };
    Ok(s)
}

/// Prints the sizes once, before anything is measured.
pub fn print_settings(s: &Settings, which: &str, c: &Common) {
    let uses = |part: &str| which == "all" || which == part;
    let kind = if s.cpu_device {
        "a CPU device: small sizes where a flag is not given"
    } else {
        "a GPU: full sizes where a flag is not given"
    };
    println!("bench {which} on {} ({kind}); results in {}", s.adapter, c.out.display());
    let d = |flag: &str| if s.defaulted.contains(&flag) { " (default)" } else { "" };
    let members = s.members.iter().map(|n| n.to_string()).collect::<Vec<_>>().join(",");
    if uses("allreduce") || uses("decode") {
        println!("  --members {members}{}", d("--members"));
    }
    if uses("allreduce") {
        println!(
            "  --max-bytes {} ({}){}, --wire {}",
            s.max_bytes,
            fmt_bytes(s.max_bytes),
            d("--max-bytes"),
            s.wire
        );
    }
    if uses("limits") {
        println!("  --limit-bytes {} ({}){}", s.limit_bytes, fmt_bytes(s.limit_bytes), d("--limit-bytes"));
    }
    if uses("matvec") {
        println!("  --matvec-shapes {}{}", s.matvec_shapes.join(","), d("--matvec-shapes"));
    }
    if uses("decode") {
        println!("  --preset {}{}, --tokens {}", s.preset, d("--preset"), s.tokens);
    }
}

/// `--modes`, each named by the flag when bad.
pub fn parse_modes(modes: &str) -> CliResult<Vec<ModeRequest>> {
    Ok(modes
        .split(',')
        .map(|m| ModeRequest::parse(m).map_err(|e| e.for_setting("--modes")))
        .collect::<crossgpu::Result<Vec<_>>>()?)
}
