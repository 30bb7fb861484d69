//! Recording many dispatches and copies into one command buffer and submitting it raw on one
//! queue of the device, with timeline and binary semaphore waits and signals.
//!
//! Command buffers come from wgpu-hal command encoders (one encoder per command buffer in
//! flight, since wgpu-hal resets a whole pool at once); commands are recorded into them with
//! ash, and they are submitted with `vkQueueSubmit` on the recorder's own queue, which
//! wgpu-hal's single-queue API cannot do. Each submit signals the recorder's `progress`
//! timeline semaphore; a command buffer and every resource it used (kept alive by `Arc`s) are
//! released once `progress` passes its value.
//!
//! A [`Replay`] is work recorded once into a command buffer of its own
//! ([`Recorder::begin_capture`] .. [`Recorder::end_capture`]) and submitted any number of times
//! ([`SubmitInfo::replay`]): the host pays for recording it once.

use std::collections::VecDeque;
use std::num::NonZeroU64;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ash::vk;
use wgpu_hal::{CommandEncoder as _, Device as _};

use crate::access::Access;
use crate::buffer::GpuUse;
use crate::device::Device;
use crate::error::{map_hal_device, map_vk, NativeError, Result};
use crate::kernel::BindGroup;
use crate::profile::Profile;
use crate::semaphore::{SyncFdSemaphore, TimelineSemaphore};
use crate::GpuBuffer;

/// Semaphores a submission waits on and signals, besides the recorder's own progress signal.
#[derive(Default)]
pub struct SubmitInfo<'a> {
    /// Timeline semaphores to wait for, each until it reaches the value given (all stages wait).
    pub wait_timeline: &'a [(&'a TimelineSemaphore, u64)],
    /// Timeline semaphores to signal with the value given once the submission completes.
    pub signal_timeline: &'a [(&'a TimelineSemaphore, u64)],
    /// Binary (SYNC_FD-capable) semaphores to wait for (all stages wait).
    pub wait_binary: &'a [&'a SyncFdSemaphore],
    /// Binary (SYNC_FD-capable) semaphores to signal once the submission completes.
    pub signal_binary: &'a [&'a SyncFdSemaphore],
    /// A recording of this recorder's to run after its open command buffer, in the same
    /// submission.
    pub replay: Option<&'a Replay>,
}

/// Work recorded once by a [`Recorder`] ([`Recorder::begin_capture`]), submitted again with
/// every [`SubmitInfo::replay`] that names it. Its commands, their resources and their order
/// are fixed at recording: whatever should change between submissions must be read by the
/// kernels from buffers (a counter the GPU advances, say). Clones share the recording.
#[derive(Clone)]
pub struct Replay(Arc<ReplayInner>);

struct ReplayInner {
    device: Device,
    queue_index: u32,
    pool: vk::CommandPool,
    cmd: vk::CommandBuffer,
    dispatches: u64,
    commands: usize,
    /// Host-mapped buffers the recording copies to or from: each submission of it notes them.
    uses: Vec<Arc<GpuUse>>,
    _keep: Vec<KeepAlive>,
}

impl Drop for ReplayInner {
    fn drop(&mut self) {
        crate::live::dec(&crate::live::RECORDINGS);
        // SAFETY: every submission of the command buffer holds this value alive until it
        // completed, so nothing pending uses it; destroying the pool frees the buffer.
        unsafe { self.device.raw().destroy_command_pool(self.pool, None) };
    }
}

impl Replay {
    /// Compute dispatches in the recording.
    pub fn dispatches(&self) -> u64 {
        self.0.dispatches
    }

    /// Commands (dispatches, copies, fills) in the recording.
    pub fn commands(&self) -> usize {
        self.0.commands
    }
}

impl std::fmt::Debug for Replay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replay").field("dispatches", &self.0.dispatches).finish()
    }
}

/// A recording in progress: a command buffer of its own pool, begun for simultaneous use (a
/// replay may be submitted again while an earlier submission of it still runs).
struct Capture {
    pool: vk::CommandPool,
    cmd: vk::CommandBuffer,
    keep: Vec<KeepAlive>,
    uses: Vec<Arc<GpuUse>>,
    dispatches: u64,
    commands: usize,
}

type KeepAlive = Arc<dyn std::any::Any + Send + Sync>;

/// Submits a recorder keeps in flight, by default, before recording waits for the oldest. Each
/// holds one command pool, so this also bounds the pools a recorder ever creates (one more).
pub const DEFAULT_MAX_PENDING: usize = 128;
/// How long that wait may take before it is reported as a timeout.
const BACKPRESSURE_TIMEOUT_NS: u64 = 120_000_000_000;

struct Pending {
    /// `None` for a submit without a command buffer (only semaphores and keep-alives).
    encoder: Option<wgpu_hal::vulkan::CommandEncoder>,
    cmd: Option<wgpu_hal::vulkan::CommandBuffer>,
    value: u64,
    _keep: Vec<KeepAlive>,
}

/// A recorder's command buffer, ended and about to be submitted.
struct Closed {
    encoder: Option<wgpu_hal::vulkan::CommandEncoder>,
    cmd: Option<wgpu_hal::vulkan::CommandBuffer>,
    raw: Option<vk::CommandBuffer>,
    keep: Vec<KeepAlive>,
    uses: Vec<Arc<GpuUse>>,
}

struct Active {
    encoder: wgpu_hal::vulkan::CommandEncoder,
    keep: Vec<KeepAlive>,
    /// Host-mapped buffers its copies use (noted as busy when it is submitted).
    uses: Vec<Arc<GpuUse>>,
}

/// Records work for one queue of a device and submits it.
pub struct Recorder {
    device: Device,
    queue_index: u32,
    progress: TimelineSemaphore,
    submitted: u64,
    idle: Vec<wgpu_hal::vulkan::CommandEncoder>,
    pending: VecDeque<Pending>,
    active: Option<Active>,
    commands: usize,
    /// Submits in flight before recording waits for the oldest.
    max_pending: usize,
    /// Host time spent in that wait, so far.
    backpressure_wait: Duration,
    /// `vkQueueSubmit` calls this recorder made (a joint batch counts for its first
    /// recorder) and the host time spent in them, queue lock included.
    queue_submits: u64,
    queue_submit_time: Duration,
    /// Dispatches recorded so far (all command buffers).
    dispatches: u64,
    /// Timestamps after every dispatch and copy, while profiling.
    profile: Option<Profile>,
    /// The recording in progress, which every command goes to instead of the open buffer.
    capture: Option<Capture>,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder")
            .field("queue", &self.queue_index)
            .field("submitted", &self.submitted)
            .field("pending", &self.pending.len())
            .finish()
    }
}

impl Recorder {
    /// A recorder for queue `queue_index` of `device`, with [`DEFAULT_MAX_PENDING`] submits in
    /// flight at most.
    pub fn new(device: &Device, queue_index: u32) -> Result<Self> {
        Self::with_max_pending(device, queue_index, DEFAULT_MAX_PENDING)
    }

    /// A recorder that lets at most `max_pending` (at least 1) submits be in flight: recording
    /// past that waits for the oldest to complete.
    pub fn with_max_pending(device: &Device, queue_index: u32, max_pending: usize) -> Result<Self> {
        if queue_index >= device.queue_count() {
            return Err(NativeError::Unsupported(format!(
                "queue {queue_index} of a device opened with {} queue(s)",
                device.queue_count()
            )));
        }
        let progress = TimelineSemaphore::new(device, 0)?;
        crate::live::inc(&crate::live::RECORDERS);
        Ok(Self {
            device: device.clone(),
            queue_index,
            progress,
            submitted: 0,
            idle: Vec::new(),
            pending: VecDeque::new(),
            active: None,
            commands: 0,
            max_pending: max_pending.max(1),
            backpressure_wait: Duration::ZERO,
            queue_submits: 0,
            queue_submit_time: Duration::ZERO,
            dispatches: 0,
            profile: None,
            capture: None,
        })
    }

    /// The device this recorder records for.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The index of the queue (of family 0) this recorder submits on.
    pub fn queue_index(&self) -> u32 {
        self.queue_index
    }

    /// The timeline semaphore each submit signals with its value.
    pub fn progress(&self) -> &TimelineSemaphore {
        &self.progress
    }

    /// Value of the latest submit (0 before the first).
    pub fn submitted(&self) -> u64 {
        self.submitted
    }

    /// Host time spent so far waiting because `max_pending` submits were in flight: what a
    /// caller subtracts from its recording time to get the host's own cost.
    pub fn backpressure_wait(&self) -> Duration {
        self.backpressure_wait
    }

    /// `vkQueueSubmit` calls made so far and the host time spent in them (queue lock
    /// included); a [`Recorder::submit_together`] batch counts for its first recorder.
    pub fn queue_submit_time(&self) -> (u64, Duration) {
        (self.queue_submits, self.queue_submit_time)
    }

    /// Commands recorded since the last submit.
    pub fn recorded_commands(&self) -> usize {
        self.commands
    }

    fn check_lost(&self) -> Result<()> {
        if self.device.is_lost() {
            Err(NativeError::DeviceLost)
        } else {
            Ok(())
        }
    }

    /// Returns finished command buffers to their encoders.
    fn recycle(&mut self) -> Result<()> {
        let Some(front) = self.pending.front() else {
            return Ok(());
        };
        if front.value > self.progress.value()? {
            return Ok(());
        }
        let done = self.progress.value()?;
        while self.pending.front().is_some_and(|p| p.value <= done) {
            let mut p = self.pending.pop_front().expect("checked");
            if let Some(mut encoder) = p.encoder.take() {
                // SAFETY: the submission that used the command buffer completed (`progress`
                // passed its value), so resetting the encoder's pool is allowed.
                unsafe { encoder.reset_all(p.cmd.take().into_iter()) };
                // Every pool this recorder made is kept (at most `max_pending + 1`): destroying
                // pools when the queue drained and creating them again when the host ran ahead
                // churned the driver's allocations, and resident memory crept up for 200,000
                // rounds on the H200 (docs/RELIABILITY.md).
                self.idle.push(encoder);
            }
        }
        Ok(())
    }

    /// Releases completed submits, and waits for the oldest while `max_pending` are in
    /// flight: a host running far ahead of the GPU would hold a command pool and the resources
    /// of every pending submit.
    fn make_room(&mut self) -> Result<()> {
        self.recycle()?;
        if self.pending.len() >= self.max_pending {
            let oldest = self.pending.front().map_or(0, |p| p.value);
            let t = Instant::now();
            let done = self.progress.wait(oldest, BACKPRESSURE_TIMEOUT_NS)?;
            self.backpressure_wait += t.elapsed();
            if !done {
                return Err(NativeError::Timeout(BACKPRESSURE_TIMEOUT_NS / 1_000_000));
            }
            self.recycle()?;
        }
        Ok(())
    }

    /// An idle command encoder, or a new one.
    fn take_encoder(&mut self) -> Result<wgpu_hal::vulkan::CommandEncoder> {
        if let Some(e) = self.idle.pop() {
            return Ok(e);
        }
        let desc = wgpu_hal::CommandEncoderDescriptor {
            label: Some("crossgpu stream"),
            queue: &self.device.shared.hal_queue,
        };
        // SAFETY: the queue belongs to this device; all its queues share family 0.
        unsafe { self.device.shared.hal.create_command_encoder(&desc) }
            .map_err(map_hal_device("vkCreateCommandPool"))
    }

    fn open(&mut self) -> Result<&mut Active> {
        self.check_lost()?;
        if self.active.is_none() {
            self.make_room()?;
            let mut encoder = self.take_encoder()?;
            // SAFETY: the encoder is idle (new or recycled after its work completed).
            unsafe { encoder.begin_encoding(Some("crossgpu stream")) }
                .map_err(map_hal_device("vkBeginCommandBuffer"))?;
            let mut keep: Vec<KeepAlive> = Vec::new();
            if let Some(p) = self.profile.as_mut().filter(|p| p.used == 0) {
                // A new profile window: reset the pool and stamp its start.
                // SAFETY: the command buffer is recording, outside any pass; the pool is of
                // this device and kept alive with the command buffer.
                unsafe {
                    let cb = encoder.raw_handle();
                    let raw = self.device.raw();
                    raw.cmd_reset_query_pool(cb, p.pool.raw, 0, p.pool.capacity);
                    raw.cmd_write_timestamp(cb, vk::PipelineStageFlags::BOTTOM_OF_PIPE, p.pool.raw, 0);
                }
                p.used = 1;
                keep.push(p.pool.clone());
            }
            self.active = Some(Active { encoder, keep, uses: Vec::new() });
        }
        Ok(self.active.as_mut().expect("opened above"))
    }

    /// While profiling, stamps the end of the command just recorded (named `name`) into the
    /// open command buffer.
    fn stamp(&mut self, name: impl FnOnce() -> Arc<str>) {
        if self.capture.is_some() {
            // A recording runs many times; a profile window covers one.
            return;
        }
        let (Some(p), Some(a)) = (self.profile.as_mut(), self.active.as_mut()) else { return };
        if p.used == 0 || p.used >= p.pool.capacity {
            // The window began before this command buffer (not profiled), or is full.
            return;
        }
        // SAFETY: the command buffer is recording, outside any pass; the query was reset at the
        // window's start and is written once; the pool is kept alive with the command buffer.
        unsafe {
            self.device.raw().cmd_write_timestamp(
                a.encoder.raw_handle(),
                vk::PipelineStageFlags::BOTTOM_OF_PIPE,
                p.pool.raw,
                p.used,
            )
        };
        p.used += 1;
        p.names.push(name());
        a.keep.push(p.pool.clone());
    }

    /// The command buffer commands go to: the recording in progress, or the open one.
    fn target(&mut self) -> Result<vk::CommandBuffer> {
        if let Some(c) = &self.capture {
            return Ok(c.cmd);
        }
        // SAFETY: the handle is only used while the encoder records (until `close`).
        Ok(unsafe { self.open()?.encoder.raw_handle() })
    }

    /// Notes that the command just recorded copies to or from `b`, if the host maps it (a
    /// staging buffer): the host may not touch it until the submission that runs it completed.
    fn note_use(&mut self, b: &dyn GpuBuffer) {
        let Some(u) = b.gpu_use() else { return };
        let uses = match (self.capture.as_mut(), self.active.as_mut()) {
            (Some(c), _) => &mut c.uses,
            (None, Some(a)) => &mut a.uses,
            (None, None) => return,
        };
        if !uses.iter().any(|x| Arc::ptr_eq(x, &u)) {
            uses.push(u);
        }
    }

    /// Keeps `k` alive as long as the command buffer commands go to now.
    fn keep(&mut self, k: KeepAlive) {
        if let Some(c) = self.capture.as_mut() {
            c.keep.push(k);
        } else if let Some(a) = self.active.as_mut() {
            a.keep.push(k);
        }
    }

    /// Counts a command (a dispatch if `dispatch`) recorded where commands go now.
    fn count(&mut self, dispatch: bool) {
        if let Some(c) = self.capture.as_mut() {
            c.commands += 1;
            c.dispatches += dispatch as u64;
        } else {
            self.commands += 1;
            self.dispatches += dispatch as u64;
        }
    }

    /// Starts a recording: every command from now until [`Recorder::end_capture`] goes into a
    /// command buffer of its own, which runs only when a submit names it
    /// ([`SubmitInfo::replay`]), as many times as it is named. Nothing recorded before stays
    /// in the open command buffer.
    pub fn begin_capture(&mut self) -> Result<()> {
        if self.capture.is_some() {
            return Err(NativeError::Unsupported("begin_capture while a recording is in progress".into()));
        }
        self.check_lost()?;
        let d = self.device.raw();
        let info = vk::CommandPoolCreateInfo::default().queue_family_index(0);
        // SAFETY: a new pool of this device, for family 0 (every queue of a Device).
        let pool = unsafe { d.create_command_pool(&info, None) }.map_err(map_vk("vkCreateCommandPool"))?;
        let alloc = vk::CommandBufferAllocateInfo::default()
            .command_pool(pool)
            .level(vk::CommandBufferLevel::PRIMARY)
            .command_buffer_count(1);
        let begin =
            vk::CommandBufferBeginInfo::default().flags(vk::CommandBufferUsageFlags::SIMULTANEOUS_USE);
        // SAFETY: the buffer is allocated from the new pool and begun once; on failure the
        // pool (and the buffer with it) is destroyed unused.
        let cmd = unsafe {
            d.allocate_command_buffers(&alloc)
                .and_then(|c| d.begin_command_buffer(c[0], &begin).map(|()| c[0]))
        };
        match cmd {
            Ok(cmd) => {
                crate::live::inc(&crate::live::RECORDINGS);
                self.capture = Some(Capture {
                    pool,
                    cmd,
                    keep: Vec::new(),
                    uses: Vec::new(),
                    dispatches: 0,
                    commands: 0,
                });
                Ok(())
            }
            Err(e) => {
                // SAFETY: nothing of the pool is in use.
                unsafe { d.destroy_command_pool(pool, None) };
                Err(map_vk("vkAllocateCommandBuffers/vkBeginCommandBuffer")(e))
            }
        }
    }

    /// Ends the recording begun by [`Recorder::begin_capture`].
    pub fn end_capture(&mut self) -> Result<Replay> {
        let Some(c) = self.capture.take() else {
            return Err(NativeError::Unsupported("end_capture without begin_capture".into()));
        };
        let inner = ReplayInner {
            device: self.device.clone(),
            queue_index: self.queue_index,
            pool: c.pool,
            cmd: c.cmd,
            dispatches: c.dispatches,
            commands: c.commands,
            uses: c.uses,
            _keep: c.keep,
        };
        // SAFETY: the buffer is recording (begun in begin_capture); if ending fails, dropping
        // `inner` destroys the pool, and nothing was submitted.
        unsafe { self.device.raw().end_command_buffer(inner.cmd) }.map_err(map_vk("vkEndCommandBuffer"))?;
        Ok(Replay(Arc::new(inner)))
    }

    /// Drops a recording in progress (after an error while recording it), if any.
    pub fn cancel_capture(&mut self) {
        if let Some(c) = self.capture.take() {
            crate::live::dec(&crate::live::RECORDINGS);
            // SAFETY: never submitted; destroying the pool frees the recording buffer.
            unsafe { self.device.raw().destroy_command_pool(c.pool, None) };
        }
    }

    /// Whether a recording is in progress.
    pub fn capturing(&self) -> bool {
        self.capture.is_some()
    }

    /// Starts profiling: from the next command buffer on, a timestamp after every dispatch and
    /// copy, up to `capacity` stamps per window (commands past that are not profiled). Only
    /// between command buffers (nothing recorded and not submitted), so a window starts with
    /// a command buffer.
    pub fn start_profile(&mut self, capacity: u32) -> Result<()> {
        if self.active.is_some() {
            return Err(NativeError::Unsupported(
                "start_profile with commands recorded: submit them first".into(),
            ));
        }
        self.profile = Some(Profile::new(&self.device, capacity)?);
        Ok(())
    }

    /// The GPU time (ns) each command of the window added, in recording order, with its name
    /// (the kernel's entry point, or "copy"); then a new window starts. Call it once the
    /// window's submits completed and nothing is recorded since; empty when not profiling.
    pub fn take_profile(&mut self) -> Result<Vec<(Arc<str>, f64)>> {
        if self.active.is_some() || self.progress.value()? < self.submitted {
            return Err(NativeError::Unsupported(
                "take_profile before the profiled work was submitted and completed".into(),
            ));
        }
        self.profile.as_mut().map_or(Ok(Vec::new()), Profile::take)
    }

    /// Records a dispatch of `group`'s kernel with `immediates` (as many words as the kernel's
    /// layout declares) over `workgroups`.
    pub fn dispatch(&mut self, group: &BindGroup, immediates: &[u32], workgroups: [u32; 3]) -> Result<()> {
        let k = group.kernel().clone();
        if k.device_id() != self.device.id() {
            return Err(NativeError::Unsupported(format!("kernel {} is of another device", k.name())));
        }
        if immediates.len() * 4 != k.immediate_bytes() as usize {
            return Err(NativeError::Unsupported(format!(
                "kernel {} takes {} bytes of immediates, {} given",
                k.name(),
                k.immediate_bytes(),
                immediates.len() * 4
            )));
        }
        if workgroups.contains(&0) {
            return Ok(());
        }
        let max = self.device.info().caps.max_compute_work_group_count;
        if let Some(axis) = (0..3).find(|&a| workgroups[a] > max[a]) {
            return Err(NativeError::Unsupported(format!(
                "kernel {}: {workgroups:?} workgroups, but the device dispatches at most {} along {} (maxComputeWorkGroupCount {max:?})",
                k.name(),
                max[axis],
                ["x", "y", "z"][axis]
            )));
        }
        let cb = self.target()?;
        let d = self.device.raw();
        // SAFETY: the command buffer is recording, outside any pass; pipeline, layout and
        // descriptor set are of this device and kept alive with the command buffer (below); the
        // immediates match the layout's size (checked above).
        unsafe {
            d.cmd_bind_pipeline(cb, vk::PipelineBindPoint::COMPUTE, k.raw_pipeline());
            d.cmd_bind_descriptor_sets(
                cb,
                vk::PipelineBindPoint::COMPUTE,
                k.raw_layout(),
                0,
                &[group.raw_set()],
                &[],
            );
            if !immediates.is_empty() {
                let bytes =
                    std::slice::from_raw_parts(immediates.as_ptr().cast::<u8>(), immediates.len() * 4);
                d.cmd_push_constants(cb, k.raw_layout(), vk::ShaderStageFlags::COMPUTE, 0, bytes);
            }
            d.cmd_dispatch(cb, workgroups[0], workgroups[1], workgroups[2]);
        }
        self.keep(group.keep_alive());
        self.count(true);
        self.stamp(|| Arc::from(k.name()));
        Ok(())
    }

    /// Dispatches recorded by this recorder so far.
    pub fn dispatch_count(&self) -> u64 {
        self.dispatches
    }

    /// Records a copy of `size` bytes (a multiple of 4) between two buffers of this device.
    pub fn copy(
        &mut self,
        src: &dyn GpuBuffer,
        src_offset: u64,
        dst: &dyn GpuBuffer,
        dst_offset: u64,
        size: u64,
    ) -> Result<()> {
        let dev = self.device.id();
        if src.device_id() != dev || dst.device_id() != dev {
            return Err(NativeError::Unsupported("copy between buffers of another device".into()));
        }
        let in_range = |off: u64, b: &dyn GpuBuffer| off.checked_add(size).is_some_and(|e| e <= b.size());
        if !size.is_multiple_of(4)
            || !src_offset.is_multiple_of(4)
            || !dst_offset.is_multiple_of(4)
            || !in_range(src_offset, src)
            || !in_range(dst_offset, dst)
        {
            return Err(NativeError::Unsupported(format!(
                "copy of {size} bytes at {src_offset}->{dst_offset} is unaligned or out of range"
            )));
        }
        let Some(size) = NonZeroU64::new(size) else {
            return Ok(());
        };
        let cb = self.target()?;
        let region = vk::BufferCopy { src_offset, dst_offset, size: size.get() };
        // SAFETY: recording, outside any pass; both buffers are of this device, alive (kept
        // below), and the ranges are checked.
        unsafe {
            self.device.raw().cmd_copy_buffer(cb, src.hal().raw_handle(), dst.hal().raw_handle(), &[region])
        };
        self.keep(src.keep_alive());
        self.keep(dst.keep_alive());
        self.note_use(src);
        self.note_use(dst);
        self.count(false);
        self.stamp(|| Arc::from("copy"));
        Ok(())
    }

    /// Records `vkCmdFillBuffer` of `size` bytes (a multiple of 4) at `offset` with `value`.
    pub fn fill_u32(&mut self, dst: &dyn GpuBuffer, offset: u64, size: u64, value: u32) -> Result<()> {
        if dst.device_id() != self.device.id()
            || !size.is_multiple_of(4)
            || !offset.is_multiple_of(4)
            || offset.checked_add(size).is_none_or(|end| end > dst.size())
        {
            return Err(NativeError::Unsupported("fill out of range or of another device".into()));
        }
        if size == 0 {
            return Ok(());
        }
        let cb = self.target()?;
        // SAFETY: recording state; the buffer is of this device, alive (kept), range checked.
        unsafe { self.device.raw().cmd_fill_buffer(cb, dst.hal().raw_handle(), offset, size, value) };
        self.keep(dst.keep_alive());
        self.note_use(dst);
        self.count(false);
        Ok(())
    }

    /// Records a global memory barrier: accesses `src` before it happen-before and are visible
    /// to accesses `dst` after it.
    pub fn barrier(&mut self, src: Access, dst: Access) -> Result<()> {
        let (src_stage, src_access) = crate::conv::access_to_vk(src);
        let (dst_stage, dst_access) = crate::conv::access_to_vk(dst);
        let src_stage = if src_stage.is_empty() { vk::PipelineStageFlags::TOP_OF_PIPE } else { src_stage };
        let dst_stage = if dst_stage.is_empty() { vk::PipelineStageFlags::BOTTOM_OF_PIPE } else { dst_stage };
        let cb = self.target()?;
        let mb = [vk::MemoryBarrier::default().src_access_mask(src_access).dst_access_mask(dst_access)];
        // SAFETY: recording state; a plain memory barrier outside any render pass.
        unsafe {
            self.device.raw().cmd_pipeline_barrier(
                cb,
                src_stage,
                dst_stage,
                vk::DependencyFlags::empty(),
                &mb,
                &[],
                &[],
            )
        };
        Ok(())
    }

    /// Closes the open command buffer (if any) and submits it on this recorder's queue with the
    /// given waits and signals; returns the value `progress` will reach when it completes.
    /// With nothing recorded, submits no command buffer (waits and signals still happen).
    pub fn submit(&mut self, info: &SubmitInfo<'_>) -> Result<u64> {
        Ok(Self::submit_together(&mut [self], std::slice::from_ref(info))?[0])
    }

    /// Submits the open command buffers of several recorders of one queue as **one batch** (one
    /// `VkSubmitInfo`): the command buffers run in the order given, after every wait of every
    /// info, and every signal (each recorder's `progress` included) happens when the whole batch
    /// has completed. Returns each recorder's new `progress` value.
    ///
    /// Why: each batch costs the GPU a fixed ~12 µs on the H200 (measured: a 32 KiB kernel step
    /// took 15.4 µs as a submit of its own and 3.7 µs inside one submit), so members that share
    /// a queue and submit at the same point pay it once instead of once each.
    pub fn submit_together(recs: &mut [&mut Recorder], infos: &[SubmitInfo<'_>]) -> Result<Vec<u64>> {
        let Some(first) = recs.first() else { return Ok(Vec::new()) };
        let (device_id, queue_index) = (first.device.id(), first.queue_index);
        if infos.len() != recs.len() {
            return Err(NativeError::Unsupported(format!(
                "submit_together: {} recorders but {} submit infos",
                recs.len(),
                infos.len()
            )));
        }
        if let Some(r) = recs.iter().find(|r| r.device.id() != device_id || r.queue_index != queue_index) {
            return Err(NativeError::Unsupported(format!(
                "submit_together: recorders of one queue only (queue {} of device {:?} and queue {} of device {:?})",
                queue_index,
                device_id,
                r.queue_index,
                r.device.id()
            )));
        }
        for (r, info) in recs.iter_mut().zip(infos) {
            r.check_lost()?;
            if info.replay.is_some() && r.active.is_none() {
                // A replay opens no command buffer (where the back-pressure usually happens).
                r.make_room()?;
            }
            if r.capture.is_some() {
                return Err(NativeError::Unsupported("submit while a recording is in progress".into()));
            }
            if let Some(p) = info.replay {
                if p.0.device.id() != r.device.id() || p.0.queue_index != r.queue_index {
                    return Err(NativeError::Unsupported("a recording submitted on another queue".into()));
                }
            }
        }
        // Close every open command buffer first; a failure here leaves nothing submitted.
        let mut closed = Vec::with_capacity(recs.len());
        for r in recs.iter_mut() {
            match r.close() {
                Ok(c) => closed.push(c),
                Err(e) => {
                    for (r, c) in recs.iter_mut().zip(closed) {
                        r.discard(c);
                    }
                    return Err(e);
                }
            }
        }
        // Binary semaphores to note as used once the submit succeeded: (recorder, semaphore,
        // whether it is signalled).
        let mut binary_uses: Vec<(usize, &SyncFdSemaphore, bool)> = Vec::new();
        let mut cmds: Vec<vk::CommandBuffer> = Vec::new();
        let mut wait_sems = Vec::new();
        let mut wait_vals = Vec::new();
        let mut wait_stages = Vec::new();
        let mut sig_sems = Vec::new();
        let mut sig_vals = Vec::new();
        for (k, ((r, c), info)) in recs.iter().zip(closed.iter_mut()).zip(infos).enumerate() {
            cmds.extend(c.raw);
            if let Some(p) = info.replay {
                cmds.push(p.0.cmd);
                c.keep.push(p.0.clone());
            }
            binary_uses.extend(info.wait_binary.iter().map(|s| (k, *s, false)));
            binary_uses.extend(info.signal_binary.iter().map(|s| (k, *s, true)));
            for (s, v) in info.wait_timeline {
                wait_sems.push(s.raw());
                wait_vals.push(*v);
                wait_stages.push(vk::PipelineStageFlags::ALL_COMMANDS);
                c.keep.push(s.keep_alive());
            }
            for s in info.wait_binary {
                wait_sems.push(s.raw());
                wait_vals.push(0);
                wait_stages.push(vk::PipelineStageFlags::ALL_COMMANDS);
                c.keep.push(s.keep_alive());
            }
            sig_sems.push(r.progress.raw());
            sig_vals.push(r.submitted + 1);
            r.progress.mark_gpu_signalled();
            for (s, v) in info.signal_timeline {
                s.mark_gpu_signalled();
                sig_sems.push(s.raw());
                sig_vals.push(*v);
                c.keep.push(s.keep_alive());
            }
            for s in info.signal_binary {
                sig_sems.push(s.raw());
                sig_vals.push(0);
                c.keep.push(s.keep_alive());
            }
        }
        let mut timeline = vk::TimelineSemaphoreSubmitInfo::default()
            .wait_semaphore_values(&wait_vals)
            .signal_semaphore_values(&sig_vals);
        let submit = vk::SubmitInfo::default()
            .wait_semaphores(&wait_sems)
            .wait_dst_stage_mask(&wait_stages)
            .command_buffers(&cmds)
            .signal_semaphores(&sig_sems)
            .push_next(&mut timeline);
        // Note the binary semaphores' use before the submit (the value each recorder's
        // progress reaches when it completes), so an import on another thread that sees no
        // pending use cannot race it; undone if the submit fails.
        let noted: Vec<_> = binary_uses
            .iter()
            .map(|&(k, s, signal)| s.note_submitted(&recs[k].progress, recs[k].submitted + 1, signal))
            .collect();
        let device = recs[0].device.clone();
        let t = Instant::now();
        let result = {
            let queue = device.shared.queues[queue_index as usize].lock().unwrap_or_else(|p| p.into_inner());
            // SAFETY: the queue is locked (external synchronisation); every command buffer is
            // executable and of this device; every semaphore is alive and kept until completion.
            unsafe { device.raw().queue_submit(*queue, &[submit], vk::Fence::null()) }
        };
        recs[0].queue_submit_time += t.elapsed();
        recs[0].queue_submits += 1;
        if let Err(e) = result {
            for ((_, s, _), before) in binary_uses.iter().zip(noted) {
                s.restore(before);
            }
            let e = device.note(map_vk("vkQueueSubmit")(e));
            for (r, c) in recs.iter_mut().zip(closed) {
                r.discard(c);
            }
            return Err(e);
        }
        for (r, info) in recs.iter_mut().zip(infos) {
            if let Some(p) = info.replay {
                r.dispatches += p.0.dispatches;
                p.0.uses.iter().for_each(|u| u.note(&r.progress, r.submitted + 1));
            }
        }
        Ok(recs.iter_mut().zip(closed).map(|(r, c)| r.commit(c)).collect())
    }

    /// Ends the open command buffer (if any) for a submit.
    fn close(&mut self) -> Result<Closed> {
        self.commands = 0;
        let Some(mut a) = self.active.take() else {
            return Ok(Closed { encoder: None, cmd: None, raw: None, keep: Vec::new(), uses: Vec::new() });
        };
        // SAFETY: the encoder is recording; the handle stays valid until its pool is reset.
        let raw = unsafe { a.encoder.raw_handle() };
        // SAFETY: the encoder is recording.
        match unsafe { a.encoder.end_encoding() } {
            Ok(cmd) => Ok(Closed {
                encoder: Some(a.encoder),
                cmd: Some(cmd),
                raw: Some(raw),
                keep: a.keep,
                uses: a.uses,
            }),
            Err(e) => {
                // SAFETY: recording failed; nothing of this encoder is pending.
                unsafe { a.encoder.discard_encoding() };
                self.idle.push(a.encoder);
                Err(map_hal_device("vkEndCommandBuffer")(e))
            }
        }
    }

    /// Returns a closed command buffer that was never submitted to the idle encoders.
    fn discard(&mut self, c: Closed) {
        if let (Some(mut enc), Some(cmd)) = (c.encoder, c.cmd) {
            // SAFETY: the command buffer was not submitted, so it is not pending.
            unsafe { enc.reset_all(std::iter::once(cmd)) };
            self.idle.push(enc);
        }
    }

    /// Records a submitted command buffer as pending; returns its `progress` value.
    fn commit(&mut self, c: Closed) -> u64 {
        self.submitted += 1;
        let value = self.submitted;
        c.uses.iter().for_each(|u| u.note(&self.progress, value));
        self.pending.push_back(Pending { encoder: c.encoder, cmd: c.cmd, value, _keep: c.keep });
        value
    }

    /// Waits until the submit with `value` completed, up to `timeout_ns`; `Ok(false)` on timeout.
    pub fn wait(&mut self, value: u64, timeout_ns: u64) -> Result<bool> {
        let done = self.progress.wait(value, timeout_ns)?;
        if done {
            self.recycle()?;
        }
        Ok(done)
    }

    /// Value `progress` has reached.
    pub fn completed(&self) -> Result<u64> {
        self.progress.value()
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        crate::live::dec(&crate::live::RECORDERS);
        // Wait for pending work so command buffers are not freed while the GPU runs them. A lost
        // device completes nothing, and its submissions are then treated as finished.
        if !self.device.is_lost() && self.submitted > 0 {
            loop {
                match self.progress.wait(self.submitted, 1_000_000_000) {
                    Ok(true) => break,
                    Ok(false) => log::warn!(
                        "waiting for queue {} to finish before dropping its stream",
                        self.queue_index
                    ),
                    Err(e) => {
                        log::error!("stream drop: {e}; waiting for the device to go idle");
                        let _ = self.device.wait_idle_queues();
                        break;
                    }
                }
            }
        } else if self.device.is_lost() {
            let _ = self.device.wait_idle_queues();
        }
        self.cancel_capture();
        if let Some(mut a) = self.active.take() {
            // SAFETY: recording, never submitted; dropping the encoder destroys its pool.
            unsafe { a.encoder.discard_encoding() };
        }
        for mut p in self.pending.drain(..) {
            if let Some(mut encoder) = p.encoder.take() {
                // SAFETY: the work completed (waited above) or the device is idle.
                unsafe { encoder.reset_all(p.cmd.take().into_iter()) };
            }
        }
        // Idle encoders hold no pending command buffer; dropping them destroys their pools.
        self.idle.clear();
    }
}
