//! The baseline: what a wgpu user writes today to sum a tensor across devices — read each
//! partial back with `map_async`, sum on the CPU, write the sum back with `write_buffer` — one
//! wgpu device per member on the given adapters, round-robin (wgpu opens a VkDevice per device).

use std::time::Instant;

use super::allreduce::{schedule, AllReducePoint};
use super::{data, summarize};
use crate::error::{Error, Result};

struct Member {
    device: wgpu::Device,
    queue: wgpu::Queue,
    storage: wgpu::Buffer,
    readback: wgpu::Buffer,
}

fn wgpu_err(e: impl std::fmt::Display) -> Error {
    Error::Unsupported(format!("wgpu baseline: {e}"))
}

/// Measures the baseline for `members` wgpu devices, `bytes` of f32 per member. `adapters` is
/// a comma-separated list of Vulkan adapters, each an index (in enumeration order, as
/// `crossgpu devices` lists them) or a name fragment (case-insensitive); members take them
/// round-robin, so `nvidia` puts every member on one GPU and `0,1` spreads them over two.
pub fn measure(adapters: &str, members: usize, bytes: u64) -> Result<AllReducePoint> {
    let mut desc = wgpu::InstanceDescriptor::new_without_display_handle();
    desc.backends = wgpu::Backends::VULKAN;
    let instance = wgpu::Instance::new(desc);
    let all = pollster::block_on(instance.enumerate_adapters(wgpu::Backends::VULKAN));
    let chosen = crate::embed::select_adapters(&all, adapters, members).map_err(|e| match e {
        Error::Unsupported(why) => wgpu_err(why),
        other => other,
    })?;
    let n = (bytes / 4) as usize;
    let cpu = chosen.iter().any(|a| a.get_info().device_type == wgpu::DeviceType::Cpu);
    let ms = (0..members)
        .map(|i| {
            let adapter = &chosen[i];
            let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
                label: Some("baseline"),
                required_limits: adapter.limits(),
                ..Default::default()
            }))
            .map_err(wgpu_err)?;
            let storage = device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("partial"),
                size: bytes,
                usage: wgpu::BufferUsages::STORAGE
                    | wgpu::BufferUsages::COPY_SRC
                    | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            });
            queue.write_buffer(&storage, 0, bytemuck::cast_slice(&data(i as u64 + 1, n)));
            let readback = device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("readback"),
                size: bytes,
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            });
            Ok(Member { device, queue, storage, readback })
        })
        .collect::<Result<Vec<_>>>()?;
    let mut sum = vec![0f32; n];
    let mut round = |ms: &[Member]| -> Result<()> {
        for m in ms {
            let mut enc = m.device.create_command_encoder(&Default::default());
            enc.copy_buffer_to_buffer(&m.storage, 0, &m.readback, 0, bytes);
            m.queue.submit([enc.finish()]);
            m.readback.slice(..).map_async(wgpu::MapMode::Read, |r| {
                if let Err(e) = r {
                    log::error!("baseline map_async: {e}");
                }
            });
        }
        for (i, m) in ms.iter().enumerate() {
            m.device.poll(wgpu::PollType::wait_indefinitely()).map_err(wgpu_err)?;
            let view = m.readback.slice(..).get_mapped_range().map_err(wgpu_err)?;
            let part: &[f32] = bytemuck::cast_slice(&view);
            if i == 0 {
                sum.copy_from_slice(part);
            } else {
                sum.iter_mut().zip(part).for_each(|(s, v)| *s += v);
            }
            drop(view);
            m.readback.unmap();
        }
        for m in ms {
            m.queue.write_buffer(&m.storage, 0, bytemuck::cast_slice(&sum));
            m.queue.submit([]);
        }
        Ok(())
    };
    let (rounds, batches) = schedule(bytes, cpu);
    let (rounds, batches) = (rounds.min(100), batches);
    for _ in 0..3 {
        round(&ms)?;
    }
    let mut samples = Vec::new();
    for _ in 0..batches {
        let t = Instant::now();
        for _ in 0..rounds {
            round(&ms)?;
        }
        for m in &ms {
            m.device.poll(wgpu::PollType::wait_indefinitely()).map_err(wgpu_err)?;
        }
        samples.push(t.elapsed().as_secs_f64() * 1e6 / rounds as f64);
    }
    let s = summarize(&samples);
    Ok(AllReducePoint {
        layout: format!("{members} wgpu devices on {adapters}"),
        members,
        mode: "wgpu baseline".into(),
        bytes,
        wire: "f32",
        us_per_round: s,
        algbw_gbps: bytes as f64 / (s.median * 1e-6) / 1e9,
        rounds_per_batch: rounds,
        host_us_per_round: None,
        bridge_blocked_pct: None,
        bridge_poll_us: None,
        bridge_signal_us: None,
        queue_submit_us: None,
        rounds_per_submit: None,
    })
}
