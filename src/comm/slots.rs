//! Host slots: one page-aligned host allocation imported into every member, holding `entries`
//! entries (a round uses entry `round mod entries`: two halves by round parity for HostBridge
//! and SyncFd, a longer ring for DevicePoll), each with one region per member of `capacity`
//! 32-bit words.
//!
//! Layout, in 32-bit words: entry e, member j starts at `(e * members + j) * stride`, where
//! `stride` is `capacity` rounded up to the page alignment. An entry's regions are contiguous,
//! so phase B binds one range — the round's entry — and reads every member's slot through it;
//! that range must fit the devices' `maxStorageBufferRange`, which bounds the capacity (larger
//! all-reduces run in chunks).

use std::sync::Arc;

use vk_native::{BindRange, GpuBuffer, HostAllocation, ImportedBuffer};

use super::faults::FaultHooks;
use crate::error::{Error, Result};
use crate::group::Member;

pub(crate) struct HostSlots {
    /// One import per member, in group order; each holds the host allocation alive.
    pub(crate) imports: Vec<ImportedBuffer>,
    /// Words per member and half.
    pub(crate) capacity: u64,
    /// Words between the starts of two consecutive member regions.
    pub(crate) stride: u64,
    /// Entries (each one region per member).
    pub(crate) entries: u64,
    members: u64,
    /// The smallest `maxStorageBufferRange` of the members.
    max_binding: u64,
}

impl HostSlots {
    /// The largest of 4096 and every member's `minImportedHostPointerAlignment`.
    pub(crate) fn alignment(members: &[Member]) -> u64 {
        members.iter().map(|m| m.adapter().caps.min_imported_host_pointer_alignment).fold(4096, u64::max)
    }

    /// The largest capacity (words per member and half) whose half fits every member's
    /// `maxStorageBufferRange`.
    pub(crate) fn max_capacity(members: &[Member]) -> u64 {
        let align_words = Self::alignment(members) / 4;
        let range = members.iter().map(|m| m.adapter().caps.max_storage_buffer_range).min().unwrap_or(0);
        let per_member = range / 4 / members.len().max(1) as u64;
        per_member / align_words * align_words
    }

    /// Allocates `entries` entries of `capacity` words per member and imports them into every
    /// member.
    pub(crate) fn new(members: &[Member], capacity: u64, entries: u64, fail: &FaultHooks) -> Result<Self> {
        let align = Self::alignment(members);
        let stride = (capacity * 4).max(4).next_multiple_of(align) / 4;
        let n = members.len() as u64;
        let total = entries.max(1) * n * stride * 4;
        if fail.take_alloc_failure() {
            return Err(Error::OutOfHostMemory(": host slot allocation failed (injected)".into()));
        }
        let host = Arc::new(
            HostAllocation::new(total, align)
                .map_err(|e| Error::OutOfHostMemory(format!(" for the host slots ({total} bytes): {e}")))?,
        );
        let mut imports = Vec::with_capacity(members.len());
        for m in members {
            if fail.take_import_failure() {
                return Err(Error::Vulkan(format!(
                    "host pointer import into {} failed (injected)",
                    m.label()
                )));
            }
            let b = ImportedBuffer::new(m.device(), &host)
                .map_err(|e| Error::native(&format!("host pointer import into {}", m.label()), e))?;
            imports.push(b);
        }
        let max_binding =
            members.iter().map(|m| m.adapter().caps.max_storage_buffer_range).min().unwrap_or(0);
        Ok(Self { imports, capacity, stride, entries: entries.max(1), members: n, max_binding })
    }

    /// Byte offset of member `j`'s region in entry `e`.
    pub(crate) fn region_bytes(&self, j: usize, e: u64) -> u64 {
        (e * self.members + j as u64) * self.stride * 4
    }

    /// Member `reader`'s binding of entry `e` and the word offset of the entry's first region
    /// in it: the whole allocation where every device's `maxStorageBufferRange` allows (one
    /// bind group for every entry, however long the ring), else the entry alone.
    pub(crate) fn entry(&self, reader: usize, e: u64) -> (BindRange<'_>, u64) {
        self.region(reader, 0, e, self.members * self.stride * 4)
    }

    /// Member `writer`'s binding of its own region of entry `e`, and the region's word offset
    /// in it (as [`HostSlots::entry`]).
    pub(crate) fn own_region(&self, writer: usize, e: u64) -> (BindRange<'_>, u64) {
        self.region(writer, writer, e, self.stride * 4)
    }

    fn region(&self, member: usize, j: usize, e: u64, size: u64) -> (BindRange<'_>, u64) {
        let buffer = &self.imports[member];
        if buffer.size() <= self.max_binding {
            (BindRange::whole(buffer), self.region_bytes(j, e) / 4)
        } else {
            (BindRange { buffer, offset: self.region_bytes(j, e), size }, 0)
        }
    }

    /// Bytes of host memory per entry.
    pub(crate) fn entry_bytes(members: usize, capacity: u64, align: u64) -> u64 {
        members as u64 * (capacity * 4).max(4).next_multiple_of(align)
    }
}
