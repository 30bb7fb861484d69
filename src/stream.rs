//! A member's stream: everything the member does is recorded into one open command buffer,
//! with barriers placed by hazard tracking, and submitted once when the caller flushes, reads,
//! or an all-reduce closes it.
//!
//! Hazard rule: a command that reads or writes a buffer written since the last barrier, or
//! writes a buffer read since the last barrier, gets a global memory barrier before it
//! (compute and transfer writes → compute and transfer reads and writes). Independent commands
//! get none. The sets persist across submits, because a barrier's first scope covers every
//! earlier command on the queue, while consecutive submits on one queue are otherwise unordered.

use vk_native::{Access, BufferId, Recorder, Replay, SubmitInfo, SyncFdSemaphore, TimelineSemaphore};

pub(crate) struct Stream {
    pub(crate) rec: Recorder,
    // Buffers written and read since the last barrier: a handful between barriers, so vectors
    // searched linearly (no hashing or allocation per command once they have grown).
    written: Vec<BufferId>,
    read: Vec<BufferId>,
    waits: Vec<(TimelineSemaphore, u64)>,
    binary_waits: Vec<SyncFdSemaphore>,
    /// Submits made so far (one counts per vkQueueSubmit).
    pub(crate) submits: u64,
    /// A recording the next submit runs after the open command buffer.
    replay_next: Option<Replay>,
    /// The hazard sets of the open command buffer while a recording is in progress.
    saved: Option<(Vec<BufferId>, Vec<BufferId>)>,
}

impl Stream {
    pub(crate) fn new(rec: Recorder) -> Self {
        Self {
            rec,
            written: Vec::new(),
            read: Vec::new(),
            waits: Vec::new(),
            binary_waits: Vec::new(),
            submits: 0,
            replay_next: None,
            saved: None,
        }
    }

    /// Starts a recording for replay (`Recorder::begin_capture`): it begins with a barrier
    /// after every earlier write, since each submission of it follows whatever was submitted
    /// before; hazards inside it are tracked as usual.
    pub(crate) fn begin_capture(&mut self) -> vk_native::Result<()> {
        self.rec.begin_capture()?;
        if let Err(e) = self.rec.barrier(Access::COMPUTE_WRITE | Access::TRANSFER_WRITE, Access::DEVICE_ALL) {
            self.rec.cancel_capture();
            return Err(e);
        }
        self.saved = Some((std::mem::take(&mut self.written), std::mem::take(&mut self.read)));
        Ok(())
    }

    /// Ends the recording with a barrier before anything after it and visibility to the host,
    /// and returns to the open command buffer's hazards.
    pub(crate) fn end_capture(&mut self) -> vk_native::Result<Replay> {
        let r = self
            .rec
            .barrier(Access::COMPUTE_WRITE | Access::TRANSFER_WRITE, Access::HOST_READ | Access::DEVICE_ALL)
            .and_then(|()| self.rec.end_capture());
        if r.is_err() {
            self.rec.cancel_capture();
        }
        self.restore();
        r
    }

    /// Drops a recording in progress after an error while recording it.
    pub(crate) fn cancel_capture(&mut self) {
        self.rec.cancel_capture();
        self.restore();
    }

    fn restore(&mut self) {
        if let Some((w, r)) = self.saved.take() {
            self.written = w;
            self.read = r;
        }
    }

    /// Submits the open command buffer, then `replay` in the same submission. The recording
    /// ends with a barrier after all its writes, so nothing recorded after needs another.
    pub(crate) fn submit_replay(&mut self, replay: &Replay) -> vk_native::Result<u64> {
        self.replay_next = Some(replay.clone());
        let r = self.submit(&[], &[]);
        self.replay_next = None;
        if r.is_ok() {
            self.written.clear();
            self.read.clear();
        }
        r
    }

    /// Places a barrier if the next command, reading `reads` and writing `writes`, conflicts
    /// with commands since the last barrier; then records its accesses.
    pub(crate) fn access(&mut self, reads: &[BufferId], writes: &[BufferId]) -> vk_native::Result<()> {
        let hazard = reads.iter().any(|b| self.written.contains(b))
            || writes.iter().any(|b| self.written.contains(b) || self.read.contains(b));
        if hazard {
            self.rec.barrier(Access::COMPUTE_WRITE | Access::TRANSFER_WRITE, Access::DEVICE_ALL)?;
            self.written.clear();
            self.read.clear();
        }
        for &b in reads {
            if !self.read.contains(&b) {
                self.read.push(b);
            }
        }
        for &b in writes {
            if !self.written.contains(&b) {
                self.written.push(b);
            }
        }
        Ok(())
    }

    /// Notes a write recorded straight into the recorder (a fill), so its readers get a barrier.
    pub(crate) fn note_write(&mut self, id: BufferId) {
        if !self.written.contains(&id) {
            self.written.push(id);
        }
    }

    /// [`Stream::access`] for a kernel binding `ids`, each read where `read_only` says so and
    /// written otherwise (the kernel's own interface, from build.rs), which also reads `after`.
    /// Allocates nothing.
    pub(crate) fn access_bound(
        &mut self,
        ids: &[BufferId],
        read_only: &[bool],
        after: &[BufferId],
    ) -> vk_native::Result<()> {
        let bound = || ids.iter().zip(read_only);
        let reads = || bound().filter(|(_, &ro)| ro).map(|(b, _)| b).chain(after);
        let writes = || bound().filter(|(_, &ro)| !ro).map(|(b, _)| b);
        let hazard = reads().any(|b| self.written.contains(b))
            || writes().any(|b| self.written.contains(b) || self.read.contains(b));
        if hazard {
            self.rec.barrier(Access::COMPUTE_WRITE | Access::TRANSFER_WRITE, Access::DEVICE_ALL)?;
            self.written.clear();
            self.read.clear();
        }
        for b in reads() {
            if !self.read.contains(b) {
                self.read.push(*b);
            }
        }
        for b in writes() {
            if !self.written.contains(b) {
                self.written.push(*b);
            }
        }
        Ok(())
    }

    /// Records a barrier that makes every device write so far visible to the host, and clears
    /// the write set (what the host may read next is settled; device reads after it need no
    /// further barrier against those writes... except through the host, handled by submit).
    pub(crate) fn barrier_to_host(&mut self) -> vk_native::Result<()> {
        self.rec.barrier(
            Access::COMPUTE_WRITE | Access::TRANSFER_WRITE,
            Access::HOST_READ | Access::DEVICE_ALL,
        )?;
        self.written.clear();
        self.read.clear();
        Ok(())
    }

    /// Records a barrier that makes host writes (to imported host memory, after a semaphore
    /// wait that the next submit carries) visible to compute and transfer reads.
    pub(crate) fn barrier_from_host(&mut self) -> vk_native::Result<()> {
        self.rec.barrier(Access::HOST_WRITE, Access::DEVICE_ALL)
    }

    /// Makes the next submit wait for `sem` to reach `value`.
    pub(crate) fn wait_next_submit(&mut self, sem: &TimelineSemaphore, value: u64) {
        self.waits.push((sem.clone(), value));
    }

    /// Makes the next submit wait on a binary semaphore (a SYNC_FD payload imported into it).
    pub(crate) fn wait_next_submit_binary(&mut self, sem: &SyncFdSemaphore) {
        self.binary_waits.push(sem.clone());
    }

    /// Whether a submit would do anything.
    pub(crate) fn has_work(&self) -> bool {
        self.rec.recorded_commands() > 0
            || !self.waits.is_empty()
            || !self.binary_waits.is_empty()
            || self.replay_next.is_some()
    }

    /// Submits the open command buffer with pending waits and `signals`.
    pub(crate) fn submit(
        &mut self,
        signals: &[(&TimelineSemaphore, u64)],
        binary_signals: &[&SyncFdSemaphore],
    ) -> vk_native::Result<u64> {
        Ok(Self::submit_together(&mut [self], &[signals], &[binary_signals])?[0])
    }

    /// Submits the open command buffers of `streams` (members sharing one queue) as one batch
    /// (`Recorder::submit_together`), stream `k` with its pending waits and `signals[k]`,
    /// `binary_signals[k]`; returns each stream's submit value. Each stream counts the batch as
    /// one submit of its own. On failure the pending waits stay, as nothing was submitted.
    pub(crate) fn submit_together(
        streams: &mut [&mut Stream],
        signals: &[&[(&TimelineSemaphore, u64)]],
        binary_signals: &[&[&SyncFdSemaphore]],
    ) -> vk_native::Result<Vec<u64>> {
        let mut recs = Vec::with_capacity(streams.len());
        let mut waits = Vec::with_capacity(streams.len());
        let mut binary_waits = Vec::with_capacity(streams.len());
        let mut replays = Vec::with_capacity(streams.len());
        for s in streams.iter_mut() {
            let Stream { rec, waits: w, binary_waits: b, replay_next, .. } = &mut **s;
            recs.push(rec);
            waits.push(w.iter().map(|(s, v)| (s, *v)).collect::<Vec<_>>());
            binary_waits.push(b.iter().collect::<Vec<_>>());
            replays.push(replay_next.as_ref());
        }
        let infos: Vec<SubmitInfo<'_>> = (0..recs.len())
            .map(|k| SubmitInfo {
                wait_timeline: &waits[k],
                signal_timeline: signals[k],
                wait_binary: &binary_waits[k],
                signal_binary: binary_signals[k],
                replay: replays[k],
            })
            .collect();
        let values = vk_native::Recorder::submit_together(&mut recs, &infos)?;
        for s in streams.iter_mut() {
            s.waits.clear();
            s.binary_waits.clear();
            s.submits += 1;
        }
        Ok(values)
    }

    /// Submits if anything is recorded or waiting; returns the value to wait for.
    pub(crate) fn flush(&mut self) -> vk_native::Result<u64> {
        if self.has_work() {
            self.submit(&[], &[])
        } else {
            Ok(self.rec.submitted())
        }
    }
}
