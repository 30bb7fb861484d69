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

use vk_native::{BindRange, GpuBuffer, HostAllocation, ImportedBuffer, NativeError};

use super::faults::FaultHooks;
use crate::error::{Error, Result};
use crate::group::Member;

/// Where each member's region of each entry lies in a slot allocation: the one layout of the
/// communicator's host slots and of the wgpu embedding's (`crate::embed`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SlotLayout {
    /// Members (regions per entry).
    pub(crate) members: u64,
    /// Words between the starts of two consecutive member regions: the capacity rounded up to
    /// the alignment, so every region starts on an importable, bindable boundary.
    pub(crate) stride: u64,
    /// Entries (each one region per member).
    pub(crate) entries: u64,
}

impl SlotLayout {
    /// `entries` entries of `members` regions of at least `capacity` words, each region
    /// starting at a multiple of `align` bytes.
    pub(crate) fn new(members: usize, capacity: u64, entries: u64, align: u64) -> Self {
        let stride = (capacity * 4).max(4).next_multiple_of(align.max(16)) / 4;
        Self { members: members as u64, stride, entries: entries.max(1) }
    }

    /// Byte offset of member `j`'s region in entry `e`.
    pub(crate) fn region_bytes(&self, j: usize, e: u64) -> u64 {
        (e * self.members + j as u64) * self.stride * 4
    }

    /// Bytes of one entry (every member's region).
    pub(crate) fn entry_bytes(&self) -> u64 {
        self.members * self.stride * 4
    }

    /// Bytes of the whole allocation.
    pub(crate) fn total_bytes(&self) -> u64 {
        self.entries * self.entry_bytes()
    }
}

/// The most words per member an entry of `members` regions can hold when a whole entry must
/// fit one binding of `max_binding` bytes, each region starting on `align` bytes.
pub(crate) fn capacity_within(max_binding: u64, members: usize, align: u64) -> u64 {
    let align_words = align / 4;
    let per_member = max_binding / 4 / members.max(1) as u64;
    per_member / align_words * align_words
}

pub(crate) struct HostSlots {
    /// One import per member of this process, in group order; each holds the host allocation
    /// alive.
    pub(crate) imports: Vec<ImportedBuffer>,
    /// The layout's index of `imports[0]`'s member: 0, except for slots shared between
    /// processes ([`HostSlots::shared`]), whose layout counts every process's members.
    first: usize,
    /// Words per member and entry.
    pub(crate) capacity: u64,
    pub(crate) layout: SlotLayout,
    /// The smallest `maxStorageBufferRange` of the members.
    max_binding: u64,
}

impl HostSlots {
    /// The largest of 4096 and every member's `minImportedHostPointerAlignment`.
    pub(crate) fn alignment(members: &[Member]) -> u64 {
        members.iter().map(|m| m.adapter().caps.min_imported_host_pointer_alignment).fold(4096, u64::max)
    }

    /// The smallest `maxStorageBufferRange` of `members`.
    pub(crate) fn max_binding(members: &[Member]) -> u64 {
        members.iter().map(|m| m.adapter().caps.max_storage_buffer_range).min().unwrap_or(0)
    }

    /// The largest capacity (words per member and half) whose half fits every member's
    /// `maxStorageBufferRange`.
    pub(crate) fn max_capacity(members: &[Member]) -> u64 {
        capacity_within(Self::max_binding(members), members.len(), Self::alignment(members))
    }

    /// Allocates `entries` entries of `capacity` words per member and imports them into every
    /// member.
    pub(crate) fn new(members: &[Member], capacity: u64, entries: u64, fail: &FaultHooks) -> Result<Self> {
        let align = Self::alignment(members);
        let layout = SlotLayout::new(members.len(), capacity, entries, align);
        let total = layout.total_bytes();
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
                // What a driver returns for a pointer it cannot import.
                let code = vk_native::VkResult::ERROR_INVALID_EXTERNAL_HANDLE;
                let e = NativeError::Vulkan { call: "vkAllocateMemory (injected)", code };
                return Err(Error::native(&format!("host pointer import into {}", m.label()), e));
            }
            let b = ImportedBuffer::new(m.device(), &host)
                .map_err(|e| Error::native(&format!("host pointer import into {}", m.label()), e))?;
            imports.push(b);
        }
        let max_binding = Self::max_binding(members);
        Ok(Self { imports, first: 0, capacity, layout, max_binding })
    }

    /// Slots laid out for every member of several processes (`layout`, `capacity` words per
    /// member), in host memory those processes share (`host`), imported into this process's
    /// `members`: layout members `first..first + members.len()`.
    #[cfg(feature = "mpi")]
    pub(crate) fn shared(
        members: &[Member],
        first: usize,
        host: &Arc<HostAllocation>,
        layout: SlotLayout,
        capacity: u64,
    ) -> Result<Self> {
        let imports = members
            .iter()
            .map(|m| {
                ImportedBuffer::new(m.device(), host)
                    .map_err(|e| Error::native(&format!("shared host memory import into {}", m.label()), e))
            })
            .collect::<Result<Vec<_>>>()?;
        let max_binding = Self::max_binding(members);
        Ok(Self { imports, first, capacity, layout, max_binding })
    }

    /// The import layout member `j` (one of this process's) reads and writes through.
    pub(crate) fn import(&self, j: usize) -> &ImportedBuffer {
        &self.imports[j - self.first]
    }

    /// Byte offset of member `j`'s region in entry `e`.
    pub(crate) fn region_bytes(&self, j: usize, e: u64) -> u64 {
        self.layout.region_bytes(j, e)
    }

    /// Member `reader`'s binding of entry `e` and the word offset of the entry's first region
    /// in it: the whole allocation where every device's `maxStorageBufferRange` allows (one
    /// bind group for every entry, however long the ring), else the entry alone.
    pub(crate) fn entry(&self, reader: usize, e: u64) -> (BindRange<'_>, u64) {
        self.region(reader, 0, e, self.layout.entry_bytes())
    }

    /// Member `writer`'s binding of its own region of entry `e`, and the region's word offset
    /// in it (as [`HostSlots::entry`]).
    pub(crate) fn own_region(&self, writer: usize, e: u64) -> (BindRange<'_>, u64) {
        self.region(writer, writer, e, self.layout.stride * 4)
    }

    fn region(&self, member: usize, j: usize, e: u64, size: u64) -> (BindRange<'_>, u64) {
        let buffer = self.import(member);
        if buffer.size() <= self.max_binding {
            (BindRange::whole(buffer), self.region_bytes(j, e) / 4)
        } else {
            (BindRange { buffer, offset: self.region_bytes(j, e), size }, 0)
        }
    }
}
