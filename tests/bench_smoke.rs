//! The benchmark harness on lavapipe at small sizes (issue 6): `crossgpu bench all` runs every
//! part (limits, all-reduce in each layout and mode beside the wgpu baseline, matvec, decode)
//! and writes bench.json and the charts. A smoke run for the harness, not for figures.
//!
//! It runs the binary without the validation layer: the bench makes thousands of
//! wait-before-signal rounds, and Debian 12's layer stalls ~10 s on each of its own
//! "UNASSIGNED-VkSemaphore-state-timeout" self-diagnoses (see tests/common/mod.rs), which made
//! this run take 2 min 40 s instead of 5 s. Run by hand with `CROSSGPU_VALIDATION=1` and
//! synchronization validation on 2026-11-29, it reported nothing but that message id.

use std::process::Command;

#[test]
fn bench_all_writes_every_part_to_bench_json() {
    let out = std::env::temp_dir().join(format!("crossgpu-bench-smoke-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let run = Command::new(env!("CARGO_BIN_EXE_crossgpu"))
        .args(["bench", "all", "--adapter", "0", "--members", "1,2", "--max-bytes", "16384"])
        .args(["--limit-bytes", "1048576", "--matvec-shapes", "64x512,33x40", "--preset", "small"])
        .args(["--tokens", "2", "--out"])
        .arg(&out)
        .env_remove("CROSSGPU_VALIDATION")
        .env_remove("CROSSGPU_DEVICES")
        .output()
        .expect("running crossgpu bench");
    let log = format!("{}{}", String::from_utf8_lossy(&run.stdout), String::from_utf8_lossy(&run.stderr));
    assert!(run.status.success(), "crossgpu bench all failed:\n{log}");

    let text = std::fs::read_to_string(out.join("bench.json")).expect("bench.json written");
    let v: serde_json::Value = serde_json::from_str(&text).expect("bench.json is JSON");
    assert!(v["command"].as_str().is_some_and(|c| c.contains("bench all")), "{text}");
    assert!(
        v["skipped"].as_array().is_some_and(|s| s.iter().all(|x| {
            // SyncFd is refused on lavapipe (no SYNC_FD semaphores), with its reason.
            x.as_str().is_some_and(|x| x.contains("SyncFd"))
        })),
        "unexpected skips: {}",
        v["skipped"]
    );

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

    let points = v["allreduce"].as_array().expect("allreduce points");
    let has = |layout: &str, mode: &str| {
        points
            .iter()
            .filter(|p| p["layout"].as_str() == Some(layout) && p["mode"].as_str() == Some(mode))
            .count()
    };
    // Two sizes (4 KiB, 16 KiB) for each layout and mode the default set has on lavapipe.
    for (layout, mode) in [
        ("0*1", "HostBridge"),
        ("0/2", "HostBridge"),
        ("0/2", "Generic"),
        ("0,0", "HostBridge"),
        ("0,0", "Generic"),
        ("2 wgpu devices on 0", "wgpu baseline"),
    ] {
        assert_eq!(has(layout, mode), 2, "{layout} {mode} in {points:?}");
    }
    for p in points {
        let s = &p["us_per_round"];
        let (p10, median, p90) =
            (s["p10"].as_f64().unwrap(), s["median"].as_f64().unwrap(), s["p90"].as_f64().unwrap());
        assert!(0.0 < p10 && p10 <= median && median <= p90, "{p}");
        assert!(p["algbw_gbps"].as_f64().unwrap() > 0.0, "{p}");
    }

    // Both f16 kernels on 64x512 and 33x40.
    let matvec = v["matvec"].as_array().expect("matvec points");
    assert_eq!(matvec.len(), 2 * crossgpu::MATVEC_F16_KERNELS.len(), "{matvec:?}");
    assert!(matvec.iter().all(|m| m["us_per_matvec"]["median"].as_f64().unwrap() > 0.0));

    // The decode on 1 member and 2 (shared queue, VkDevices): the same tokens on each.
    let decode = v["decode"].as_array().expect("decode points");
    assert_eq!(decode.len(), 3, "{decode:?}");
    for d in decode {
        assert_eq!(d["tokens"], decode[0]["tokens"], "{d}");
        assert!(d["tokens_per_s"].as_f64().unwrap() > 0.0, "{d}");
    }

    for chart in ["allreduce-latency.png", "allreduce-bandwidth.png"] {
        let len = std::fs::metadata(out.join(chart)).map(|m| m.len()).unwrap_or(0);
        assert!(len > 1000, "{chart}: {len} bytes");
    }
    let _ = std::fs::remove_dir_all(&out);
}
