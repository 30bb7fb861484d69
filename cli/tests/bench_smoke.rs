//! The benchmark harness on lavapipe (issues 6 and 13): `crossgpu bench all` runs every part
//! (limits, all-reduce in each layout and mode beside the wgpu baseline, matvec, decode) and
//! writes bench.json and the charts, at small sizes and with the defaults it picks for a CPU
//! device; bad flags are refused, naming the flag, before anything is measured; `bench chart`
//! redraws into a folder it creates and refuses a file with nothing to chart. A smoke run for
//! the harness, not for figures.
//!
//! It runs the binary without the validation layer: the bench makes thousands of
//! wait-before-signal rounds, and Debian 12's layer stalls ~10 s on each of its own
//! "UNASSIGNED-VkSemaphore-state-timeout" self-diagnoses (see tests/common/mod.rs), which made
//! this run take 2 min 40 s instead of 5 s. Run by hand with `CROSSGPU_VALIDATION=1` and
//! synchronization validation on 2026-11-29, it reported nothing but that message id.

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::Instant;

/// The lavapipe adapter: its index (as `--adapter` takes it) and maxStorageBufferRange; `None`
/// (the caller skips loudly) where this machine has none.
fn lavapipe() -> Option<(String, u64)> {
    let instance =
        crossgpu::Instance::new().expect("a Vulkan driver (lavapipe: apt-get install mesa-vulkan-drivers)");
    let found = instance
        .adapters()
        .iter()
        .find(|a| a.driver_id == "MESA_LLVMPIPE")
        .map(|a| (a.index.to_string(), a.caps.max_storage_buffer_range));
    if found.is_none() {
        eprintln!("SKIPPED: no lavapipe adapter in this instance; this test checks the bench on lavapipe");
    }
    found
}

fn crossgpu<I, S>(args: I) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    let mut c = Command::new(env!("CARGO_BIN_EXE_crossgpu"));
    c.args(args).env_remove("CROSSGPU_VALIDATION").env_remove("CROSSGPU_DEVICES");
    for v in ["CROSSGPU_ALLREDUCE", "CROSSGPU_SPLIT", "CROSSGPU_TIMEOUT_MS", "CROSSGPU_F16_WIRE_BYTES"] {
        c.env_remove(v);
    }
    c.output().expect("running crossgpu bench")
}

/// The quantized matvec kernels `bench matvec` times at `cols` columns: every kernel of each
/// format whose blocks tile them.
fn quant_kernels(cols: usize) -> usize {
    crossgpu::QuantFormat::ALL
        .iter()
        .filter(|f| f.row_bytes(cols).is_some())
        .map(|f| f.kernel_names().len())
        .sum()
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// A fresh temporary folder for one test.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("crossgpu-bench-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn json(path: &std::path::Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()))
}

fn assert_charts(dir: &std::path::Path) {
    for chart in ["allreduce-latency.png", "allreduce-bandwidth.png"] {
        let len = std::fs::metadata(dir.join(chart)).map(|m| m.len()).unwrap_or(0);
        assert!(len > 1000, "{}: {len} bytes", dir.join(chart).display());
    }
}

/// `crossgpu ARGS` must exit 1 (an error, not a panic) with an `error:` line holding every
/// needle, never prefixed "unsupported:" (none of these is a device capability), and before
/// measuring anything.
fn refused(args: &[&str], needles: &[&str]) -> String {
    let o = crossgpu(args);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(1), "crossgpu {args:?} must fail with exit 1:\n{t}");
    // The command's own error is its last line; a driver may print "error: ..." lines of its
    // own before it (Mesa's WSI, when XDG_RUNTIME_DIR is unset).
    let err = t.lines().rfind(|l| l.starts_with("error: ")).unwrap_or_else(|| panic!("no error line:\n{t}"));
    for n in needles {
        assert!(err.contains(n), "crossgpu {args:?}: the error must mention {n:?}; got {err:?}:\n{t}");
    }
    assert!(!err.starts_with("error: unsupported:"), "not a device limit, yet 'unsupported:': {err}");
    assert!(!t.contains("panicked"), "crossgpu {args:?} panicked:\n{t}");
    for measured in ["limits:", "all-reduce:", "matvec ", "decode "] {
        assert!(!t.contains(measured), "crossgpu {args:?} measured before failing:\n{t}");
    }
    t
}

#[test]
fn bench_all_writes_every_part_to_bench_json() {
    let Some((a, _)) = lavapipe() else { return };
    let out = scratch("smoke");
    let run = crossgpu([
        "bench",
        "all",
        "--adapter",
        &a,
        "--members",
        "1,2",
        "--max-bytes",
        "16384",
        "--limit-bytes",
        "1048576",
        "--matvec-shapes",
        "64x512,33x40",
        "--preset",
        "small",
        "--tokens",
        "2",
        "--out",
        out.to_str().unwrap(),
    ]);
    let log = text(&run);
    assert!(run.status.success(), "crossgpu bench all failed:\n{log}");
    // Every given value is used and said once at the start, none "(default)".
    assert!(log.contains("--members 1,2\n") && log.contains("--max-bytes 16384 (16 KiB),"), "{log}");
    assert!(!log.contains("(default)"), "{log}");

    let v = json(&out.join("bench.json"));
    assert!(v["command"].as_str().is_some_and(|c| c.contains("bench all")), "{v}");
    assert!(
        v["skipped"].as_array().is_some_and(|s| s.iter().all(|x| {
            // SyncFd is refused on lavapipe (no SYNC_FD semaphores), with its reason, and the
            // relay step needs a second device (--pair); nothing else (DevicePoll runs on the
            // two-VkDevice layouts).
            x.as_str()
                .is_some_and(|x| x.contains("SyncFd") || x.contains("relay step") && x.contains("--pair"))
        })),
        "unexpected skips: {}",
        v["skipped"]
    );
    assert!(v["devices"][0].as_str().is_some_and(|d| d.contains("llvmpipe")), "{}", v["devices"]);

    let limits = &v["limits"][0];
    for key in [
        "device_to_host_gbps",
        "host_to_device_gbps",
        "duplex_copy_gbps",
        "host_read_kernel_gbps",
        "host_write_kernel_gbps",
        "duplex_kernel_gbps",
        "device_copy_kernel_gbps",
        "device_copy_command_gbps",
        "timeline_round_trip_us",
        "empty_submit_us",
    ] {
        let median = limits[key]["median"].as_f64().unwrap_or(f64::NAN);
        assert!(median > 0.0 && median.is_finite(), "limits.{key}: {}", limits[key]);
    }
    // The limits are a table on stdout, not JSON.
    assert!(
        log.contains("host-signalled timeline round trip") && !log.contains("\"device_to_host_gbps\""),
        "{log}"
    );

    let points = v["allreduce"].as_array().expect("allreduce points");
    let has = |layout: &str, mode: &str| {
        points
            .iter()
            .filter(|p| p["layout"].as_str() == Some(layout) && p["mode"].as_str() == Some(mode))
            .count()
    };
    // Two sizes (4 KiB, 16 KiB) for each layout and mode the default set has on lavapipe.
    for (layout, mode) in [
        (format!("{a}*1"), "HostBridge"),
        (format!("{a}/2"), "HostBridge"),
        (format!("{a}/2"), "Generic"),
        (format!("{a},{a}"), "HostBridge"),
        (format!("{a},{a}"), "DevicePoll"),
        (format!("{a},{a}"), "Generic"),
        (format!("2 wgpu devices on {a}"), "wgpu baseline"),
    ] {
        assert_eq!(has(&layout, mode), 2, "{layout} {mode} in {points:?}");
    }
    for p in points {
        let s = &p["us_per_round"];
        let (p10, median, p90) =
            (s["p10"].as_f64().unwrap(), s["median"].as_f64().unwrap(), s["p90"].as_f64().unwrap());
        assert!(0.0 < p10 && p10 <= median && median <= p90, "{p}");
        assert!(p["algbw_gbps"].as_f64().unwrap() > 0.0, "{p}");
    }
    // Each point printed as a row (payloads in KiB).
    assert!(log.lines().filter(|l| l.contains(" 16 KiB ")).count() >= 6, "{log}");

    // Both f16 kernels on 64x512 and 33x40; bandwidth printed with its digits, never "0 GB/s".
    let matvec = v["matvec"].as_array().expect("matvec points");
    // Two shapes through every f16 kernel and every quantized kernel of the formats whose blocks
    // tile 512 columns (all of them) and 40 (BF16's blocks of 8 only), then the decoder's two
    // fused kernels beside the dispatches each replaces, and gate/up's two x-sharing kernels
    // (6 points).
    let want = 2 * crossgpu::MATVEC_F16_KERNELS.len() + quant_kernels(512) + quant_kernels(40) + 6;
    assert_eq!(matvec.len(), want, "{matvec:?}");
    assert_eq!(quant_kernels(40), crossgpu::QuantFormat::BF16.kernel_names().len());
    for f in crossgpu::QuantFormat::ALL {
        for k in f.kernel_names() {
            assert!(matvec.iter().any(|m| m["kernel"] == k && m["cols"] == 512), "{k} measured: {matvec:?}");
        }
    }
    for k in [
        "matvec_gate_up_silu (fused)",
        "matvec_gate_up_silu_x2 (fused, x shared)",
        "matvec_gate_up_silu_x4 (fused, x shared)",
        "matvec_qkv_rope_store (fused)",
    ] {
        assert!(matvec.iter().any(|m| m["kernel"] == k), "{k} measured: {matvec:?}");
    }
    assert!(matvec.iter().all(|m| m["us_per_matvec"]["median"].as_f64().unwrap() > 0.0));
    let rows: Vec<&str> = log.lines().filter(|l| l.starts_with("matvec ")).collect();
    assert_eq!(rows.len(), matvec.len(), "{log}");
    assert!(rows.iter().all(|l| !l.contains(": 0 GB/s")), "{rows:?}");

    // The decode on 1 member and 2 (shared queue, VkDevices): the same tokens on each.
    let decode = v["decode"].as_array().expect("decode points");
    assert_eq!(decode.len(), 3, "{decode:?}");
    for d in decode {
        assert_eq!(d["tokens"], decode[0]["tokens"], "{d}");
        assert!(d["tokens_per_s"].as_f64().unwrap() > 0.0, "{d}");
    }
    assert!(log.contains("(1 member):") && log.contains("(2 members):"), "{log}");
    assert_charts(&out);

    // `bench chart` redraws into a folder it creates.
    let redrawn = out.join("redrawn").join("charts");
    let o = crossgpu([
        "bench",
        "chart",
        out.join("bench.json").to_str().unwrap(),
        "--out",
        redrawn.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "bench chart into a missing folder:\n{}", text(&o));
    assert_charts(&redrawn);
    let _ = std::fs::remove_dir_all(&out);
}

/// Without size flags the bench picks small sizes on a CPU device, says so, and completes
/// (the GPU sizes ran for hours on lavapipe). Its time is printed, not bounded.
#[test]
fn bench_all_defaults_fit_a_cpu_device() {
    let Some((a, range)) = lavapipe() else { return };
    let out = scratch("defaults");
    let t = Instant::now();
    let run = crossgpu(["bench", "all", "--adapter", &a, "--out", out.to_str().unwrap()]);
    let log = text(&run);
    eprintln!("bench all with the defaults on lavapipe took {:.0} s", t.elapsed().as_secs_f64());
    assert!(run.status.success(), "crossgpu bench all (defaults) failed:\n{log}");
    let limit = (16u64 << 20).min(range);
    for said in [
        "a CPU device".to_string(),
        "--members 1,2 (default)".into(),
        "--max-bytes 1048576 (1 MiB) (default)".into(),
        format!("--limit-bytes {limit}"),
        "--matvec-shapes 1024x1024 (default)".into(),
        "--preset small (default)".into(),
    ] {
        assert!(log.contains(&said), "the settings must say {said:?}:\n{log}");
    }
    let v = json(&out.join("bench.json"));
    let s = &v["settings"];
    assert_eq!(s["cpu_device"], true, "{s}");
    assert_eq!(s["members"], serde_json::json!([1, 2]), "{s}");
    assert_eq!(s["max_bytes"], 1 << 20, "{s}");
    assert_eq!(s["limit_bytes"], limit, "{s}");
    assert_eq!(s["preset"], "small", "{s}");
    assert_eq!(v["limits"][0]["bytes"], limit);
    let points = v["allreduce"].as_array().expect("allreduce points");
    assert_eq!(points.iter().filter_map(|p| p["bytes"].as_u64()).max(), Some(1 << 20), "{points:?}");
    // The auto wire turns f16 at 1 MiB on the bridge.
    assert!(points.iter().any(|p| p["wire"] == "f16" && p["bytes"] == 1 << 20), "{points:?}");
    assert_eq!(
        v["matvec"].as_array().map(Vec::len),
        // The fused points as above: 2 + 2 beside their dispatches, gate/up's x-sharing two.
        Some(crossgpu::MATVEC_F16_KERNELS.len() + quant_kernels(1024) + 6)
    );
    // Without --members the decode runs on one member (one per GPU), and says so.
    assert!(log.contains("decode: one member (one per GPU"), "{log}");
    let decode = v["decode"].as_array().expect("decode points");
    assert_eq!(decode.len(), 1, "{decode:?}");
    assert_eq!(decode[0]["members"], 1, "{decode:?}");
    assert_charts(&out);
    let _ = std::fs::remove_dir_all(&out);
}

/// Flags a run cannot use fail at once, naming the flag (and the path), before measuring.
#[test]
fn bench_refuses_bad_flags_before_measuring() {
    let Some((a, range)) = lavapipe() else { return };
    let dir = scratch("refused");
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("out");
    let out_s = out.to_str().unwrap();

    // An --out under a regular file cannot be made.
    let file = dir.join("a-file");
    std::fs::write(&file, "not a folder").unwrap();
    let under_file = file.join("out");
    refused(
        &["bench", "all", "--adapter", &a, "--out", under_file.to_str().unwrap()],
        &["--out", under_file.to_str().unwrap()],
    );

    // More than lavapipe binds in one buffer.
    let big = (2 * range).to_string();
    refused(
        &["bench", "all", "--adapter", &a, "--limit-bytes", &big, "--out", out_s],
        &["--limit-bytes", &big, "maxStorageBufferRange"],
    );
    refused(
        &["bench", "allreduce", "--adapter", &a, "--max-bytes", &big, "--out", out_s],
        &["--max-bytes", &big],
    );
    assert!(!out.join("bench.json").exists(), "a refused run wrote bench.json");

    refused(&["bench", "all", "--adapter", &a, "--modes", "bogus", "--out", out_s], &["--modes", "bogus"]);
    refused(
        &[
            "bench",
            "allreduce",
            "--adapter",
            &a,
            "--layouts",
            "0/2",
            "--modes",
            "bridge,bogus",
            "--out",
            out_s,
        ],
        &["--modes"],
    );
    refused(
        &["bench", "decode", "--adapter", &a, "--tokens", "0", "--out", out_s],
        &["--tokens must be at least 1"],
    );
    refused(
        &["bench", "matvec", "--adapter", &a, "--matvec-shapes", "64x", "--out", out_s],
        &["--matvec-shapes", "64x"],
    );
    refused(&["bench", "all", "--adapter", &a, "--members", "0", "--out", out_s], &["--members"]);

    // `bench chart` on a JSON with nothing to chart, and on a file that is not JSON.
    let empty = dir.join("empty.json");
    std::fs::write(&empty, r#"{"allreduce": [], "limits": []}"#).unwrap();
    refused(
        &["bench", "chart", empty.to_str().unwrap(), "--out", out_s],
        &["has no all-reduce points to chart", "empty.json"],
    );
    let broken = dir.join("broken.json");
    std::fs::write(&broken, "{ not json").unwrap();
    refused(&["bench", "chart", broken.to_str().unwrap(), "--out", out_s], &["broken.json"]);
    let _ = std::fs::remove_dir_all(&dir);
}
