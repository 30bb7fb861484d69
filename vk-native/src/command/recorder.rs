//! [`Recorder`]: one queue's command recording and submission state (encoders, pending
//! submits, the capture in progress, the profile), and its lifetime.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use ash::vk;
use wgpu_hal::CommandEncoder as _;

use crate::buffer::GpuUse;
use crate::device::Device;
use crate::error::{NativeError, Result};
use crate::profile::Profile;
use crate::semaphore::TimelineSemaphore;

pub(super) type KeepAlive = Arc<dyn std::any::Any + Send + Sync>;

/// Submits a recorder keeps in flight, by default, before recording waits for the oldest. Each
/// holds one command pool, so this also bounds the pools a recorder ever creates (one more).
pub const DEFAULT_MAX_PENDING: usize = 128;

pub(super) struct Pending {
    /// `None` for a submit without a command buffer (only semaphores and keep-alives).
    pub(super) encoder: Option<wgpu_hal::vulkan::CommandEncoder>,
    pub(super) cmd: Option<wgpu_hal::vulkan::CommandBuffer>,
    pub(super) value: u64,
    pub(super) _keep: Vec<KeepAlive>,
}

pub(super) struct Active {
    pub(super) encoder: wgpu_hal::vulkan::CommandEncoder,
    pub(super) keep: Vec<KeepAlive>,
    /// Host-mapped buffers its copies use (noted as busy when it is submitted).
    pub(super) uses: Vec<Arc<GpuUse>>,
}

/// Records work for one queue of a device and submits it.
pub struct Recorder {
    pub(super) device: Device,
    pub(super) queue_index: u32,
    pub(super) progress: TimelineSemaphore,
    pub(super) submitted: u64,
    pub(super) idle: Vec<wgpu_hal::vulkan::CommandEncoder>,
    pub(super) pending: VecDeque<Pending>,
    pub(super) active: Option<Active>,
    pub(super) commands: usize,
    /// Submits in flight before recording waits for the oldest.
    pub(super) max_pending: usize,
    /// Host time spent in that wait, so far.
    pub(super) backpressure_wait: Duration,
    /// `vkQueueSubmit` calls this recorder made (a joint batch counts for its first
    /// recorder) and the host time spent in them, queue lock included.
    pub(super) queue_submits: u64,
    pub(super) queue_submit_time: Duration,
    /// Dispatches recorded so far (all command buffers).
    pub(super) dispatches: u64,
    /// Timestamps after every dispatch and copy, while profiling.
    pub(super) profile: Option<Profile>,
    /// The recording in progress, which every command goes to instead of the open buffer.
    pub(super) capture: Option<Capture>,
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

    /// Dispatches recorded by this recorder so far.
    pub fn dispatch_count(&self) -> u64 {
        self.dispatches
    }

    pub(super) fn check_lost(&self) -> Result<()> {
        if self.device.is_lost() {
            Err(NativeError::DeviceLost)
        } else {
            Ok(())
        }
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

/// A recording in progress: a command buffer of its own pool, begun for simultaneous use (a
/// replay may be submitted again while an earlier submission of it still runs).
pub(super) struct Capture {
    pub(super) pool: vk::CommandPool,
    pub(super) cmd: vk::CommandBuffer,
    pub(super) keep: Vec<KeepAlive>,
    pub(super) uses: Vec<Arc<GpuUse>>,
    pub(super) dispatches: u64,
    pub(super) commands: usize,
}
