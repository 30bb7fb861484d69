//! An ordinary wgpu compute program that uses crossgpu only for the all-reduce.
//!
//! ```text
//! cargo run --release --example wgpu_app
//! ```
//!
//! Opens two devices (two Vulkan adapters where present, else two devices on the one adapter)
//! with `crossgpu::embed::request_device`, computes a partial on each with its own WGSL shader
//! and pipeline (`x[i] = sin(i * k) * (member + 1)`), all-reduces the partials in place with
//! `crossgpu::embed::WgpuComm`, doubles the sum with another pass of its own, reads back with
//! `map_async`, and checks the result against the CPU and across the devices. Prints OK.

use crossgpu::embed::{self, WgpuComm};

const SHADER: &str = r#"
struct P { member: f32, n: u32, _a: u32, _b: u32 }
@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@group(0) @binding(1) var<uniform> p: P;

@compute @workgroup_size(64)
fn partial(@builtin(global_invocation_id) g: vec3<u32>) {
    if (g.x >= p.n) { return; }
    x[g.x] = f32(g.x % 1000u) * 0.001 * (p.member + 1.0);
}

@compute @workgroup_size(64)
fn twice(@builtin(global_invocation_id) g: vec3<u32>) {
    if (g.x >= p.n) { return; }
    x[g.x] = x[g.x] * 2.0;
}
"#;

const N: usize = 100_000;

struct Dev {
    name: String,
    device: wgpu::Device,
    queue: wgpu::Queue,
    x: wgpu::Buffer,
    readback: wgpu::Buffer,
    partial: wgpu::ComputePipeline,
    twice: wgpu::ComputePipeline,
    bind: wgpu::BindGroup,
}

fn open(adapter: &wgpu::Adapter, member: usize) -> Result<Dev, Box<dyn std::error::Error>> {
    let (device, queue) = embed::request_device(adapter, &wgpu::DeviceDescriptor::default())?;
    let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some("app"),
        source: wgpu::ShaderSource::Wgsl(SHADER.into()),
    });
    let entry = |binding, ty| wgpu::BindGroupLayoutEntry {
        binding,
        visibility: wgpu::ShaderStages::COMPUTE,
        ty: wgpu::BindingType::Buffer { ty, has_dynamic_offset: false, min_binding_size: None },
        count: None,
    };
    let bgl = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
        label: Some("app"),
        entries: &[
            entry(0, wgpu::BufferBindingType::Storage { read_only: false }),
            entry(1, wgpu::BufferBindingType::Uniform),
        ],
    });
    let layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
        label: Some("app"),
        bind_group_layouts: &[Some(&bgl)],
        immediate_size: 0,
    });
    let pipeline = |name| {
        device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(name),
            layout: Some(&layout),
            module: &module,
            entry_point: Some(name),
            compilation_options: Default::default(),
            cache: None,
        })
    };
    let (partial, twice) = (pipeline("partial"), pipeline("twice"));
    let x = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("x"),
        size: (N * 4) as u64,
        // What crossgpu's all-reduce needs: STORAGE | COPY_SRC | COPY_DST.
        usage: embed::REQUIRED_USAGE,
        mapped_at_creation: false,
    });
    let readback = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("readback"),
        size: (N * 4) as u64,
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let mut params = [0u8; 16];
    params[..4].copy_from_slice(&(member as f32).to_le_bytes());
    params[4..8].copy_from_slice(&(N as u32).to_le_bytes());
    let uniform = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("params"),
        size: 16,
        usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    queue.write_buffer(&uniform, 0, &params);
    let bind = device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: Some("app"),
        layout: &bgl,
        entries: &[
            wgpu::BindGroupEntry { binding: 0, resource: x.as_entire_binding() },
            wgpu::BindGroupEntry { binding: 1, resource: uniform.as_entire_binding() },
        ],
    });
    let name = adapter.get_info().name;
    Ok(Dev { name, device, queue, x, readback, partial, twice, bind })
}

impl Dev {
    fn run(&self, pipeline: &wgpu::ComputePipeline, then_read: bool) {
        let mut enc = self.device.create_command_encoder(&Default::default());
        {
            let mut pass = enc.begin_compute_pass(&Default::default());
            pass.set_pipeline(pipeline);
            pass.set_bind_group(0, &self.bind, &[]);
            pass.dispatch_workgroups(N.div_ceil(64) as u32, 1, 1);
        }
        if then_read {
            enc.copy_buffer_to_buffer(&self.x, 0, &self.readback, 0, (N * 4) as u64);
        }
        self.queue.submit([enc.finish()]);
    }

    fn read(&self) -> Result<Vec<f32>, Box<dyn std::error::Error>> {
        let slice = self.readback.slice(..);
        let (tx, rx) = std::sync::mpsc::channel();
        slice.map_async(wgpu::MapMode::Read, move |r| {
            let _ = tx.send(r);
        });
        self.device.poll(wgpu::PollType::wait_indefinitely())?;
        rx.recv()??;
        let out = slice
            .get_mapped_range()?
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        self.readback.unmap();
        Ok(out)
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut desc = wgpu::InstanceDescriptor::new_without_display_handle();
    desc.backends = wgpu::Backends::VULKAN;
    let instance = wgpu::Instance::new(desc);
    let adapters = pollster::block_on(instance.enumerate_adapters(wgpu::Backends::VULKAN));
    let adapters: Vec<wgpu::Adapter> = adapters.into_iter().collect();
    if adapters.is_empty() {
        return Err("no Vulkan adapter".into());
    }
    let picked: Vec<&wgpu::Adapter> =
        if adapters.len() >= 2 { vec![&adapters[0], &adapters[1]] } else { vec![&adapters[0], &adapters[0]] };
    if adapters.len() < 2 {
        println!("one adapter: two devices on it");
    }
    let devs: Vec<Dev> = picked.iter().enumerate().map(|(m, a)| open(a, m)).collect::<Result<_, _>>()?;
    for (m, d) in devs.iter().enumerate() {
        println!("device {m}: {}", d.name);
    }

    // Each device computes its partial with the application's own pipeline...
    for d in &devs {
        d.run(&d.partial, false);
    }
    // ...crossgpu sums them in place (ordered after the partial, before the next submit)...
    let pairs: Vec<_> = devs.iter().map(|d| (&d.device, &d.queue)).collect();
    let mut comm = WgpuComm::new(&pairs)?;
    comm.all_reduce(&[&devs[0].x, &devs[1].x], N)?;
    // ...and the application goes on using the sum.
    for d in &devs {
        d.run(&d.twice, true);
    }

    let results: Vec<Vec<f32>> = devs.iter().map(Dev::read).collect::<Result<_, _>>()?;
    let mut max_err = 0f64;
    for i in 0..N {
        let base = f64::from((i % 1000) as f32 * 0.001);
        let want = 2.0 * (base * 1.0 + base * 2.0);
        for r in &results {
            let rel = (f64::from(r[i]) - want).abs() / want.abs().max(1e-30);
            max_err = max_err.max(rel);
        }
    }
    let bitwise = results[1].iter().zip(&results[0]).all(|(a, b)| a.to_bits() == b.to_bits());
    println!("{N} elements: max rel err {max_err:.2e}, devices bitwise equal: {bitwise}");
    if max_err > 1e-6 || !bitwise {
        return Err("all-reduce result is wrong".into());
    }
    println!("OK");
    Ok(())
}
