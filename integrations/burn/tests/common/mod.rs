//! What the tests share: a wgpu instance with the Khronos validation layer on where it is
//! installed, a logger that records every error wgpu or the layer reports (a test fails on
//! any), and the members the tests run on.
//!
//! Members: round-robin over `CROSSGPU_TEST_ADAPTERS` (indices in enumeration order or name
//! fragments, e.g. `0,1` for two GPUs), else lavapipe for all (several devices on it).
//! cubecl keeps every device registered for the life of the process, so each test binary
//! opens its members once ([`comm`]) and its tests take turns.

#![allow(dead_code)]

use std::sync::{Mutex, MutexGuard, OnceLock};

use crossgpu_burn::Comm;

static ERRORS: Mutex<Vec<String>> = Mutex::new(Vec::new());

struct Capture;

impl log::Log for Capture {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        m.level() <= log::Level::Warn
    }
    fn log(&self, r: &log::Record<'_>) {
        if r.level() <= log::Level::Warn {
            eprintln!("[{} {}] {}", r.level(), r.target(), r.args());
        }
        let text = r.args().to_string();
        // wgpu-hal logs each layer message as one record and its objects as tab-indented
        // records after it: the first carries the verdict.
        if r.level() == log::Level::Error
            && r.target().starts_with("wgpu")
            && !text.starts_with('\t')
            && !is_known_layer_false_positive(&text)
        {
            ERRORS.lock().unwrap_or_else(|e| e.into_inner()).push(format!("{}: {text}", r.target()));
        }
    }
    fn flush(&self) {}
}

fn layer_installed() -> bool {
    [
        "/usr/share/vulkan/explicit_layer.d/VkLayer_khronos_validation.json",
        "/usr/local/share/vulkan/explicit_layer.d/VkLayer_khronos_validation.json",
    ]
    .iter()
    .any(|p| std::path::Path::new(p).exists())
}

pub fn instance() -> &'static wgpu::Instance {
    static INSTANCE: OnceLock<wgpu::Instance> = OnceLock::new();
    INSTANCE.get_or_init(|| {
        if log::set_logger(&Capture).is_ok() {
            log::set_max_level(log::LevelFilter::Warn);
        }
        let mut desc = wgpu::InstanceDescriptor::new_without_display_handle();
        desc.backends = wgpu::Backends::VULKAN;
        if layer_installed() {
            // DEBUG too: without it wgpu-hal does not enable VK_EXT_debug_utils, and the layer's
            // messages never reach the log.
            desc.flags = wgpu::InstanceFlags::VALIDATION | wgpu::InstanceFlags::DEBUG;
        } else {
            eprintln!("NOTE: VK_LAYER_KHRONOS_validation is not installed: running WITHOUT validation");
        }
        wgpu::Instance::new(desc)
    })
}

/// The layer's messages that are not about the application: crossgpu's list
/// (`crossgpu::KNOWN_LAYER_FALSE_POSITIVES`: a wait on a timeline value the host signals later),
/// and one of Debian 12's layer (1.3.239), whose SPIR-V validator predates the `WGSL` source
/// language (10) that naga writes into `OpSource` when the instance has `DEBUG`.
fn is_known_layer_false_positive(text: &str) -> bool {
    crossgpu::KNOWN_LAYER_FALSE_POSITIVES.iter().any(|id| text.contains(&format!("[{id} ")))
        || (text.contains("UNASSIGNED-CoreValidation-Shader-InconsistentSpirv")
            && text.contains("Invalid source language operand: 10"))
}

/// Ends a test: waits for all of `comm`'s work (burn's threads must not be inside the driver
/// when the process exits), then fails on any error wgpu or the layer reported.
pub fn finish(comm: &mut Comm) {
    comm.synchronize().expect("synchronize");
    assert_no_wgpu_errors();
}

pub fn assert_no_wgpu_errors() {
    let errors = ERRORS.lock().unwrap_or_else(|e| e.into_inner()).clone();
    assert!(errors.is_empty(), "wgpu / validation layer errors:\n{}", errors.join("\n"));
}

/// The adapters of `n` members (see the module documentation).
pub fn member_adapters(n: usize) -> Vec<wgpu::Adapter> {
    let all: Vec<wgpu::Adapter> =
        pollster::block_on(instance().enumerate_adapters(wgpu::Backends::VULKAN)).into_iter().collect();
    assert!(!all.is_empty(), "no Vulkan adapter");
    let spec = std::env::var("CROSSGPU_TEST_ADAPTERS").unwrap_or_else(|_| {
        let pos = all.iter().position(|a| a.get_info().device_type == wgpu::DeviceType::Cpu).unwrap_or(0);
        pos.to_string()
    });
    crossgpu::embed::select_adapters(&all, &spec, n).expect("CROSSGPU_TEST_ADAPTERS")
}

/// A burn device on `adapter` that crossgpu did not open: a plain `request_device`, handed
/// to burn's wgpu runtime.
pub fn foreign_device(adapter: &wgpu::Adapter) -> burn::tensor::Device {
    let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor::default()))
        .expect("a plain wgpu device");
    let setup = cubecl::wgpu::WgpuSetup {
        instance: instance().clone(),
        adapter: adapter.clone(),
        device,
        queue,
        backend: wgpu::Backend::Vulkan,
    };
    let options = cubecl::wgpu::RuntimeOptions::try_default().expect("runtime options");
    burn::tensor::Device::from(cubecl::wgpu::try_init_device(setup, options).expect("burn takes the device"))
}

/// This binary's members: two, opened once; the tests take turns.
pub fn comm() -> MutexGuard<'static, Comm> {
    static COMM: OnceLock<Mutex<Comm>> = OnceLock::new();
    COMM.get_or_init(|| {
        Mutex::new(Comm::from_adapters(instance(), &member_adapters(2)).expect("open two members"))
    })
    .lock()
    .unwrap_or_else(|e| e.into_inner())
}

/// Random f32 in [-2, 2), never zero, from `seed`.
pub fn random(seed: u64, n: usize) -> Vec<f32> {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..n)
        .map(|_| loop {
            let v: f32 = rng.random_range(-2.0..2.0);
            if v != 0.0 {
                break v;
            }
        })
        .collect()
}
