//! The wgpu embedding (`crossgpu::embed`) on lavapipe: two wgpu devices on the one adapter,
//! application compute passes interleaved with all-reduces over 100 rounds, each checked
//! against an f64 reference and bitwise across members; and the errors.
//!
//! Validation: the wgpu instance is created with `InstanceFlags::VALIDATION | DEBUG` when the Khronos
//! layer is installed. Its messages reach wgpu-hal's debug messenger, which logs them through
//! the `log` crate (not `crossgpu::validation_messages()`, which only sees crossgpu's own
//! instance), so this test installs a logger that records every error-level record from wgpu
//! and fails on any.

#[path = "wgpu_embedding/collectives.rs"]
mod collectives;
mod common;

use std::sync::{Mutex, OnceLock};

use crossgpu::embed::{self, WgpuComm};
use crossgpu::Error;

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
            ERRORS.lock().unwrap().push(format!("{}: {text}", r.target()));
        }
    }
    fn flush(&self) {}
}

fn instance() -> &'static wgpu::Instance {
    static INSTANCE: OnceLock<wgpu::Instance> = OnceLock::new();
    INSTANCE.get_or_init(|| {
        if log::set_logger(&Capture).is_ok() {
            log::set_max_level(log::LevelFilter::Warn);
        }
        let mut desc = wgpu::InstanceDescriptor::new_without_display_handle();
        desc.backends = wgpu::Backends::VULKAN;
        if common::layer_installed() {
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

fn assert_no_wgpu_errors() {
    let errors = ERRORS.lock().unwrap();
    assert!(errors.is_empty(), "wgpu / validation layer errors:\n{}", errors.join("\n"));
}

/// Lavapipe's adapter (the tests' reference device), else the first Vulkan adapter.
fn adapter() -> wgpu::Adapter {
    member_adapters(1).remove(0)
}

/// The adapter of each of `n` app devices, as the rest of the suite picks members
/// (`tests/common/mod.rs`): round-robin over `CROSSGPU_TEST_ADAPTERS` (indices in enumeration
/// order, e.g. `0,1` for two GPUs, or name fragments), else `CROSSGPU_TEST_ADAPTER` for all,
/// else lavapipe (or the first adapter) for all.
fn member_adapters(n: usize) -> Vec<wgpu::Adapter> {
    let all: Vec<wgpu::Adapter> =
        pollster::block_on(instance().enumerate_adapters(wgpu::Backends::VULKAN)).into_iter().collect();
    assert!(!all.is_empty(), "no Vulkan adapter");
    if let Ok(list) = std::env::var("CROSSGPU_TEST_ADAPTERS") {
        return embed::select_adapters(&all, &list, n).expect("CROSSGPU_TEST_ADAPTERS");
    }
    let one = match std::env::var("CROSSGPU_TEST_ADAPTER") {
        Ok(a) => embed::select_adapters(&all, &a, 1).expect("CROSSGPU_TEST_ADAPTER").remove(0),
        Err(_) => {
            let pos = all.iter().position(|a| a.get_info().device_type == wgpu::DeviceType::Cpu).unwrap_or(0);
            all[pos].clone()
        }
    };
    vec![one; n]
}

fn desc() -> wgpu::DeviceDescriptor<'static> {
    wgpu::DeviceDescriptor { label: Some("app device"), ..Default::default() }
}

const SHADER: &str = r#"
struct P { seed: u32, n: u32, _a: u32, _b: u32 }
@group(0) @binding(0) var<storage, read_write> buf: array<f32>;
@group(0) @binding(1) var<uniform> p: P;

fn hash(x: u32) -> u32 {
    var h = x;
    h ^= h >> 16u; h *= 0x7feb352du; h ^= h >> 15u; h *= 0x846ca68bu; h ^= h >> 16u;
    return h;
}

@compute @workgroup_size(64)
fn fill(@builtin(global_invocation_id) g: vec3<u32>) {
    let i = g.x + g.y * 65535u * 64u;
    if (i >= p.n) { return; }
    let h = hash(i ^ hash(p.seed));
    buf[i] = (f32(h >> 8u) / 16777216.0 - 0.5) * 4.0;
}

@compute @workgroup_size(64)
fn twice(@builtin(global_invocation_id) g: vec3<u32>) {
    let i = g.x + g.y * 65535u * 64u;
    if (i >= p.n) { return; }
    buf[i] = buf[i] * 2.0;
}
"#;

fn hash(x: u32) -> u32 {
    let mut h = x;
    h ^= h >> 16;
    h = h.wrapping_mul(0x7feb352d);
    h ^= h >> 15;
    h = h.wrapping_mul(0x846ca68b);
    h ^= h >> 16;
    h
}

fn cpu_fill(seed: u32, n: usize) -> Vec<f32> {
    (0..n as u32).map(|i| ((hash(i ^ hash(seed)) >> 8) as f32 / 16_777_216.0 - 0.5) * 4.0).collect()
}

/// One application device: its buffer, uniform, pipelines and read-backs.
struct App {
    device: wgpu::Device,
    queue: wgpu::Queue,
    buf: wgpu::Buffer,
    uniform: wgpu::Buffer,
    read_a: wgpu::Buffer,
    read_b: wgpu::Buffer,
    fill: wgpu::ComputePipeline,
    twice: wgpu::ComputePipeline,
    bind: wgpu::BindGroup,
}

impl App {
    fn new(device: wgpu::Device, queue: wgpu::Queue, max: usize) -> Self {
        let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some("app"),
            source: wgpu::ShaderSource::Wgsl(SHADER.into()),
        });
        let storage = |binding, ty| wgpu::BindGroupLayoutEntry {
            binding,
            visibility: wgpu::ShaderStages::COMPUTE,
            ty: wgpu::BindingType::Buffer { ty, has_dynamic_offset: false, min_binding_size: None },
            count: None,
        };
        let bgl = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: Some("app"),
            entries: &[
                storage(0, wgpu::BufferBindingType::Storage { read_only: false }),
                storage(1, wgpu::BufferBindingType::Uniform),
            ],
        });
        let layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: Some("app"),
            bind_group_layouts: &[Some(&bgl)],
            immediate_size: 0,
        });
        let pipe = |entry| {
            device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some(entry),
                layout: Some(&layout),
                module: &module,
                entry_point: Some(entry),
                compilation_options: Default::default(),
                cache: None,
            })
        };
        let fill = pipe("fill");
        let twice = pipe("twice");
        let bytes = (max * 4) as u64;
        let buf = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("partial"),
            size: bytes,
            usage: embed::REQUIRED_USAGE,
            mapped_at_creation: false,
        });
        let uniform = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("params"),
            size: 16,
            usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let read = |label| {
            device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(label),
                size: bytes,
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            })
        };
        let (read_a, read_b) = (read("read a"), read("read b"));
        let bind = device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("app"),
            layout: &bgl,
            entries: &[
                wgpu::BindGroupEntry { binding: 0, resource: buf.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 1, resource: uniform.as_entire_binding() },
            ],
        });
        Self { device, queue, buf, uniform, read_a, read_b, fill, twice, bind }
    }

    fn pass(&self, enc: &mut wgpu::CommandEncoder, pipeline: &wgpu::ComputePipeline, n: usize) {
        let groups = n.div_ceil(64);
        let (x, y) = (groups.min(65_535), groups.div_ceil(65_535));
        let mut pass = enc.begin_compute_pass(&Default::default());
        pass.set_pipeline(pipeline);
        pass.set_bind_group(0, &self.bind, &[]);
        pass.dispatch_workgroups(x as u32, y as u32, 1);
    }

    /// The application's own work before the all-reduce: fill the partial.
    fn produce(&self, seed: u32, n: usize) {
        let p = [seed, n as u32, 0, 0];
        self.queue.write_buffer(&self.uniform, 0, bytemuck_bytes(&p));
        let mut enc = self.device.create_command_encoder(&Default::default());
        self.pass(&mut enc, &self.fill, n);
        self.queue.submit([enc.finish()]);
    }

    /// The application's own work after the all-reduce: read the sum, double it, read again.
    fn consume(&self, n: usize) {
        let bytes = (n * 4) as u64;
        let mut enc = self.device.create_command_encoder(&Default::default());
        enc.copy_buffer_to_buffer(&self.buf, 0, &self.read_a, 0, bytes);
        self.pass(&mut enc, &self.twice, n);
        enc.copy_buffer_to_buffer(&self.buf, 0, &self.read_b, 0, bytes);
        self.queue.submit([enc.finish()]);
    }

    fn read(&self, which: &wgpu::Buffer, n: usize) -> Vec<f32> {
        let bytes = (n * 4) as u64;
        let slice = which.slice(..bytes);
        slice.map_async(wgpu::MapMode::Read, |r| r.expect("map_async"));
        self.device.poll(wgpu::PollType::wait_indefinitely()).expect("poll");
        let out = slice
            .get_mapped_range()
            .expect("mapped range")
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        which.unmap();
        out
    }
}

fn bytemuck_bytes(p: &[u32; 4]) -> &[u8] {
    bytemuck::cast_slice(p)
}

#[test]
fn interleaved_rounds_on_two_devices_of_one_adapter() {
    // Two devices on lavapipe here; on one adapter or spread over GPUs where the environment
    // says so (member_adapters).
    let adapters = member_adapters(2);
    eprintln!("adapters: {:?}", adapters.iter().map(|a| a.get_info().name).collect::<Vec<_>>());
    const MAX: usize = 70_000;
    let apps: Vec<App> = adapters
        .iter()
        .map(|adapter| {
            let (d, q) = embed::request_device(adapter, &desc()).expect("embed::request_device");
            App::new(d, q, MAX)
        })
        .collect();
    let pairs: Vec<_> = apps.iter().map(|a| (&a.device, &a.queue)).collect();
    let mut comm = WgpuComm::new(&pairs).expect("WgpuComm::new");
    let members = apps.len();
    for round in 0..100u32 {
        let n = match round {
            0 => 1,
            1 => MAX,
            _ => 1 + (round as usize * 7919) % 20_000,
        };
        let seeds: Vec<u32> = (0..members as u32).map(|m| round * 16 + m + 1).collect();
        for (app, &seed) in apps.iter().zip(&seeds) {
            app.produce(seed, n);
        }
        let bufs: Vec<&wgpu::Buffer> = apps.iter().map(|a| &a.buf).collect();
        comm.all_reduce(&bufs, n).unwrap_or_else(|e| panic!("round {round}: {e}"));
        for app in &apps {
            app.consume(n);
        }
        let parts: Vec<Vec<f32>> = seeds.iter().map(|&s| cpu_fill(s, n)).collect();
        let reference = common::reference::all_reduce(&parts, &[], false);
        let mut sums = Vec::new();
        for (m, app) in apps.iter().enumerate() {
            let a = app.read(&app.read_a, n);
            let b = app.read(&app.read_b, n);
            for i in 0..n {
                let (exact, tol) = (reference.v[i], reference.e[i]);
                assert!(
                    (f64::from(a[i]) - exact).abs() <= tol,
                    "round {round} member {m} element {i}: {} vs {exact} (tol {tol})",
                    a[i]
                );
                assert_eq!(
                    b[i].to_bits(),
                    (a[i] * 2.0).to_bits(),
                    "round {round} member {m} element {i}: later app pass"
                );
            }
            sums.push(a);
        }
        for m in 1..members {
            assert!(
                sums[m].iter().zip(&sums[0]).all(|(x, y)| x.to_bits() == y.to_bits()),
                "round {round}: member {m} differs bitwise from member 0"
            );
        }
    }
    comm.synchronize().expect("synchronize");
    drop(comm);
    assert_no_wgpu_errors();
}

#[test]
fn bad_buffers_and_plain_devices_are_errors() {
    let adapter = adapter();
    let (d0, q0) = embed::request_device(&adapter, &desc()).expect("request_device");
    let (d1, q1) = embed::request_device(&adapter, &desc()).expect("request_device");
    let mut comm = WgpuComm::new(&[(&d0, &q0), (&d1, &q1)]).expect("WgpuComm::new");
    let make = |d: &wgpu::Device, usage, size| {
        d.create_buffer(&wgpu::BufferDescriptor { label: None, size, usage, mapped_at_creation: false })
    };
    let good0 = make(&d0, embed::REQUIRED_USAGE, 4096);
    let good1 = make(&d1, embed::REQUIRED_USAGE, 4096);
    q0.write_buffer(&good0, 0, &[0u8; 4096]);
    q1.write_buffer(&good1, 0, &[0u8; 4096]);

    // Without STORAGE.
    let no_storage = make(&d1, wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST, 4096);
    let e = comm.all_reduce(&[&good0, &no_storage], 1024).expect_err("no STORAGE usage");
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    // Too small.
    let small = make(&d1, embed::REQUIRED_USAGE, 64);
    let e = comm.all_reduce(&[&good0, &small], 1024).expect_err("too small");
    assert!(matches!(e, Error::LengthMismatch { .. }), "{e}");
    // Of another device.
    let e = comm.all_reduce(&[&good0, &good0], 1024).expect_err("buffer of another device");
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    // Wrong count.
    let e = comm.all_reduce(&[&good0], 1024).expect_err("one buffer for two members");
    assert!(matches!(e, Error::LengthMismatch { .. }), "{e}");
    // The communicator still works after rejected calls.
    comm.all_reduce(&[&good0, &good1], 1024).expect("all_reduce after rejected calls");
    comm.synchronize().expect("synchronize");

    // A device from plain request_device (no VK_EXT_external_memory_host).
    let (plain, plain_q) = pollster::block_on(adapter.request_device(&desc())).expect("request_device");
    let e = WgpuComm::new(&[(&d0, &q0), (&plain, &plain_q)]).expect_err("plain device");
    assert!(matches!(e, Error::MissingExtension { .. }), "{e}");
    // The same device twice.
    let e = WgpuComm::new(&[(&d0, &q0), (&d0, &q0)]).expect_err("same device twice");
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    drop(comm);
    assert_no_wgpu_errors();
}

#[test]
fn select_adapters_by_index_or_name_round_robin() {
    let all: Vec<wgpu::Adapter> =
        pollster::block_on(instance().enumerate_adapters(wgpu::Backends::VULKAN)).into_iter().collect();
    let name = |a: &wgpu::Adapter| a.get_info().name;
    let picked = embed::select_adapters(&all, "0", 3).unwrap();
    assert_eq!(picked.iter().map(name).collect::<Vec<_>>(), vec![name(&all[0]); 3]);
    let last = all.len() - 1;
    let picked = embed::select_adapters(&all, &format!(" {last} , 0 "), 3).unwrap();
    assert_eq!(
        picked.iter().map(name).collect::<Vec<_>>(),
        [name(&all[last]), name(&all[0]), name(&all[last])]
    );
    let fragment = name(&all[0]).to_uppercase();
    assert_eq!(name(&embed::select_adapters(&all, &fragment, 1).unwrap()[0]), name(&all[0]));
    for bad in ["", " , ", "no-such-adapter", &all.len().to_string()] {
        assert!(embed::select_adapters(&all, bad, 1).is_err(), "{bad:?}");
    }
}

/// Rounds back to back with nothing read in between, each on buffers of its own: a member's
/// phase A of round k+1 must not overwrite its slot while a peer's phase B of round k still
/// reads it (the embedding used one slot per member until it took the communicator's two
/// entries by round parity). Checked afterwards, every round against the f64 sum and bitwise
/// across members.
#[test]
fn pipelined_rounds_never_read_a_slot_the_next_round_wrote() {
    let adapters = member_adapters(3);
    let devices: Vec<(wgpu::Device, wgpu::Queue)> =
        adapters.iter().map(|a| embed::request_device(a, &desc()).expect("embed::request_device")).collect();
    let pairs: Vec<_> = devices.iter().map(|(d, q)| (d, q)).collect();
    let mut comm = WgpuComm::new(&pairs).expect("WgpuComm::new");
    const ROUNDS: u32 = 40;
    let n = 3000;
    let mut rounds: Vec<(Vec<Vec<f32>>, Vec<wgpu::Buffer>)> = Vec::new();
    for round in 0..ROUNDS {
        let parts: Vec<Vec<f32>> =
            (0..devices.len() as u32).map(|m| cpu_fill(round * 16 + m + 1, n)).collect();
        let bufs: Vec<wgpu::Buffer> = devices
            .iter()
            .zip(&parts)
            .map(|((d, _), p)| {
                let b = d.create_buffer(&wgpu::BufferDescriptor {
                    label: Some("pipelined round"),
                    size: (n * 4) as u64,
                    usage: embed::REQUIRED_USAGE,
                    mapped_at_creation: true,
                });
                b.slice(..)
                    .get_mapped_range_mut()
                    .expect("mapped at creation")
                    .copy_from_slice(bytemuck::cast_slice(p));
                b.unmap();
                b
            })
            .collect();
        let refs: Vec<&wgpu::Buffer> = bufs.iter().collect();
        comm.all_reduce(&refs, n).unwrap_or_else(|e| panic!("round {round}: {e}"));
        rounds.push((parts, bufs));
    }
    comm.synchronize().expect("synchronize");
    for (round, (parts, bufs)) in rounds.iter().enumerate() {
        let reference = common::reference::all_reduce(parts, &[], false);
        let mut sums: Vec<Vec<u32>> = Vec::new();
        for (m, ((d, q), b)) in devices.iter().zip(bufs).enumerate() {
            let read = d.create_buffer(&wgpu::BufferDescriptor {
                label: Some("read"),
                size: (n * 4) as u64,
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            });
            let mut enc = d.create_command_encoder(&Default::default());
            enc.copy_buffer_to_buffer(b, 0, &read, 0, (n * 4) as u64);
            q.submit([enc.finish()]);
            let slice = read.slice(..);
            slice.map_async(wgpu::MapMode::Read, |r| r.expect("map_async"));
            d.poll(wgpu::PollType::wait_indefinitely()).expect("poll");
            let got: Vec<f32> = bytemuck::cast_slice(&slice.get_mapped_range().expect("mapped")).to_vec();
            for (i, &g) in got.iter().enumerate() {
                let (exact, tol) = (reference.v[i], reference.e[i]);
                assert!(
                    (f64::from(g) - exact).abs() <= tol,
                    "round {round} member {m} element {i}: {g} vs {exact}"
                );
            }
            sums.push(got.iter().map(|v| v.to_bits()).collect());
        }
        assert!(sums.iter().all(|s| s == &sums[0]), "round {round}: members differ bitwise");
    }
    assert_no_wgpu_errors();
}

/// `all_reduce_ranges`: each member's tensor lies at its own aligned offset inside a larger
/// buffer (as a sub-allocating framework such as cubecl places tensors), with random values
/// around it. Over rounds of awkward lengths and offsets, the range holds the f64-checked sum,
/// bitwise equal across members, and every byte outside it is untouched. An unaligned offset
/// and a range past the buffer's end are errors before anything runs.
#[test]
fn ranges_at_offsets_sum_in_place_and_leave_the_rest_alone() {
    let adapters = member_adapters(2);
    let devices: Vec<(wgpu::Device, wgpu::Queue)> =
        adapters.iter().map(|a| embed::request_device(a, &desc()).expect("request_device")).collect();
    let pairs: Vec<(&wgpu::Device, &wgpu::Queue)> = devices.iter().map(|(d, q)| (d, q)).collect();
    let mut comm = WgpuComm::new(&pairs).expect("WgpuComm::new");
    let align =
        devices.iter().map(|(d, _)| d.limits().min_storage_buffer_offset_alignment).max().unwrap() as usize;
    let words = 40_000usize;
    let buffers: Vec<wgpu::Buffer> = devices
        .iter()
        .map(|(d, _)| {
            d.create_buffer(&wgpu::BufferDescriptor {
                label: Some("pool"),
                size: (words * 4) as u64,
                usage: embed::REQUIRED_USAGE,
                mapped_at_creation: false,
            })
        })
        .collect();
    let mut rng = common::rng(0xB0FF);
    for round in 0..40 {
        let n = [1, 3, 1000, 4097, 12_345][round % 5];
        // Offsets in whole alignment units, different on each member.
        let offsets: Vec<usize> =
            (0..2).map(|j| align * ((round * 7 + j * 13) % ((words * 4 - n * 4) / align).max(1))).collect();
        let pools: Vec<Vec<f32>> = (0..2).map(|_| common::random(&mut rng, words)).collect();
        for ((d, q), (b, p)) in devices.iter().zip(buffers.iter().zip(&pools)) {
            q.write_buffer(b, 0, bytemuck::cast_slice(p));
            let _ = d;
        }
        let ranges: Vec<(&wgpu::Buffer, u64)> =
            buffers.iter().zip(&offsets).map(|(b, &o)| (b, o as u64)).collect();
        comm.all_reduce_ranges(&ranges, n).expect("all_reduce_ranges");
        comm.synchronize().expect("synchronize");
        let parts: Vec<Vec<f32>> =
            (0..2).map(|j| pools[j][offsets[j] / 4..offsets[j] / 4 + n].to_vec()).collect();
        let want = common::reference::all_reduce(&parts, &[], false);
        let got: Vec<Vec<f32>> =
            devices.iter().zip(&buffers).map(|((d, q), b)| read_back(d, q, b, words)).collect();
        for j in 0..2 {
            let (o, w) = (offsets[j] / 4, &got[j]);
            common::assert_within_ev(&format!("round {round} member {j}"), &w[o..o + n], &want);
            assert_eq!(&w[..o], &pools[j][..o], "round {round} member {j}: bytes before the range changed");
            assert_eq!(
                &w[o + n..],
                &pools[j][o + n..],
                "round {round} member {j}: bytes after the range changed"
            );
        }
        let (o0, o1) = (offsets[0] / 4, offsets[1] / 4);
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&got[0][o0..o0 + n]), bits(&got[1][o1..o1 + n]), "round {round}: members differ");
    }
    if align > 4 {
        let e =
            comm.all_reduce_ranges(&[(&buffers[0], 4), (&buffers[1], 0)], 8).expect_err("unaligned offset");
        assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    }
    let past = (words * 4 - align) as u64;
    let e = comm.all_reduce_ranges(&[(&buffers[0], past), (&buffers[1], 0)], 1000).expect_err("past the end");
    assert!(matches!(e, Error::LengthMismatch { .. }), "{e}");
    comm.all_reduce_ranges(&[(&buffers[0], 0), (&buffers[1], align as u64)], 10)
        .expect("after rejected calls");
    comm.synchronize().expect("synchronize");
    drop(comm);
    assert_no_wgpu_errors();
}

/// A sum whose slots would not fit the devices' `maxStorageBufferRange` goes in chunks, each
/// its own round: every element summed, at an offset, the bytes around the range untouched;
/// a buffer too small for the last chunk is refused before the first is submitted.
#[test]
fn sums_larger_than_a_binding_go_in_chunks() {
    let adapters = member_adapters(2);
    let devices: Vec<(wgpu::Device, wgpu::Queue)> =
        adapters.iter().map(|a| embed::request_device(a, &desc()).expect("request_device")).collect();
    let pairs: Vec<(&wgpu::Device, &wgpu::Queue)> = devices.iter().map(|(d, q)| (d, q)).collect();
    let mut comm = WgpuComm::new(&pairs).expect("WgpuComm::new");
    // A range of more than the wgpu device binds at once needs two chunks at least (on
    // lavapipe the slots, 2 entries x 2 members of the chunk within its 128 MiB
    // maxStorageBufferRange, make it five).
    let max = devices.iter().map(|(d, _)| d.limits().max_storage_buffer_binding_size).min().unwrap() as usize;
    let n = max / 4 + 12_345;
    let offset =
        devices.iter().map(|(d, _)| d.limits().min_storage_buffer_offset_alignment).max().unwrap() as usize;
    let words = offset / 4 + n + 7;
    let mut rng = common::rng(0xC4A7);
    let pools: Vec<Vec<f32>> = (0..2).map(|_| common::random(&mut rng, words)).collect();
    let buffers: Vec<wgpu::Buffer> = devices
        .iter()
        .zip(&pools)
        .map(|((d, q), p)| {
            let b = d.create_buffer(&wgpu::BufferDescriptor {
                label: Some("large"),
                size: (words * 4) as u64,
                usage: embed::REQUIRED_USAGE,
                mapped_at_creation: false,
            });
            q.write_buffer(&b, 0, bytemuck::cast_slice(p));
            b
        })
        .collect();
    // Refused whole: the last chunk would run past the end of buffer 1.
    let e = comm
        .all_reduce_ranges(&[(&buffers[0], offset as u64), (&buffers[1], offset as u64)], n + 8)
        .expect_err("past the end");
    assert!(matches!(e, Error::LengthMismatch { .. }), "{e}");
    comm.all_reduce_ranges(&[(&buffers[0], offset as u64), (&buffers[1], offset as u64)], n)
        .expect("chunked");
    comm.synchronize().expect("synchronize");
    let o = offset / 4;
    let parts: Vec<Vec<f32>> = pools.iter().map(|p| p[o..o + n].to_vec()).collect();
    let want = common::reference::all_reduce(&parts, &[], false);
    let got: Vec<Vec<f32>> =
        devices.iter().zip(&buffers).map(|((d, q), b)| read_back(d, q, b, words)).collect();
    for j in 0..2 {
        common::assert_within_ev(&format!("member {j}"), &got[j][o..o + n], &want);
        assert_eq!(&got[j][..o], &pools[j][..o], "member {j}: bytes before the range changed");
        assert_eq!(&got[j][o + n..], &pools[j][o + n..], "member {j}: bytes after the range changed");
    }
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&got[0][o..o + n]), bits(&got[1][o..o + n]), "members differ");
    drop(comm);
    assert_no_wgpu_errors();
}

/// The first `words` f32 of `buffer`, through a mapped copy.
fn read_back(device: &wgpu::Device, queue: &wgpu::Queue, buffer: &wgpu::Buffer, words: usize) -> Vec<f32> {
    let bytes = (words * 4) as u64;
    let staging = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("read back"),
        size: bytes,
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let mut enc = device.create_command_encoder(&Default::default());
    enc.copy_buffer_to_buffer(buffer, 0, &staging, 0, bytes);
    queue.submit([enc.finish()]);
    let slice = staging.slice(..);
    slice.map_async(wgpu::MapMode::Read, |r| r.expect("map_async"));
    device.poll(wgpu::PollType::wait_indefinitely()).expect("poll");
    let out = bytemuck::cast_slice(&slice.get_mapped_range().expect("mapped range")).to_vec();
    staging.unmap();
    out
}

/// vk-native's embedded member itself (under `WgpuComm`'s own checks) refuses what would reach
/// past memory or name another device's buffer in a raw command: a buffer of another device, a
/// destroyed one, slot offsets that wrap; and a buffer the application destroys while a
/// submission still uses it stays alive for it (wgpu tracks it).
#[test]
fn the_native_member_checks_buffers_and_ranges() {
    let adapters = member_adapters(2);
    let (d0, q0) = embed::request_device(&adapters[0], &desc()).unwrap();
    let (d1, _q1) = embed::request_device(&adapters[1], &desc()).unwrap();
    let shader = crossgpu::kernels::spec("reduce_slots_f32").unwrap().shader().unwrap();
    let mut m = vk_native::EmbeddedMember::new(&d0, &q0, &shader).unwrap();
    let host = std::sync::Arc::new(vk_native::HostAllocation::new(1 << 16, 4096).unwrap());
    let slots = m.import(&host).unwrap();
    let sem = m.timeline().unwrap();
    let usage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST;
    let buffer = |d: &wgpu::Device| {
        d.create_buffer(&wgpu::BufferDescriptor { label: None, size: 4096, usage, mapped_at_creation: false })
    };
    let other = buffer(&d1);
    let e = m.submit_copy(&other, 0, &slots, 0, 256, (&sem, 1)).unwrap_err().to_string();
    assert!(e.contains("not a live buffer"), "{e}");
    let mine = buffer(&d0);
    for slot_offset in [u64::MAX - 255, !3, (1 << 16) - 128] {
        let e = m.submit_copy(&mine, 0, &slots, slot_offset, 256, (&sem, 1)).unwrap_err().to_string();
        assert!(e.contains("out of range"), "slot offset {slot_offset}: {e}");
    }
    let gone = buffer(&d0);
    gone.destroy();
    assert!(m.submit_copy(&gone, 0, &slots, 0, 256, (&sem, 1)).is_err(), "a destroyed buffer");
    // A good copy, its buffer destroyed while the submission is pending.
    m.submit_copy(&mine, 0, &slots, 0, 256, (&sem, 1)).unwrap();
    mine.destroy();
    assert!(m.wait_idle(60_000_000_000).unwrap());
    assert_eq!(sem.value().unwrap(), 1, "the copy ran and signalled");
    drop(m);
    assert_no_wgpu_errors();
}
