//! Large uploads (a checkpoint's weights) through a few reused staging buffers: the source
//! writes each run of rows straight into mapped staging memory (a file's positioned read lands
//! there, with no host buffer in between), a copy moves it to the device, and a buffer is
//! written again only once its copy has completed. Allocating and pinning a new host-visible
//! buffer per tensor, and copying each tensor twice on the host, is what this replaces.
//!
//! What it must never do: write a staging buffer that a recorded or submitted copy has not yet
//! finished reading (each slot is flushed and waited for before it is written again), or run
//! inside a recording for replay (the copies would only run at replay).

use std::ops::Range;

use vk_native::{Device, GpuBuffer, StagingBuffer};

use crate::error::{Error, Result};

/// Bytes a staging buffer holds (more where one row is larger).
const CHUNK_BYTES: usize = 32 << 20;
/// Staging buffers per member: one being written while the others' copies run.
const SLOTS: usize = 3;

/// Writes rows into a buffer slice of a caller's: `fill(rows, bytes)` writes rows `rows` (of
/// the upload, counted from 0), `bytes.len() == rows.len() · row_bytes`.
pub(crate) type FillRows<'a> = dyn FnMut(Range<usize>, &mut [u8]) -> Result<()> + 'a;

/// What an upload needs of the member's stream (the member implements it).
pub(crate) trait UploadStream {
    /// The member's device, where staging buffers are made.
    fn device(&self) -> &Device;
    /// Whether a recording for replay is in progress.
    fn capturing(&self) -> bool;
    /// Records a copy of `bytes` bytes from `src` to `dst` at `dst_offset`.
    fn copy(&self, src: &StagingBuffer, dst: &dyn GpuBuffer, dst_offset: u64, bytes: u64) -> Result<()>;
    /// Submits what is recorded; returns the progress value that marks its completion.
    fn submit(&self) -> Result<u64>;
    /// Waits until the progress value `value` is reached.
    fn wait(&self, value: u64) -> Result<()>;
    /// The error of a native failure on this member.
    fn native(&self, e: vk_native::NativeError) -> Error;
}

#[derive(Default)]
pub(crate) struct UploadRing {
    slots: Vec<Slot>,
    /// The slot written next, round-robin (so the one whose copy is oldest).
    next: usize,
}

struct Slot {
    staging: StagingBuffer,
    state: SlotState,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum SlotState {
    /// No copy reads it.
    Idle,
    /// A copy reads it, recorded but perhaps not submitted.
    Recorded,
    /// Its copy is in the submission the stream's progress reaches at this value.
    Submitted(u64),
}

impl UploadRing {
    /// Uploads `rows` rows of `row_bytes` bytes each, then `pad` zero bytes, into `dst` from
    /// its byte 0, in runs of rows that fit a staging buffer; `fill` writes each run.
    pub(crate) fn upload_rows(
        &mut self,
        stream: &dyn UploadStream,
        dst: &dyn GpuBuffer,
        (rows, row_bytes, pad): (usize, usize, usize),
        fill: &mut FillRows<'_>,
    ) -> Result<()> {
        let total = rows.checked_mul(row_bytes).and_then(|b| b.checked_add(pad));
        let total = total.ok_or_else(|| {
            Error::InvalidArgument(format!("an upload of {rows} rows of {row_bytes} bytes overflows"))
        })?;
        if total as u64 > dst.size() {
            return Err(Error::LengthMismatch {
                what: "an upload's bytes vs its buffer".into(),
                expected: dst.size() as usize,
                got: total,
            });
        }
        if total == 0 {
            return Ok(());
        }
        if stream.capturing() {
            return Err(Error::InvalidArgument(
                "an upload inside a recording for replay (upload before recording)".into(),
            ));
        }
        let per_chunk = (CHUNK_BYTES / row_bytes.max(1)).max(1);
        let mut r = 0;
        loop {
            let end = (r + per_chunk).min(rows);
            let data = (end - r) * row_bytes;
            let bytes = data + if end == rows { pad } else { 0 };
            let slot = self.free_slot(stream, bytes)?;
            let filled = slot.staging.write_with(0, bytes, |buf| {
                let (rows_part, pad_part) = buf.split_at_mut(data);
                pad_part.fill(0);
                fill(r..end, rows_part)
            });
            filled.map_err(|e| stream.native(e))??;
            stream.copy(&slot.staging, dst, (r * row_bytes) as u64, bytes as u64)?;
            slot.state = SlotState::Recorded;
            if end == rows {
                return Ok(());
            }
            r = end;
        }
    }

    /// The next slot, free to write `bytes`: a new one while there are fewer than `SLOTS`, else
    /// the oldest, once its copy has completed (submitted first if it was only recorded).
    fn free_slot(&mut self, stream: &dyn UploadStream, bytes: usize) -> Result<&mut Slot> {
        let size = bytes.max(CHUNK_BYTES) as u64;
        let new = || -> Result<Slot> {
            let staging = StagingBuffer::new(stream.device(), size, true).map_err(|e| stream.native(e))?;
            Ok(Slot { staging, state: SlotState::Idle })
        };
        if self.slots.len() < SLOTS {
            self.slots.push(new()?);
            return Ok(self.slots.last_mut().expect("pushed"));
        }
        let i = self.next;
        self.next = (i + 1) % SLOTS;
        if self.slots[i].state == SlotState::Recorded {
            // Submits every recorded copy, this slot's among them.
            let v = stream.submit()?;
            for s in self.slots.iter_mut().filter(|s| s.state == SlotState::Recorded) {
                s.state = SlotState::Submitted(v);
            }
        }
        if let SlotState::Submitted(v) = self.slots[i].state {
            stream.wait(v)?;
        }
        self.slots[i].state = SlotState::Idle;
        if self.slots[i].staging.size() < bytes as u64 {
            // Dropped here; a copy still holding it keeps its memory alive until it completes.
            self.slots[i] = new()?;
        }
        Ok(&mut self.slots[i])
    }
}
