//! [`MemberShared`]: the state of a member that every handle to it shares (its device, queue,
//! stream, bind groups and the communicators' hooks), and the recording primitives the
//! operations, kernels and transports go through.

use std::sync::{Arc, Mutex, MutexGuard, Weak};

use vk_native::{
    BindGroup, BindRange, Buffer, BufferId, BufferUsage, Device, GpuBuffer, StagingBuffer, SyncFdSemaphore,
    TimelineSemaphore,
};

use super::binds;
use super::options::GroupId;
use super::uploads::{FillRows, UploadRing, UploadStream};

use crate::error::{Error, Result};
use crate::kernels::{Entry, ImmediateWords, Kernel, Pipelines};
use crate::stream::Stream;

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
    pub(super) hooks: Mutex<Vec<Weak<dyn StreamHook>>>,
    /// A u32 counter that stays 0: the position counter the decoder kernels bind when called
    /// with an explicit position (`ops::Position::fixed`). Made at first use.
    pub(super) zero_position: std::sync::OnceLock<Buffer>,
    /// The staging buffers large uploads go through ([`MemberShared::upload_rows`]).
    pub(super) uploads: Mutex<UploadRing>,
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

impl UploadStream for MemberShared {
    fn device(&self) -> &Device {
        &self.device
    }

    fn capturing(&self) -> bool {
        self.stream().rec.capturing()
    }

    fn copy(&self, src: &StagingBuffer, dst: &dyn GpuBuffer, dst_offset: u64, bytes: u64) -> Result<()> {
        self.record_copy(src, 0, dst, dst_offset, bytes)
    }

    fn submit(&self) -> Result<u64> {
        self.flush()
    }

    fn wait(&self, value: u64) -> Result<()> {
        let mut s = self.stream();
        self.wait_value(&mut s, value, "an upload's staging copy")
    }

    fn native(&self, e: vk_native::NativeError) -> Error {
        self.err(e)
    }
}

impl MemberShared {
    /// Uploads `rows` rows of `row_bytes` bytes each, then `pad` zero bytes, into `dst` through
    /// the member's staging ring ([`UploadRing::upload_rows`]); `fill` writes each run of rows.
    pub(crate) fn upload_rows(
        &self,
        dst: &dyn GpuBuffer,
        rows: usize,
        row_bytes: usize,
        pad: usize,
        fill: &mut FillRows<'_>,
    ) -> Result<()> {
        let mut ring = self.uploads.lock().unwrap_or_else(|p| p.into_inner());
        ring.upload_rows(self, dst, (rows, row_bytes, pad), fill)
    }

    /// Frees the staging ring's buffers (after a load: they hold pinned host memory). Copies
    /// still running keep theirs alive until they complete.
    pub(crate) fn release_uploads(&self) {
        *self.uploads.lock().unwrap_or_else(|p| p.into_inner()) = UploadRing::default();
    }

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
    pub(super) fn submitted(&self) -> Result<()> {
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
