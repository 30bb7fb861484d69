//! Embedding crossgpu in a wgpu application: open `wgpu::Device`s with the interop extensions
//! ([`request_device`]) and all-reduce the application's own `wgpu::Buffer`s across them
//! ([`WgpuComm`]), in the HostBridge mode (host memory imported into every device, timeline
//! semaphores, a bridge thread): the f32 sum ([`WgpuComm::all_reduce`]) and, over tensors
//! anywhere in the application's buffers ([`WgpuTensor`]), the other collectives `Comm` has —
//! [`WgpuComm::all_gather`], [`WgpuComm::reduce_scatter`], [`WgpuComm::broadcast`],
//! [`WgpuComm::reduce`] and [`WgpuComm::all_reduce_op`] with any [`ReduceOp`](crate::ReduceOp)
//! over f32, f16, bf16, i32 and u32, by the same rules and with the same kernel.
//!
//! # Ordering contract
//!
//! Every collective of [`WgpuComm`] (the sum, [`WgpuComm::all_reduce`], is the example here)
//! records its work into wgpu command encoders of each device (raw
//! Vulkan commands through `CommandEncoder::as_hal_mut`) and submits them with that device's
//! own `wgpu::Queue::submit`, so, on each queue:
//!
//! - every `queue.submit` the application made **before** the call happens-before the
//!   all-reduce's reads of the buffer (each crossgpu command buffer starts with a global memory
//!   barrier; queue order does the rest);
//! - every `queue.submit` the application makes **after** the call sees the summed buffer (each
//!   crossgpu command buffer ends with a global memory barrier). The call returns once the work
//!   is submitted, without waiting for the GPU; a later submit waits on the GPU, not the host.
//!   `map_async` + `device.poll` after a later copy reads the sum as usual;
//! - `queue.write_buffer` calls staged before the all-reduce are flushed by its submissions
//!   (wgpu flushes staged writes with the next submit), so they too come before it.
//!
//! The application must:
//!
//! - not submit to the same queues from other threads while `all_reduce` runs (wgpu-hal's
//!   staged semaphores go with the next submit of the queue, whoever makes it);
//! - have written each buffer at least once (any write: a pass, a copy, `write_buffer`,
//!   `mapped_at_creation`) before its first all-reduce: wgpu zero-fills a buffer lazily at its
//!   first tracked use and does not see crossgpu's raw use;
//! - not `destroy()` a buffer before the all-reduce that uses it has completed on the GPU
//!   (dropping it is fine: crossgpu keeps a clone until then).
//!
//! Every member of a round ends with bitwise the same sum: each device adds the N slots in
//! member order. The slots are the communicator's layout with two entries by round parity, and
//! the bridge is the communicator's (`crate::comm`), so the proof there that no member
//! overwrites a slot a peer still reads holds here too.

mod collectives;

use std::sync::Arc;
use std::time::Duration;

use vk_native::{EmbeddedMember, EmbeddedSlots, HostAllocation, TimelineSemaphore};

use crate::comm::bridge::{BridgeConfig, HostBridge};
use crate::comm::slots::SlotLayout;
use crate::error::{Error, Result};
use crate::kernels::{ImmediateWords, ReduceSlotsParams, COMBINE_SLOTS, REDUCE_SLOTS_F32};

pub use collectives::WgpuTensor;

/// Buffer usages [`WgpuComm::all_reduce`] needs on each buffer.
pub const REQUIRED_USAGE: wgpu::BufferUsages =
    wgpu::BufferUsages::STORAGE.union(wgpu::BufferUsages::COPY_SRC).union(wgpu::BufferUsages::COPY_DST);

/// Opens a `wgpu::Device` and `wgpu::Queue` on `adapter` like `Adapter::request_device`, with
/// VK_EXT_external_memory_host and VK_KHR_external_semaphore_fd enabled where the adapter has
/// them (through wgpu-hal's `open_with_callback` and `Adapter::create_device_from_hal`). The
/// device is an ordinary wgpu device in every other way.
///
/// Errors: a non-Vulkan adapter, features the adapter lacks.
pub fn request_device(
    adapter: &wgpu::Adapter,
    desc: &wgpu::DeviceDescriptor<'_>,
) -> Result<(wgpu::Device, wgpu::Queue)> {
    vk_native::request_wgpu_device(adapter, desc).map_err(|e| Error::native(&adapter.get_info().name, e))
}

/// `n` of the wgpu `adapters` (as `Instance::enumerate_adapters` listed them), picked from
/// `spec`: a comma-separated list where each item is an index into `adapters` or a name
/// fragment (case-insensitive), taken round-robin — `0,1` spreads `n` over two GPUs, `nvidia`
/// puts all on the first NVIDIA adapter. The `CROSSGPU_DEVICES` index convention for wgpu.
///
/// Errors: an empty `spec`, or an item no adapter matches.
pub fn select_adapters(adapters: &[wgpu::Adapter], spec: &str, n: usize) -> Result<Vec<wgpu::Adapter>> {
    let items: Vec<&str> = spec.split(',').map(str::trim).filter(|a| !a.is_empty()).collect();
    if items.is_empty() {
        return Err(Error::InvalidArgument(format!("no adapter named in '{spec}'")));
    }
    let pick = |item: &str| -> Result<wgpu::Adapter> {
        let found = match item.parse::<usize>() {
            Ok(i) => adapters.get(i),
            Err(_) => {
                let want = item.to_lowercase();
                adapters.iter().find(|a| a.get_info().name.to_lowercase().contains(&want))
            }
        };
        found.cloned().ok_or_else(|| Error::InvalidArgument(format!("no Vulkan adapter matches '{item}'")))
    };
    (0..n).map(|i| pick(items[i % items.len()])).collect()
}

/// The embedding's host slots: the communicator's layout ([`SlotLayout`]) with two entries,
/// used by round parity, for the reason `crate::comm` gives (no member overwrites an entry a
/// peer still reads).
struct Slots {
    elements: usize,
    layout: SlotLayout,
    imports: Vec<EmbeddedSlots>,
    _host: Arc<HostAllocation>,
}

/// An all-reduce over wgpu devices opened by [`request_device`] (one member each). See the
/// [module documentation](self) for the ordering contract.
pub struct WgpuComm {
    devices: Vec<wgpu::Device>,
    /// Per member: the timeline its GPU signals with the round at the end of phase A, and the
    /// one the bridge signals to release its phase B.
    done: Vec<TimelineSemaphore>,
    go: Vec<TimelineSemaphore>,
    check_layouts: Vec<wgpu::BindGroupLayout>,
    slots: Option<Slots>,
    round: u64,
    bridge: HostBridge,
    poisoned: Option<String>,
    /// Each member's index of `combine_slots.wgsl` (phase B of every collective but the sum).
    combine_kernel: usize,
    // Last: dropped after the bridge has released every round (see Drop).
    members: Vec<EmbeddedMember>,
}

impl std::fmt::Debug for WgpuComm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WgpuComm").field("members", &self.members).field("round", &self.round).finish()
    }
}

/// How long the bridge waits for a member's phase A before it gives up.
const TIMEOUT_NS: u64 = 120_000_000_000;

impl WgpuComm {
    /// A communicator over `devices`, each a device from [`request_device`] with its queue,
    /// in member order. Errors: no device, the same device twice, a device opened without
    /// VK_EXT_external_memory_host (e.g. by plain `Adapter::request_device`) or without
    /// timeline semaphores.
    pub fn new(devices: &[(&wgpu::Device, &wgpu::Queue)]) -> Result<Self> {
        if devices.is_empty() {
            return Err(Error::InvalidArgument("a WgpuComm needs at least one device".into()));
        }
        for (i, (d, _)) in devices.iter().enumerate() {
            if devices[..i].iter().any(|(e, _)| e == d) {
                return Err(Error::InvalidArgument(format!("device {i} appears twice in the WgpuComm")));
            }
        }
        let shader = REDUCE_SLOTS_F32.spec().shader().map_err(Error::Shader)?;
        let combine = COMBINE_SLOTS.spec().shader().map_err(Error::Shader)?;
        let mut members = Vec::new();
        let mut check_layouts = Vec::new();
        let mut combine_kernel = 0;
        for (i, (d, q)) in devices.iter().enumerate() {
            let mut m = EmbeddedMember::new(d, q, &shader)
                .map_err(|e| Error::native(&format!("wgpu device {i}"), e))?;
            combine_kernel =
                m.add_kernel(&combine).map_err(|e| Error::native(&format!("wgpu device {i}"), e))?;
            members.push(m);
            check_layouts.push(d.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
                label: Some("crossgpu buffer check"),
                entries: &[wgpu::BindGroupLayoutEntry {
                    binding: 0,
                    visibility: wgpu::ShaderStages::COMPUTE,
                    ty: wgpu::BindingType::Buffer {
                        ty: wgpu::BufferBindingType::Storage { read_only: false },
                        has_dynamic_offset: false,
                        min_binding_size: None,
                    },
                    count: None,
                }],
            }));
        }
        let timelines = |what: &str| -> Result<Vec<TimelineSemaphore>> {
            members
                .iter()
                .enumerate()
                .map(|(i, m)| {
                    m.timeline().map_err(|e| Error::native(&format!("wgpu device {i} ({what})"), e))
                })
                .collect()
        };
        let (done, go) = (timelines("done")?, timelines("go")?);
        // The communicator's host bridge, over the wgpu devices' semaphores; it blocks in the
        // driver from the start (no spin), as the application's thread may share the core.
        let cfg = BridgeConfig {
            done: done.clone(),
            go: go.clone(),
            labels: (0..members.len()).map(|i| format!("wgpu member {i}")).collect(),
            spin: Duration::ZERO,
            timeout: Duration::from_nanos(TIMEOUT_NS),
        };
        let bridge = HostBridge::start("crossgpu-embed-bridge".into(), cfg)
            .map_err(|e| Error::OutOfHostMemory(format!(": cannot start the bridge thread: {e}")))?;
        Ok(Self {
            devices: devices.iter().map(|(d, _)| (*d).clone()).collect(),
            done,
            go,
            check_layouts,
            slots: None,
            round: 0,
            bridge,
            poisoned: None,
            combine_kernel,
            members,
        })
    }

    /// Number of members.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether the communicator has no members.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// The members' adapter names.
    pub fn names(&self) -> Vec<String> {
        self.members.iter().map(|m| m.name().to_string()).collect()
    }

    /// Checks, through wgpu's own validation, that `buffer` is a live buffer of member `i`'s
    /// device with STORAGE usage covering `bytes` from `offset` (and that a binding may start
    /// there: `minStorageBufferOffsetAlignment`).
    fn check_buffer(&self, i: usize, buffer: &wgpu::Buffer, offset: u64, bytes: u64) -> Result<()> {
        if !buffer.usage().contains(REQUIRED_USAGE) {
            return Err(Error::InvalidArgument(format!(
                "buffer {i} has usage {:?}; all_reduce needs STORAGE | COPY_SRC | COPY_DST",
                buffer.usage()
            )));
        }
        let end = offset.saturating_add(bytes);
        if buffer.size() < end {
            return Err(Error::LengthMismatch {
                what: format!("all_reduce buffer {i} (bytes, to the end of the range from byte {offset})"),
                expected: end as usize,
                got: buffer.size() as usize,
            });
        }
        let device = &self.devices[i];
        let scope = device.push_error_scope(wgpu::ErrorFilter::Validation);
        let _bg = device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("crossgpu buffer check"),
            layout: &self.check_layouts[i],
            entries: &[wgpu::BindGroupEntry {
                binding: 0,
                resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                    buffer,
                    offset,
                    size: wgpu::BufferSize::new(bytes),
                }),
            }],
        });
        if let Some(e) = pollster::block_on(scope.pop()) {
            return Err(Error::InvalidArgument(format!(
                "buffer {i} cannot be used by member {i}'s device from byte {offset} (another device's, destroyed, or the offset unaligned): {e}"
            )));
        }
        Ok(())
    }

    fn ensure_slots(&mut self, n: usize) -> Result<()> {
        if self.slots.as_ref().is_some_and(|s| s.elements >= n) {
            return Ok(());
        }
        // Old imports may still be used by pending rounds: wait for them.
        self.synchronize()?;
        self.slots = None;
        let align = self.members.iter().map(|m| m.min_import_alignment()).fold(4096, u64::max);
        let layout = SlotLayout::new(self.members.len(), n as u64, 2, align);
        let host = Arc::new(
            HostAllocation::new(layout.total_bytes(), align).map_err(|e| Error::native("host slots", e))?,
        );
        let mut imports = Vec::new();
        for (i, m) in self.members.iter().enumerate() {
            imports
                .push(m.import(&host).map_err(|e| Error::native(&format!("member {i} ({})", m.name()), e))?);
        }
        self.slots = Some(Slots { elements: layout.stride as usize, layout, imports, _host: host });
        Ok(())
    }

    /// Sums the first `len_f32` f32 elements of `buffers` (one per member, in member order,
    /// each of its member's device, usage STORAGE | COPY_SRC | COPY_DST) across the members,
    /// in place, on the f32 wire. Returns once the work is submitted; see the
    /// [ordering contract](self).
    ///
    /// A sum larger than the devices bind at once goes in chunks, one round each
    /// ([`WgpuComm::all_reduce_ranges`]).
    ///
    /// Errors: wrong number of buffers, a buffer too small, without the usages, or of another
    /// device (all checked before any work is submitted); an earlier failure.
    pub fn all_reduce(&mut self, buffers: &[&wgpu::Buffer], len_f32: usize) -> Result<()> {
        let ranges: Vec<(&wgpu::Buffer, u64)> = buffers.iter().map(|&b| (b, 0)).collect();
        self.all_reduce_ranges(&ranges, len_f32)
    }

    /// [`WgpuComm::all_reduce`] of `len_f32` f32 elements from a byte offset of each buffer:
    /// `(buffer, offset)` per member, the offset a multiple of the device's
    /// `minStorageBufferOffsetAlignment` (an allocator that sub-allocates tensors from large
    /// buffers, as cubecl does, binds them at such offsets too).
    ///
    /// A sum whose slots would not fit the devices' `maxStorageBufferRange` goes in chunks,
    /// one round each (every range is checked before the first is submitted).
    pub fn all_reduce_ranges(&mut self, ranges: &[(&wgpu::Buffer, u64)], len_f32: usize) -> Result<()> {
        self.check_healthy()?;
        if ranges.len() != self.members.len() {
            return Err(Error::LengthMismatch {
                what: "all_reduce buffers (one per member)".into(),
                expected: self.members.len(),
                got: ranges.len(),
            });
        }
        if len_f32 == 0 {
            return Ok(());
        }
        let chunk = self.chunk_words()?;
        let chunks: Vec<(usize, usize)> =
            (0..len_f32).step_by(chunk).map(|start| (start, chunk.min(len_f32 - start))).collect();
        for (i, &(b, offset)) in ranges.iter().enumerate() {
            for &(start, len) in &chunks {
                self.check_buffer(i, b, offset + start as u64 * 4, len as u64 * 4)?;
            }
        }
        for (start, len) in chunks {
            let sub: Vec<(&wgpu::Buffer, u64)> =
                ranges.iter().map(|&(b, o)| (b, o + start as u64 * 4)).collect();
            self.submit_round(&sub, len)?;
        }
        Ok(())
    }

    /// An error if an earlier call failed (or the bridge did since).
    fn check_healthy(&self) -> Result<()> {
        if let Some(p) = &self.poisoned {
            return Err(Error::Poisoned("WgpuComm".into(), p.clone()));
        }
        if let Some(e) = self.bridge.error() {
            return Err(Error::Poisoned("WgpuComm".into(), e.to_string()));
        }
        Ok(())
    }

    /// The most 32-bit words one round carries per member. A round's phase B binds both
    /// entries of the slots (Vulkan's `maxStorageBufferRange`) and a range of each buffer
    /// (also the wgpu device's `max_storage_buffer_binding_size`): the chunk is what fits both,
    /// a multiple of the import alignment (so that chunks start at aligned offsets).
    fn chunk_words(&self) -> Result<usize> {
        let align = self.members.iter().map(|m| m.min_import_alignment()).fold(4096, u64::max);
        let max = self.members.iter().map(|m| m.max_storage_buffer_range()).min().unwrap_or(0);
        let wgpu_max =
            self.devices.iter().map(|d| d.limits().max_storage_buffer_binding_size).min().unwrap_or(0);
        let align_words = align / 4;
        // Less one alignment, for a range that starts up to that far into its binding.
        let chunk = crate::comm::slots::capacity_within(max / 2, self.members.len(), align)
            .min(wgpu_max.saturating_sub(align) / 4 / align_words * align_words)
            .min(u64::from(u32::MAX) / 8 / align_words * align_words) as usize;
        if chunk == 0 {
            return Err(Error::Unsupported(format!(
                "the devices bind at most {max} bytes, too few for the slots of {} members",
                self.members.len()
            )));
        }
        Ok(chunk)
    }

    /// Member `i`'s device's `minStorageBufferOffsetAlignment`.
    fn storage_offset_align(&self, i: usize) -> u64 {
        u64::from(self.devices[i].limits().min_storage_buffer_offset_alignment).max(4)
    }

    /// One round over checked ranges whose slots fit the devices' bindings.
    fn submit_round(&mut self, ranges: &[(&wgpu::Buffer, u64)], len_f32: usize) -> Result<()> {
        let bytes = (len_f32 as u64) * 4;
        self.ensure_slots(len_f32)?;
        let slots = self.slots.as_ref().expect("made above");
        let layout = slots.layout;
        let imports = slots.imports.clone();
        let round = self.round + 1;
        let half = round % 2;
        // Phase A on every member first, then phase B: no phase B is queued ahead of a phase A
        // that another member's bridge release depends on.
        let r: Result<()> = (|| {
            // Phase A: each member's partial into its region of the round's entry; its GPU
            // signals `done = round` when the copy is done.
            for (i, m) in self.members.iter_mut().enumerate() {
                m.submit_copy(
                    ranges[i].0,
                    ranges[i].1,
                    &imports[i],
                    layout.region_bytes(i, half),
                    bytes,
                    (&self.done[i], round),
                )
                .map_err(|e| Error::native(&format!("member {i}"), e))?;
            }
            self.bridge.submitted(round);
            // Phase B, released by the bridge's `go = round`: `reduce_slots_f32` sums every
            // member's region of the entry in member order into the buffer (its own term from
            // the buffer itself).
            let offset = layout.region_bytes(0, half) / 4;
            let slot_bytes = (offset + layout.members * layout.stride) * 4;
            for (i, m) in self.members.iter_mut().enumerate() {
                let imm = ReduceSlotsParams {
                    n: len_f32 as u32,
                    members: layout.members as u32,
                    stride: layout.stride as u32,
                    offset: offset as u32,
                    dst_offset: 0,
                    self_index: i as u32,
                };
                // Four elements per thread and step (the kernel's vec4 loads).
                let groups = (len_f32.div_ceil(4 * 256)).clamp(1, 65_535) as u32;
                m.submit_kernel(
                    ranges[i].0,
                    ranges[i].1,
                    bytes,
                    &imports[i],
                    slot_bytes,
                    imm.words().as_ref(),
                    groups,
                    (&self.go[i], round),
                )
                .map_err(|e| Error::native(&format!("member {i}"), e))?;
            }
            Ok(())
        })();
        if let Err(e) = &r {
            // A partly submitted round cannot be completed or undone safely.
            self.poisoned = Some(e.to_string());
        }
        // The round counts (for `synchronize` and `Drop`) once the bridge has it: a phase A
        // that failed part way leaves copies that wait on nothing, and no phase B.
        if self.bridge.last_submitted() >= round {
            self.round = round;
        }
        r
    }

    /// Blocks until every submitted all-reduce has completed on every device.
    pub fn synchronize(&mut self) -> Result<()> {
        self.bridge.wait_released(self.round, Duration::from_nanos(TIMEOUT_NS)).map_err(|e| {
            self.poisoned = Some(e.to_string());
            Error::Poisoned("WgpuComm".into(), e.to_string())
        })?;
        for (i, m) in self.members.iter_mut().enumerate() {
            let ok = m.wait_idle(TIMEOUT_NS).map_err(|e| Error::native(&format!("member {i}"), e))?;
            if !ok {
                return Err(Error::Timeout {
                    what: format!("member {i}'s all-reduce"),
                    ms: TIMEOUT_NS / 1_000_000,
                });
            }
        }
        Ok(())
    }
}

impl Drop for WgpuComm {
    fn drop(&mut self) {
        // Every submitted phase B waits on `go`: make sure each round is released (by the bridge
        // or, after a failure, from here) before the members wait for their work and go away.
        if self.bridge.wait_released(self.round, Duration::from_nanos(TIMEOUT_NS)).is_err() {
            for go in &self.go {
                if go.value().is_ok_and(|v| v < self.round) {
                    let _ = go.signal(self.round);
                }
            }
        }
        self.bridge.stop();
    }
}
