//! What the burn integration costs: the all-reduce of burn tensors (`crossgpu_burn::Comm`)
//! beside the same all-reduce of plain `wgpu::Buffer`s (`crossgpu::embed::WgpuComm`, what the
//! integration calls) and of crossgpu's own tensors (`crossgpu::Comm` in the HostBridge mode,
//! the same host-slot exchange), on the same adapters, in one process.
//!
//! Each path runs `--rounds` all-reduces back to back and then waits for the GPUs, `--batches`
//! times; it prints per round the median time (issue to completion, divided by the rounds)
//! with the batches' spread, and the host's time issuing them.
//!
//! ```text
//! cargo run -p crossgpu-burn --release --example bench_all_reduce -- --devices llvmpipe --members 2
//! ```

use std::time::{Duration, Instant};

use burn::tensor::{Tensor, TensorData};
use crossgpu::embed::{self, WgpuComm};
use crossgpu::{AllReduceOptions, CommOptions, DeviceGroup, Instance, Mode, ModeRequest};
use crossgpu_burn::{burn, Comm};

type BoxResult<T> = Result<T, Box<dyn std::error::Error>>;

fn data(seed: u64, n: usize) -> Vec<f32> {
    (0..n).map(|i| (((i as u64 * 2_654_435_761 + seed * 97) % 2000) as f32 - 999.5) * 1e-3).collect()
}

/// Per-round times of `batches` batches of `rounds` calls of `issue`, each batch followed by
/// `wait`: (issue to completion, host issuing), µs.
fn time(
    rounds: usize,
    batches: usize,
    mut issue: impl FnMut() -> BoxResult<()>,
    mut wait: impl FnMut() -> BoxResult<()>,
) -> BoxResult<(Vec<f64>, Vec<f64>)> {
    for _ in 0..rounds.min(10) {
        issue()?;
    }
    wait()?;
    let (mut total, mut host) = (Vec::new(), Vec::new());
    for _ in 0..batches {
        let t = Instant::now();
        for _ in 0..rounds {
            issue()?;
        }
        let issued: Duration = t.elapsed();
        wait()?;
        total.push(t.elapsed().as_secs_f64() * 1e6 / rounds as f64);
        host.push(issued.as_secs_f64() * 1e6 / rounds as f64);
    }
    Ok((total, host))
}

fn report(bytes: usize, path: &str, (mut total, mut host): (Vec<f64>, Vec<f64>)) {
    total.sort_by(f64::total_cmp);
    host.sort_by(f64::total_cmp);
    println!(
        "{bytes:>10} B  {path:<34} {:>10.1} µs/round ({:.1}–{:.1})   host {:>8.1} µs/round",
        total[total.len() / 2],
        total[0],
        total[total.len() - 1],
        host[host.len() / 2]
    );
}

fn main() {
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn run() -> BoxResult<()> {
    let mut spec = std::env::var("CROSSGPU_DEVICES").unwrap_or_else(|_| "llvmpipe".into());
    let mut members = 2;
    let mut sizes = vec![32 << 10, 64 << 20];
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--devices" => spec = value,
            "--members" => members = value.parse()?,
            "--sizes" => sizes = value.split(',').map(str::parse).collect::<Result<_, _>>()?,
            _ => {
                return Err(format!(
                    "unknown argument {flag}; use --devices SPEC --members N --sizes BYTES,.."
                )
                .into())
            }
        }
    }

    // burn tensors.
    let mut comm = Comm::open(&spec, members)?;
    println!("members: {}", comm.names().join(" | "));
    // The same adapters for the other two paths: wgpu's, and crossgpu's own by name (the k-th
    // adapter of a name in wgpu's list is the k-th of that name in crossgpu's).
    let mut desc = wgpu::InstanceDescriptor::new_without_display_handle();
    desc.backends = wgpu::Backends::VULKAN;
    let wgpu_instance = wgpu::Instance::new(desc);
    let adapters: Vec<wgpu::Adapter> =
        pollster::block_on(wgpu_instance.enumerate_adapters(wgpu::Backends::VULKAN)).into_iter().collect();
    let picked = embed::select_adapters(&adapters, &spec, members)?;
    let instance = Instance::new()?;
    let mut own = Vec::new();
    for a in &picked {
        let name = a.get_info().name;
        let k = adapters
            .iter()
            .take_while(|b| !(b.get_info() == a.get_info()))
            .filter(|b| b.get_info().name == name)
            .count();
        let index = instance
            .adapters()
            .iter()
            .filter(|c| c.name == name)
            .nth(k)
            .map(|c| c.index)
            .ok_or_else(|| format!("crossgpu does not list adapter {name}"))?;
        own.push((index, 1));
    }
    let group = DeviceGroup::open_resolved(&instance, &own)?;
    let options = CommOptions { mode: ModeRequest::Forced(Mode::HostBridge), ..CommOptions::from_env()? };
    let mut own_comm = crossgpu::Comm::with_options(&group, options)?;
    let opened: Vec<(wgpu::Device, wgpu::Queue)> = picked
        .iter()
        .map(|a| embed::request_device(a, &wgpu::DeviceDescriptor::default()))
        .collect::<Result<_, _>>()?;
    let mut wgpu_comm = WgpuComm::new(&opened.iter().map(|(d, q)| (d, q)).collect::<Vec<_>>())?;

    for &bytes in &sizes {
        let n = bytes / 4;
        let (rounds, batches) = if bytes <= 1 << 20 { (100, 9) } else { (3, 5) };
        let devices = comm.devices();

        let mut tensors: Vec<Tensor<1>> = devices
            .iter()
            .enumerate()
            .map(|(m, d)| Tensor::from_data(TensorData::new(data(m as u64, n), [n]), d))
            .collect();
        let cell = std::cell::RefCell::new(&mut comm);
        let burn_times = time(
            rounds,
            batches,
            || {
                let t = std::mem::take(&mut tensors);
                tensors = cell.borrow_mut().all_reduce(t)?;
                Ok(())
            },
            || Ok(cell.borrow_mut().synchronize()?),
        )?;
        report(bytes, "burn tensors (crossgpu-burn)", burn_times);

        let buffers: Vec<wgpu::Buffer> = opened
            .iter()
            .enumerate()
            .map(|(m, (d, q))| {
                let b = d.create_buffer(&wgpu::BufferDescriptor {
                    label: Some("bench"),
                    size: bytes as u64,
                    usage: embed::REQUIRED_USAGE,
                    mapped_at_creation: false,
                });
                q.write_buffer(&b, 0, bytemuck::cast_slice(&data(m as u64, n)));
                q.submit([]);
                b
            })
            .collect();
        let refs: Vec<&wgpu::Buffer> = buffers.iter().collect();
        let cell = std::cell::RefCell::new(&mut wgpu_comm);
        let wgpu_times = time(
            rounds,
            batches,
            || Ok(cell.borrow_mut().all_reduce(&refs, n)?),
            || Ok(cell.borrow_mut().synchronize()?),
        )?;
        report(bytes, "wgpu buffers (crossgpu::embed)", wgpu_times);

        let mut parts: Vec<crossgpu::Tensor> = group
            .members()
            .iter()
            .enumerate()
            .map(|(m, member)| member.upload_f32(&data(m as u64, n)))
            .collect::<Result<_, _>>()?;
        let opts = AllReduceOptions { precision: crossgpu::Precision::F32, ..Default::default() };
        let cell = std::cell::RefCell::new(&mut own_comm);
        let own_times = time(
            rounds,
            batches,
            || Ok(cell.borrow_mut().all_reduce(&mut parts, &opts)?),
            || Ok(group.synchronize()?),
        )?;
        report(bytes, "crossgpu tensors (HostBridge)", own_times);
    }
    // burn's runtime threads must be idle before the process exits.
    comm.synchronize()?;
    Ok(())
}
