//! [`Member`], one member of a group, and its stream's statistics ([`MemberStats`]).

use std::sync::Arc;

use vk_native::{AdapterInfo, Device, Replay};

use super::options::GroupId;
use super::shared::MemberShared;

use crate::error::Result;

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

    /// Stops the GPU profile [`Member::start_profile`] began. Call it after
    /// [`Member::synchronize`].
    pub fn stop_profile(&self) -> Result<()> {
        self.shared.stream().rec.stop_profile().map_err(|e| self.shared.err(e))
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
