//! Host slots: one page-aligned host allocation imported into every member, holding for each
//! slot half (used by round parity) one region per member of `capacity` 32-bit words.
//!
//! Layout, in 32-bit words: half h, member j starts at `(h * members + j) * stride`, where
//! `stride` is `capacity` rounded up to the page alignment. A half's regions are contiguous, so
//! phase B binds one range — the round's half — and reads every member's slot through it; that
//! range must fit the devices' `maxStorageBufferRange`, which bounds the capacity (larger
//! all-reduces run in chunks).

use std::sync::Arc;

use vk_native::{BindRange, HostAllocation, ImportedBuffer};

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
    members: u64,
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

    /// Allocates slots of `capacity` words per member and half and imports them into every
    /// member.
    pub(crate) fn new(members: &[Member], capacity: u64, fail: &FaultHooks) -> Result<Self> {
        let align = Self::alignment(members);
        let stride = (capacity * 4).max(4).next_multiple_of(align) / 4;
        let n = members.len() as u64;
        let total = 2 * n * stride * 4;
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
        Ok(Self { imports, capacity, stride, members: n })
    }

    /// Byte offset of member `j`'s region in half `h`.
    pub(crate) fn region_bytes(&self, j: usize, h: u64) -> u64 {
        (h * self.members + j as u64) * self.stride * 4
    }

    /// Member `reader`'s binding of all of half `h`.
    pub(crate) fn half(&self, reader: usize, h: u64) -> BindRange<'_> {
        BindRange {
            buffer: &self.imports[reader],
            offset: self.region_bytes(0, h),
            size: self.members * self.stride * 4,
        }
    }
}
