//! The command encoders a recorder records into: one per command buffer in flight (wgpu-hal
//! resets a whole pool at once), returned to the idle ones once `progress` passes the value of
//! the submit that used it; and the back-pressure that waits for the oldest submit while
//! `max_pending` are in flight.

use std::time::Instant;

use wgpu_hal::{CommandEncoder as _, Device as _};

use super::recorder::{Active, KeepAlive, Recorder};
use crate::error::{map_hal_device, NativeError, Result};

/// How long the wait for the oldest submit may take before it is reported as a timeout.
const BACKPRESSURE_TIMEOUT_NS: u64 = 120_000_000_000;

impl Recorder {
    /// Returns finished command buffers to their encoders.
    pub(super) fn recycle(&mut self) -> Result<()> {
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
    pub(super) fn make_room(&mut self) -> Result<()> {
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

    pub(super) fn open(&mut self) -> Result<&mut Active> {
        self.check_lost()?;
        if self.active.is_none() {
            self.make_room()?;
            let mut encoder = self.take_encoder()?;
            // SAFETY: the encoder is idle (new or recycled after its work completed).
            unsafe { encoder.begin_encoding(Some("crossgpu stream")) }
                .map_err(map_hal_device("vkBeginCommandBuffer"))?;
            let mut keep: Vec<KeepAlive> = Vec::new();
            self.open_profile_window(&encoder, &mut keep);
            self.active = Some(Active { encoder, keep, uses: Vec::new() });
        }
        Ok(self.active.as_mut().expect("opened above"))
    }
}
