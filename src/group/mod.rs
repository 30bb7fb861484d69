//! Device groups: N members, each a queue of a VkDevice with its own stream, opened from an
//! adapter list. A member is what the rest of crossgpu calls a "device": it owns its tensors,
//! its stream and its bind groups; members that share a VkDevice (queue stand-ins) share only
//! the pipelines.

mod binds;
mod selection;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use vk_native::{
    AdapterInfo, BindGroup, BindRange, Buffer, BufferId, BufferUsage, Device, GpuBuffer, Recorder, Replay,
    StagingBuffer, SyncFdSemaphore, TimelineSemaphore,
};

pub use selection::{AdapterSelector, DeviceSpec, GroupSpec};

use crate::config;
use crate::error::{Error, Result};
use crate::instance::Instance;
use crate::kernels::{Entry, ImmediateWords, Kernel, Pipelines};
use crate::stream::Stream;

static NEXT_GROUP: AtomicU64 = AtomicU64::new(1);

/// Options of a group, explicit (`DeviceGroup::open_with`, `open_devices`) or from the
/// environment ([`GroupOptions::from_env`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupOptions {
    /// Bound on every wait for a member's device, in ms (`CROSSGPU_TIMEOUT_MS`, 1 ms to one
    /// day).
    pub timeout_ms: u64,
    /// Submits a member's stream keeps in flight before recording waits for the oldest
    /// (`CROSSGPU_MAX_IN_FLIGHT`, 1 to 65536); each holds a command pool.
    pub max_in_flight: usize,
}

impl Default for GroupOptions {
    fn default() -> Self {
        Self { timeout_ms: config::TIMEOUT_MS.0, max_in_flight: config::MAX_IN_FLIGHT.0 as usize }
    }
}

impl GroupOptions {
    /// `CROSSGPU_TIMEOUT_MS` and `CROSSGPU_MAX_IN_FLIGHT`, the defaults where unset; a value
    /// crossgpu cannot use is an error naming the variable.
    pub fn from_env() -> Result<Self> {
        Ok(Self {
            timeout_ms: config::timeout_ms_from_env()?,
            max_in_flight: config::max_in_flight_from_env()?,
        })
    }

    /// Refuses values outside the ranges the variables allow.
    fn validate(&self) -> Result<()> {
        let check = |what: &str, v: u64, range: std::ops::RangeInclusive<u64>| {
            if range.contains(&v) {
                Ok(())
            } else {
                Err(Error::InvalidArgument(format!(
                    "GroupOptions::{what} {v}: must be between {} and {}",
                    range.start(),
                    range.end()
                )))
            }
        };
        check("timeout_ms", self.timeout_ms, config::TIMEOUT_MS.1)?;
        check("max_in_flight", self.max_in_flight as u64, config::MAX_IN_FLIGHT.1)
    }
}

/// Identity of a group, unique in the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GroupId(pub u64);

pub(crate) struct MemberShared {
    pub(crate) index: usize,
    pub(crate) group: GroupId,
    pub(crate) device: Device,
    pub(crate) queue_index: u32,
    pub(crate) label: String,
    pub(crate) pipelines: Arc<Pipelines>,
    pub(crate) stream: Mutex<Stream>,
    pub(crate) binds: Mutex<binds::BindCache>,
    pub(crate) timeout_ms: u64,
    /// The hooks of the communicators over this member ([`StreamHook`]), held weakly: a
    /// dropped communicator's hook is gone with it, and each communicator has its own.
    hooks: Mutex<Vec<Weak<dyn StreamHook>>>,
    /// A u32 counter that stays 0: the position counter the decoder kernels bind when called
    /// with an explicit position (`ops::Position::fixed`). Made at first use.
    zero_position: std::sync::OnceLock<Buffer>,
}

/// What a communicator's transport asks of the streams of its members: to hear of every
/// submit (DevicePoll: a member's submitted wait needs its peers' phase A submitted too, or it
/// waits for work still on the host) and of every successful wait (a DevicePoll wait that ran
/// out shows only in its results). The transport owns the hook and registers it with each
/// member ([`MemberShared::add_hook`]); the stream knows nothing of what it does.
pub(crate) trait StreamHook: Send + Sync {
    /// Member `index` submitted its open command buffer. Called with no stream lock held, so
    /// the hook may flush other members.
    fn submitted(&self, index: usize) -> Result<()>;
    /// A wait for member `index`'s work succeeded.
    fn waited(&self, index: usize) -> Result<()>;
}

impl MemberShared {
    pub(crate) fn err(&self, e: vk_native::NativeError) -> Error {
        Error::native(&self.label, e)
    }

    pub(crate) fn stream(&self) -> MutexGuard<'_, Stream> {
        self.stream.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The member's counter that stays 0 (see `zero_position`), zeroed in the stream before
    /// the command that first binds it.
    pub(crate) fn zero_position(&self) -> Result<&Buffer> {
        if let Some(b) = self.zero_position.get() {
            return Ok(b);
        }
        let usage = BufferUsage { copy_src: false, copy_dst: true };
        let mut stream = self.stream();
        if stream.rec.capturing() {
            // Its zeroing would go into the recording, and a cancelled recording never zeroes.
            return Err(Error::InvalidArgument(
                "an operation at a fixed position inside a recording (record one outside first)".into(),
            ));
        }
        let b = Buffer::new(&self.device, 16, usage, "crossgpu zero position").map_err(|e| self.err(e))?;
        {
            stream.rec.fill_u32(&b, 0, 16, 0).map_err(|e| self.err(e))?;
            stream.note_write(b.id());
        }
        drop(stream);
        // Another thread may have made one first: its fill is recorded too, and harmless.
        let _ = self.zero_position.set(b);
        Ok(self.zero_position.get().expect("set above"))
    }

    /// The bind group of `kernel` over buffer ranges, made once and cached.
    fn bind_ranges(&self, kernel: &Kernel, ranges: &[BindRange<'_>]) -> Result<BindGroup> {
        let key = binds::BindKey::new(kernel.id().0, ranges);
        let mut binds = self.binds.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(g) = key.as_ref().and_then(|k| binds.get(k)) {
            return Ok(g.clone());
        }
        let pipeline = self.pipelines.get(kernel).map_err(|e| self.err(e))?;
        let g = pipeline.bind_ranges(ranges).map_err(|e| self.err(e))?;
        if let Some(k) = key {
            binds.insert(k, g.clone());
        }
        Ok(g)
    }

    /// Drops every cached bind group that holds `id`, so the buffer can be freed.
    pub(crate) fn forget_buffer(&self, id: BufferId) {
        self.binds.lock().unwrap_or_else(|p| p.into_inner()).retain(|k, _| !k.holds(id));
    }

    /// Records a dispatch of `kernel` over buffer ranges with the immediates' `words`: the one
    /// path of every kernel, the library's and a user's. Hazards are tracked from the kernel's
    /// own interface (a binding it never writes is read, any other written); `after` lists
    /// buffers it does not bind but must follow writes to (a DevicePoll wait's flags).
    pub(crate) fn dispatch_kernel(
        &self,
        kernel: &Kernel,
        ranges: &[BindRange<'_>],
        after: &[BufferId],
        words: &[u32],
        groups: [u32; 3],
    ) -> Result<()> {
        let g = self.bind_ranges(kernel, ranges)?;
        let mut s = self.stream();
        s.access_bound(g.buffer_ids(), kernel.reads_only(), after).map_err(|e| self.err(e))?;
        s.rec.dispatch(&g, words, groups).map_err(|e| self.err(e))
    }

    /// Records a dispatch of the library's kernel `entry` over whole buffers
    /// ([`MemberShared::dispatch_kernel`]).
    pub(crate) fn dispatch<P: ImmediateWords>(
        &self,
        entry: Entry<P>,
        buffers: &[&dyn GpuBuffer],
        after: &[BufferId],
        immediates: &P,
        groups: [u32; 3],
    ) -> Result<()> {
        let ranges: Vec<BindRange<'_>> = buffers.iter().map(|b| BindRange::whole(*b)).collect();
        self.dispatch_ranges(entry, &ranges, after, immediates, groups)
    }

    /// [`MemberShared::dispatch`] over buffer ranges.
    pub(crate) fn dispatch_ranges<P: ImmediateWords>(
        &self,
        entry: Entry<P>,
        ranges: &[BindRange<'_>],
        after: &[BufferId],
        immediates: &P,
        groups: [u32; 3],
    ) -> Result<()> {
        let kernel = entry.kernel()?;
        self.dispatch_kernel(kernel, ranges, after, immediates.words().as_ref(), groups)
    }

    /// Records a copy of `bytes` from `src` at `src_offset` to `dst` at `dst_offset`, after a
    /// barrier if it conflicts with earlier commands.
    pub(crate) fn record_copy(
        &self,
        src: &dyn GpuBuffer,
        src_offset: u64,
        dst: &dyn GpuBuffer,
        dst_offset: u64,
        bytes: u64,
    ) -> Result<()> {
        let mut s = self.stream();
        s.access(&[src.id()], &[dst.id()]).map_err(|e| self.err(e))?;
        s.rec.copy(src, src_offset, dst, dst_offset, bytes).map_err(|e| self.err(e))
    }

    /// Records a barrier making every device write so far visible to the host.
    pub(crate) fn barrier_to_host(&self) -> Result<()> {
        self.stream().barrier_to_host().map_err(|e| self.err(e))
    }

    /// Records a barrier making host writes (seen after the next submit's waits) visible to the
    /// device's reads.
    pub(crate) fn barrier_from_host(&self) -> Result<()> {
        self.stream().barrier_from_host().map_err(|e| self.err(e))
    }

    /// Makes the next submit of this member's stream wait for `sem` to reach `value`.
    pub(crate) fn wait_next_submit(&self, sem: &TimelineSemaphore, value: u64) {
        self.stream().wait_next_submit(sem, value)
    }

    /// Makes the next submit of this member's stream wait on a binary semaphore.
    pub(crate) fn wait_next_submit_binary(&self, sem: &SyncFdSemaphore) {
        self.stream().wait_next_submit_binary(sem)
    }

    /// The stream's completed submit value and the value its next submit will get.
    pub(crate) fn progress(&self) -> Result<(u64, u64)> {
        let s = self.stream();
        Ok((s.rec.completed().map_err(|e| self.err(e))?, s.rec.submitted() + 1))
    }

    /// Copies `bytes` of `src` into the host-visible `down`, makes them visible to the host and
    /// submits; returns the stream value to wait for before reading `down`.
    pub(crate) fn read_back(&self, src: &dyn GpuBuffer, down: &StagingBuffer, bytes: u64) -> Result<u64> {
        let mut s = self.stream();
        s.access(&[src.id()], &[down.id()]).map_err(|e| self.err(e))?;
        s.rec.copy(src, 0, down, 0, bytes).map_err(|e| self.err(e))?;
        s.barrier_to_host().map_err(|e| self.err(e))?;
        let v = s.flush().map_err(|e| self.err(e))?;
        drop(s);
        self.submitted()?;
        Ok(v)
    }

    /// Submits the open command buffer (and whatever the communicators' hooks submit with it);
    /// returns this stream's value to wait for.
    pub(crate) fn flush(&self) -> Result<u64> {
        let v = self.stream().flush().map_err(|e| self.err(e))?;
        self.submitted()?;
        Ok(v)
    }

    /// Registers `hook` for this member's submits and waits (until the hook is dropped or
    /// removed).
    pub(crate) fn add_hook(&self, hook: &Arc<dyn StreamHook>) {
        let mut hooks = self.hooks.lock().unwrap_or_else(|p| p.into_inner());
        hooks.retain(|h| h.strong_count() > 0);
        hooks.push(Arc::downgrade(hook));
    }

    /// Removes `hook` (registered with [`MemberShared::add_hook`]); the others stay.
    pub(crate) fn remove_hook(&self, hook: &Arc<dyn StreamHook>) {
        let mine = Arc::downgrade(hook);
        self.hooks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|h| !Weak::ptr_eq(h, &mine) && h.strong_count() > 0);
    }

    /// The live hooks, copied out: a hook that flushes a peer, which calls this member's hooks
    /// again, must not find the list locked.
    fn live_hooks(&self) -> Vec<Arc<dyn StreamHook>> {
        self.hooks.lock().unwrap_or_else(|p| p.into_inner()).iter().filter_map(Weak::upgrade).collect()
    }

    /// Tells every hook this member submitted (after the stream's lock was released).
    fn submitted(&self) -> Result<()> {
        self.live_hooks().iter().try_for_each(|h| h.submitted(self.index))
    }

    /// Submits the open command buffer now, with the pending waits, signalling `signals` and
    /// `binary_signals`.
    pub(crate) fn submit(
        &self,
        signals: &[(&TimelineSemaphore, u64)],
        binary_signals: &[&SyncFdSemaphore],
    ) -> Result<u64> {
        let v = self.stream().submit(signals, binary_signals).map_err(|e| self.err(e))?;
        self.submitted()?;
        Ok(v)
    }

    /// Submits the open command buffer and waits for everything submitted so far.
    pub(crate) fn synchronize(&self) -> Result<()> {
        let v = self.flush()?;
        let mut s = self.stream();
        self.wait_value(&mut s, v, "the stream to finish")
    }

    pub(crate) fn wait_value(&self, s: &mut Stream, value: u64, what: &str) -> Result<()> {
        match s.rec.wait(value, self.timeout_ms.saturating_mul(1_000_000)) {
            Ok(true) => self.live_hooks().iter().try_for_each(|h| h.waited(self.index)),
            Ok(false) => {
                Err(Error::Timeout { what: format!("{what} on {}", self.label), ms: self.timeout_ms })
            }
            Err(e) => Err(self.err(e)),
        }
    }
}

/// What a member's stream has done since the member was opened ([`Member::stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemberStats {
    /// Submissions of recorded work (each may hold several command buffers).
    pub submits: u64,
    /// Compute dispatches recorded.
    pub dispatches: u64,
    /// `vkQueueSubmit` calls.
    pub queue_submits: u64,
    /// Host time spent in `vkQueueSubmit`.
    pub queue_submit_time: std::time::Duration,
    /// Host time spent waiting for the oldest submit because `CROSSGPU_MAX_IN_FLIGHT` submits
    /// were in flight.
    pub backpressure_wait: std::time::Duration,
}

/// One member of a group: a queue of a VkDevice, with its own stream. Cheap to clone.
///
/// Its methods: who it is ([`Member::index`], [`Member::label`], …), its stream
/// ([`Member::flush`], [`Member::synchronize`], [`Member::stats`], the profile), tensors
/// ([`Member::empty`], [`Member::upload`], …), the general operations ([`Member::fill`],
/// [`Member::add`], [`Member::matvec`], …) and, apart, the transformer's kernels
/// ([`Member::transformer`]).
#[derive(Clone)]
pub struct Member {
    pub(crate) shared: Arc<MemberShared>,
}

impl std::fmt::Debug for Member {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.shared.label)
    }
}

impl Member {
    /// Position in the group.
    pub fn index(&self) -> usize {
        self.shared.index
    }

    /// The index of the member's queue on its VkDevice (stand-ins share a device).
    pub(crate) fn queue_index(&self) -> u32 {
        self.shared.queue_index
    }

    /// The adapter this member runs on.
    pub fn adapter(&self) -> &AdapterInfo {
        self.shared.device.info()
    }

    /// A label such as `member 1: llvmpipe (VkDevice 2, queue 0)`.
    pub fn label(&self) -> &str {
        &self.shared.label
    }

    /// The group this member belongs to.
    pub fn group_id(&self) -> GroupId {
        self.shared.group
    }

    /// Submits the work recorded so far without waiting.
    pub fn flush(&self) -> Result<()> {
        self.shared.flush().map(|_| ())
    }

    /// Submits the work recorded so far and waits for all of it (bounded by
    /// `CROSSGPU_TIMEOUT_MS`).
    pub fn synchronize(&self) -> Result<()> {
        self.shared.synchronize()
    }

    /// Starts recording this member's work for replay instead of running it: everything
    /// recorded until [`Member::end_capture`] goes into a command buffer of its own (see
    /// `vk_native::Recorder::begin_capture`). Nothing may be submitted meanwhile.
    pub(crate) fn begin_capture(&self) -> Result<()> {
        self.shared.stream().begin_capture().map_err(|e| self.shared.err(e))
    }

    /// Ends the recording begun by [`Member::begin_capture`].
    pub(crate) fn end_capture(&self) -> Result<Replay> {
        self.shared.stream().end_capture().map_err(|e| self.shared.err(e))
    }

    /// Whether a recording for replay is in progress ([`Member::begin_capture`]).
    pub(crate) fn capturing(&self) -> bool {
        self.shared.stream().rec.capturing()
    }

    /// Drops a recording in progress, after an error while recording it.
    pub(crate) fn cancel_capture(&self) {
        self.shared.stream().cancel_capture();
    }

    /// Submits what is recorded, then `replay`, in one submission.
    pub(crate) fn submit_replay(&self, replay: &Replay) -> Result<()> {
        self.shared.stream().submit_replay(replay).map_err(|e| self.shared.err(e))?;
        self.shared.submitted()
    }

    /// The value of the latest submit, to wait for later with [`Member::wait_mark`].
    pub(crate) fn mark(&self) -> u64 {
        self.shared.stream().rec.submitted()
    }

    /// Waits until the submit that [`Member::mark`] returned `mark` for has finished.
    pub(crate) fn wait_mark(&self, mark: u64, what: &str) -> Result<()> {
        let mut s = self.shared.stream();
        self.shared.wait_value(&mut s, mark, what)
    }

    /// Test hook (feature `test-hooks`): every later submit on this member's VkDevice fails
    /// with [`crate::Error::DeviceLost`], as after a real VK_ERROR_DEVICE_LOST.
    #[cfg(feature = "test-hooks")]
    pub fn inject_device_lost(&self) {
        self.shared.device.inject_device_lost();
    }

    /// What this member's stream has done so far: submits, dispatches, host time in
    /// `vkQueueSubmit` and in back-pressure waits.
    pub fn stats(&self) -> MemberStats {
        let s = self.shared.stream();
        let (queue_submits, queue_submit_time) = s.rec.queue_submit_time();
        MemberStats {
            submits: s.submits,
            dispatches: s.rec.dispatch_count(),
            queue_submits,
            queue_submit_time,
            backpressure_wait: s.rec.backpressure_wait(),
        }
    }

    /// Starts a GPU profile of this member's work (timestamp queries): from its next command
    /// buffer on, the GPU time of each dispatch and copy, up to `capacity` per window. Call it
    /// after [`Member::synchronize`].
    pub fn start_profile(&self, capacity: u32) -> Result<()> {
        self.shared.stream().rec.start_profile(capacity).map_err(|e| self.shared.err(e))
    }

    /// The profile window's commands with the GPU time each added to the queue's timeline (ns),
    /// in recording order, named by kernel entry point (or "copy"); starts a new window. Call it
    /// after [`Member::synchronize`].
    pub fn take_profile(&self) -> Result<Vec<(std::sync::Arc<str>, f64)>> {
        self.shared.stream().rec.take_profile().map_err(|e| self.shared.err(e))
    }

    pub(crate) fn device(&self) -> &Device {
        &self.shared.device
    }
}

/// A set of members that compute together. Members are numbered in the order the spec lists
/// them.
pub struct DeviceGroup {
    id: GroupId,
    members: Vec<Member>,
    instance: Instance,
    spec: Vec<(usize, u32)>,
}

impl std::fmt::Debug for DeviceGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceGroup").field("members", &self.members).finish()
    }
}

impl DeviceGroup {
    /// Opens the group `CROSSGPU_DEVICES` names (every adapter when unset: [`GroupSpec::All`]).
    pub fn from_env(instance: &Instance) -> Result<Self> {
        Self::from_env_or(instance, &GroupSpec::All)
    }

    /// Opens the group `CROSSGPU_DEVICES` names, or `default` when it is unset (a model's
    /// commands pass [`GroupSpec::Gpus`]).
    pub fn from_env_or(instance: &Instance, default: &GroupSpec) -> Result<Self> {
        let spec = match config::devices_from_env() {
            Some(s) => GroupSpec::parse(&s)?,
            None => default.clone(),
        };
        Self::open_with(instance, &spec, &GroupOptions::from_env()?)
    }

    /// Whether two members are on one physical device (queue stand-ins or VkDevices of one
    /// adapter): they share its compute, so the group is a test of the all-reduce, not a
    /// speed-up.
    pub fn shares_a_device(&self) -> bool {
        self.members
            .iter()
            .enumerate()
            .any(|(i, m)| self.members[..i].iter().any(|p| p.adapter().index == m.adapter().index))
    }

    /// Opens the group `spec` describes, its options from the environment
    /// ([`GroupOptions::from_env`]).
    pub fn open(instance: &Instance, spec: &GroupSpec) -> Result<Self> {
        Self::open_with(instance, spec, &GroupOptions::from_env()?)
    }

    /// Opens the group `spec` describes with explicit options (no environment read).
    pub fn open_with(instance: &Instance, spec: &GroupSpec, options: &GroupOptions) -> Result<Self> {
        let resolved = spec.resolve(instance.adapters())?;
        Self::open_devices(instance, &resolved, &spec.shared_queues(), options)
    }

    /// Opens one VkDevice per `(adapter index, members)` pair, each member on its own queue,
    /// options from the environment.
    pub fn open_resolved(instance: &Instance, devices: &[(usize, u32)]) -> Result<Self> {
        Self::open_devices(instance, devices, &[], &GroupOptions::from_env()?)
    }

    /// Like [`DeviceGroup::open_resolved`]; where `shared_queue[i]` is true, the members of
    /// VkDevice i share one queue. Options from the environment.
    pub fn open_with_queues(
        instance: &Instance,
        devices: &[(usize, u32)],
        shared_queue: &[bool],
    ) -> Result<Self> {
        Self::open_devices(instance, devices, shared_queue, &GroupOptions::from_env()?)
    }

    /// One VkDevice per `(adapter index, members)` pair (members sharing a queue where
    /// `shared_queue[i]`), with `options`.
    pub fn open_devices(
        instance: &Instance,
        devices: &[(usize, u32)],
        shared_queue: &[bool],
        options: &GroupOptions,
    ) -> Result<Self> {
        options.validate()?;
        let GroupOptions { timeout_ms, max_in_flight } = *options;
        let id = GroupId(NEXT_GROUP.fetch_add(1, Ordering::Relaxed));
        let mut members = Vec::new();
        for (dev_no, &(adapter, queues)) in devices.iter().enumerate() {
            let info = instance.adapters().get(adapter).ok_or(Error::IndexOutOfRange {
                what: "adapter index",
                index: adapter,
                len: instance.adapters().len(),
                of: "Vulkan adapters (see `crossgpu devices`)",
            })?;
            let shared = shared_queue.get(dev_no).copied().unwrap_or(false);
            let device = Device::open(&instance.native, adapter, if shared { 1 } else { queues })
                .map_err(|e| Error::native(&info.name, e))?;
            let pipelines = Arc::new(Pipelines::new(device.clone()));
            for m in 0..queues {
                let index = members.len();
                let q = if shared { 0 } else { m };
                let label = if shared {
                    format!("member {index}: {} (VkDevice {dev_no}, shared queue 0)", info.name)
                } else {
                    format!("member {index}: {} (VkDevice {dev_no}, queue {q})", info.name)
                };
                let rec = Recorder::with_max_pending(&device, q, max_in_flight)
                    .map_err(|e| Error::native(&label, e))?;
                let stream = Stream::new(rec);
                members.push(Member {
                    shared: Arc::new(MemberShared {
                        index,
                        group: id,
                        device: device.clone(),
                        queue_index: q,
                        label,
                        pipelines: pipelines.clone(),
                        stream: Mutex::new(stream),
                        binds: Mutex::new(binds::BindCache::default()),
                        timeout_ms,
                        hooks: Mutex::new(Vec::new()),
                        zero_position: std::sync::OnceLock::new(),
                    }),
                });
            }
        }
        if members.is_empty() {
            return Err(Error::InvalidArgument("a group needs at least one member".into()));
        }
        log::info!(
            "opened group {:?}: {}",
            id,
            members.iter().map(|m| m.label().to_string()).collect::<Vec<_>>().join("; ")
        );
        Ok(Self { id, members, instance: instance.clone(), spec: devices.to_vec() })
    }

    /// This group's identity: tensors and communicators remember it, so one used with another
    /// group is an [`Error::WrongOwner`].
    pub fn id(&self) -> GroupId {
        self.id
    }

    /// Number of members (at least one: opening an empty group fails).
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether the group has no members (never true for an opened group).
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Member `index`, or [`Error::IndexOutOfRange`].
    pub fn member(&self, index: usize) -> Result<&Member> {
        self.members.get(index).ok_or(Error::member_index(index, self.members.len()))
    }

    /// Every member, in group order (index 0 first).
    pub fn members(&self) -> &[Member] {
        &self.members
    }

    /// The instance the group was opened from.
    pub fn instance(&self) -> &Instance {
        &self.instance
    }

    /// `(adapter index, queues)` of each VkDevice, in order.
    pub fn layout(&self) -> &[(usize, u32)] {
        &self.spec
    }

    /// Waits for every member's work.
    pub fn synchronize(&self) -> Result<()> {
        self.members.iter().try_for_each(|m| m.synchronize())
    }
}

/// Submits the open command buffers of `batch` (members sharing one queue, or one member) as
/// one batch, member `batch[k]` signalling `signals[k]`.
pub(crate) fn submit_batch<const S: usize>(
    members: &[Member],
    batch: &[usize],
    signals: &[[(&TimelineSemaphore, u64); S]],
) -> Result<()> {
    let mut guards: Vec<_> = batch.iter().map(|&j| members[j].shared.stream()).collect();
    let mut streams: Vec<&mut Stream> = guards.iter_mut().map(|g| &mut **g).collect();
    let signals: Vec<&[(&TimelineSemaphore, u64)]> = signals.iter().map(|a| &a[..]).collect();
    Stream::submit_together(&mut streams, &signals, &vec![&[][..]; batch.len()])
        .map_err(|e| members[batch[0]].shared.err(e))?;
    drop(streams);
    drop(guards);
    batch.iter().try_for_each(|&j| members[j].shared.submitted())
}
