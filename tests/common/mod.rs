//! Shared test harness: one instance with the Khronos validation layer on (synchronization
//! validation included) whenever the layer is installed, random inputs, the checks (a failed
//! test on any validation error, bitwise and bounded comparisons), and in `reference` the CPU
//! twin of every kernel, computed in f64 with its error bound.
//!
//! Every test binary compiles this module (`mod common;`), and uses only part of it.
#![allow(dead_code)]

pub mod reference;

use std::sync::{Mutex, MutexGuard, OnceLock};

use crossgpu::{DeviceGroup, GroupSpec, Instance};
use rand::{Rng, SeedableRng};

/// The tests of a binary that take this run one at a time, so that a validation error is
/// reported by the test that caused it (the layer's messages are collected process-wide), and
/// lavapipe has the machine's cores to itself. A panicking test does not poison it for the
/// others.
pub fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

/// What this run must exercise, from `CROSSGPU_TEST_REQUIRE` (comma-separated; `.ci/run` sets
/// it): `validation` (the Khronos layer is installed and on), `poll` (DevicePoll runs wherever
/// a test asks for it), `sync_fd` (SyncFd runs: Mesa 26's lavapipe or a GPU), `smollm2` (the real
/// model's file is there: `CROSSGPU_SMOLLM2_GGUF`, which dev.sh sets), `cooperative_matrix`
/// (the products on matrix units run: Mesa 26's lavapipe or a GPU). A test that would
/// skip something required fails instead, so CI cannot go green on a skip. An unknown name is
/// a failure too (a typo would otherwise require nothing).
pub fn required(what: &str) -> bool {
    const KNOWN: [&str; 5] = ["validation", "poll", "sync_fd", "smollm2", "cooperative_matrix"];
    let list = std::env::var("CROSSGPU_TEST_REQUIRE").unwrap_or_default();
    let items: Vec<&str> = list.split(',').map(str::trim).filter(|s| !s.is_empty()).collect();
    if let Some(bad) = items.iter().find(|i| !KNOWN.contains(i)) {
        panic!("CROSSGPU_TEST_REQUIRE={list:?}: unknown requirement {bad:?} (known: {})", KNOWN.join(", "));
    }
    assert!(KNOWN.contains(&what), "the tests asked about an unknown requirement {what:?}");
    items.contains(&what)
}

/// Skips the rest of a test loudly, or fails it where `requirement` is required
/// ([`required`]).
pub fn skip(requirement: Option<&str>, why: &str) {
    if let Some(r) = requirement.filter(|r| required(r)) {
        panic!("CROSSGPU_TEST_REQUIRE includes {r}, but this test would skip: {why}");
    }
    eprintln!("SKIPPED: {why}");
}

/// The requirement a mode's tests fall under.
pub fn requirement(mode: crossgpu::Mode) -> Option<&'static str> {
    match mode {
        crossgpu::Mode::DevicePoll => Some("poll"),
        crossgpu::Mode::SyncFd => Some("sync_fd"),
        _ => None,
    }
}

/// Whether a refusal of `mode` (`why`, an `Error::Unsupported` message) comes from the devices
/// or the test layout rather than from a fault: DevicePoll as [`device_poll_refused_by_layout`]
/// says, SyncFd on a driver without SYNC_FD semaphores. The caller skips ([`skip`]).
pub fn mode_refused_by_layout(mode: crossgpu::Mode, why: &str) -> bool {
    match mode {
        crossgpu::Mode::DevicePoll => device_poll_refused_by_layout(why),
        crossgpu::Mode::SyncFd => why.contains("SYNC_FD"),
        _ => false,
    }
}

/// Whether the Khronos layer is installed (the tests then run with it on).
pub fn layer_installed() -> bool {
    [
        "/usr/share/vulkan/explicit_layer.d/VkLayer_khronos_validation.json",
        "/usr/local/share/vulkan/explicit_layer.d/VkLayer_khronos_validation.json",
    ]
    .iter()
    .any(|p| std::path::Path::new(p).exists())
}

/// The process-wide instance, validation on where the layer is installed.
pub fn instance() -> Instance {
    static INSTANCE: OnceLock<Instance> = OnceLock::new();
    INSTANCE
        .get_or_init(|| {
            // wgpu-hal's own messenger logs every layer message at ERROR level; the collector
            // (vk_native::validation) prints the real errors and counts the known false
            // positive, so wgpu-hal's copies are turned off unless RUST_LOG asks for them.
            let mut logger = env_logger::builder();
            if std::env::var_os("RUST_LOG").is_none() {
                logger.filter_module("wgpu_hal::vulkan::instance", log::LevelFilter::Off);
            }
            let _ = logger.is_test(true).try_init();
            // Synchronization validation (hazards between commands, queues and the host).
            if std::env::var_os("VK_LAYER_ENABLES").is_none() {
                std::env::set_var("VK_LAYER_ENABLES", "VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT");
            }
            // CROSSGPU_TEST_VALIDATION=off leaves an installed layer out (dev.sh: the decoders
            // on Mesa 26, where trixie's layer corrupts its own heap); never with `validation`
            // required.
            let off = std::env::var("CROSSGPU_TEST_VALIDATION").is_ok_and(|v| v == "off");
            if off && required("validation") {
                panic!("CROSSGPU_TEST_VALIDATION=off, but CROSSGPU_TEST_REQUIRE includes validation");
            }
            let validation = layer_installed() && !off;
            if !validation && required("validation") {
                panic!("CROSSGPU_TEST_REQUIRE includes validation, but VK_LAYER_KHRONOS_validation is not installed (apt-get install vulkan-validationlayers)");
            }
            if off {
                eprintln!("NOTE: CROSSGPU_TEST_VALIDATION=off: running WITHOUT the validation layer");
            } else if !validation {
                eprintln!("NOTE: VK_LAYER_KHRONOS_validation is not installed: running WITHOUT validation (apt-get install vulkan-validationlayers)");
            }
            let inst = Instance::with_validation(validation).expect("a Vulkan driver (lavapipe: apt-get install mesa-vulkan-drivers)");
            if validation {
                assert!(inst.validation_enabled(), "the validation layer is installed but did not load");
            }
            inst
        })
        .clone()
}

/// Index of the lavapipe adapter, for tests of lavapipe's specifics; `None` (the caller skips
/// loudly) where the instance has none.
pub fn lavapipe_index() -> Option<usize> {
    let i = instance().adapters().iter().position(|a| a.driver_id == "MESA_LLVMPIPE");
    if i.is_none() {
        eprintln!("SKIPPED: no lavapipe adapter in this instance; this test checks lavapipe's specifics");
    }
    i
}

/// Opens `spec` (the CROSSGPU_DEVICES syntax) on the test instance.
pub fn group(spec: &str) -> DeviceGroup {
    DeviceGroup::open(&instance(), &GroupSpec::parse(spec).unwrap()).unwrap()
}

/// `n` logical devices on one adapter: each its own VkDevice (lavapipe has one queue), or, with
/// `CROSSGPU_TEST_STANDINS=1`, `n` queues of one VkDevice standing in for `n` devices, or with
/// `CROSSGPU_TEST_STANDINS=shared`, `n` members sharing one queue of one VkDevice. The
/// adapter is `CROSSGPU_TEST_ADAPTER` (an index or a name, default 0), so the same tests run on
/// the GPU machine's NVIDIA adapter.
///
/// `CROSSGPU_TEST_ADAPTERS` (a comma-separated list such as `0,1`) instead spreads the `n`
/// members round-robin over those adapters, one VkDevice each: separate physical GPUs on a
/// multi-GPU machine (`0,1` with `n = 3` gives `0,1,0`).
pub fn logical(n: usize) -> DeviceGroup {
    if let Ok(list) = std::env::var("CROSSGPU_TEST_ADAPTERS") {
        let adapters: Vec<&str> = list.split(',').map(str::trim).filter(|a| !a.is_empty()).collect();
        assert!(!adapters.is_empty(), "CROSSGPU_TEST_ADAPTERS={list:?} names no adapter");
        return group(&(0..n).map(|i| adapters[i % adapters.len()]).collect::<Vec<_>>().join(","));
    }
    let adapter = std::env::var("CROSSGPU_TEST_ADAPTER").unwrap_or_else(|_| "0".into());
    match std::env::var("CROSSGPU_TEST_STANDINS").as_deref() {
        Ok("1") => group(&format!("{adapter}*{n}")),
        Ok("shared") => group(&format!("{adapter}/{n}")),
        _ => group(&vec![adapter.as_str(); n].join(",")),
    }
}

/// Whether DevicePoll's refusal `why` comes from the test layout, not from a fault: too few
/// llvmpipe threads, or members on one GPU (`CROSSGPU_TEST_ADAPTERS` spreading more members
/// than GPUs, `CROSSGPU_TEST_STANDINS` members sharing a VkDevice), which DevicePoll refuses
/// by design. The caller skips loudly ([`skip`] with `Some("poll")`).
pub fn device_poll_refused_by_layout(why: &str) -> bool {
    why.contains("LP_NUM_THREADS")
        || why.contains("share a VkDevice")
        || why.contains("VkDevices of one GPU")
        || std::env::var_os("CROSSGPU_TEST_ADAPTERS").is_some()
}

/// Fails the calling test if the validation layer reported any error so far in this process.
/// The layer's one known false positive (`crossgpu::KNOWN_LAYER_FALSE_POSITIVES`, its own
/// timeline bookkeeping on wait-before-signal, which the spec allows) is not an error; the
/// collector only counts it, and this prints one line with the count.
pub fn assert_no_validation_errors() {
    let suppressed = crossgpu::take_suppressed_validation_count();
    if suppressed > 0 {
        eprintln!(
            "note: {suppressed} known validation-layer false positive(s) suppressed ({}; see crossgpu::KNOWN_LAYER_FALSE_POSITIVES)",
            crossgpu::KNOWN_LAYER_FALSE_POSITIVES.join(", ")
        );
    }
    let msgs = crossgpu::validation_messages();
    assert!(
        msgs.is_empty(),
        "{} validation error(s):\n{}",
        msgs.len(),
        msgs.iter().map(|m| format!("[{}] {}", m.id_name, m.message)).collect::<Vec<_>>().join("\n")
    );
}

pub fn rng(seed: u64) -> rand::rngs::StdRng {
    rand::rngs::StdRng::seed_from_u64(seed)
}

/// Random values in [-1, 1) with no exact zeros.
pub fn random(rng: &mut impl Rng, n: usize) -> Vec<f32> {
    (0..n)
        .map(|_| {
            let v: f32 = rng.random_range(-1.0..1.0);
            if v == 0.0 {
                0.5
            } else {
                v
            }
        })
        .collect()
}

/// `random` scaled by `s`.
pub fn scaled(rng: &mut impl Rng, n: usize, s: f32) -> Vec<f32> {
    random(rng, n).into_iter().map(|v| v * s).collect()
}

/// f32 → f16 → f64, as the GPU sees an f16 value.
pub fn f16(v: f32) -> f64 {
    half::f16::from_f32(v).to_f64()
}

/// The f16 value nearest to `v` (round to nearest even), widened to f32, as the CPU computes it.
pub fn to_f16(v: f32) -> f32 {
    half::f16::from_f32(v).to_f32()
}

/// Asserts `got == want` bit for bit.
pub fn assert_bits(what: &str, got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    if let Some(i) = (0..got.len()).find(|&i| got[i].to_bits() != want[i].to_bits()) {
        panic!(
            "{what}: element {i} of {}: got {:e} ({:#010x}) want {:e} ({:#010x})",
            got.len(),
            got[i],
            got[i].to_bits(),
            want[i],
            want[i].to_bits()
        );
    }
}

/// Asserts `|got[i] - want[i]| <= bound[i]` for every i, naming the worst element (largest
/// error / bound); returns the largest error / bound ratio seen.
pub fn assert_within(what: &str, got: &[f32], want: &[f64], bound: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let mut worst = (0usize, 0.0f64);
    for i in 0..got.len() {
        let err = (got[i] as f64 - want[i]).abs();
        let ratio = if got[i].is_nan() { f64::INFINITY } else { err / bound[i].max(f64::MIN_POSITIVE) };
        if ratio > worst.1 {
            worst = (i, ratio);
        }
    }
    let i = worst.0;
    assert!(
        worst.1 <= 1.0,
        "{what}: element {i} of {}: got {:e} want {:e} (error {:e} > bound {:e})",
        got.len(),
        got[i],
        want[i],
        (got[i] as f64 - want[i]).abs(),
        bound[i]
    );
    worst.1
}

/// `assert_within` against a reference's values and bounds (`reference::ErrorModel::Bound`).
pub fn assert_within_ev(what: &str, got: &[f32], want: &reference::Ev) -> f64 {
    assert_within(what, got, &want.v, &want.e)
}

/// Runs `f`, turning a panic into `Err(its message)`.
pub fn no_panic<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|e| {
        e.downcast_ref::<String>()
            .cloned()
            .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default()
    })
}

/// Asserts |got - want| <= atol + rtol * |want| elementwise, reporting the worst element.
pub fn assert_close(what: &str, got: &[f32], want: &[f64], rtol: f64, atol: f64) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let mut worst = (0usize, 0.0f64);
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let excess = (g as f64 - w).abs() - (atol + rtol * w.abs());
        if excess > worst.1 || (g.is_nan() && !w.is_nan()) {
            worst = (i, excess.max(f64::MIN_POSITIVE));
        }
    }
    if worst.1 > 0.0 {
        let i = worst.0;
        panic!("{what}: element {i}: got {} want {} (rtol {rtol}, atol {atol})", got[i], want[i]);
    }
}
