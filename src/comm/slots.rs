//! Host slots: one page-aligned host allocation holding one region per member, each region two
//! halves (used by round parity) of `capacity` 32-bit words, imported into every member.
//!
//! Layout, in 32-bit words: member j's half h starts at `j * stride + h * capacity`, where
//! `stride` is `2 * capacity` rounded up to the page alignment. Every member imports the whole
//! allocation as one storage buffer, so the phase-B kernel reads all peers' slots through one
//! binding.

use std::sync::Arc;

use vk_native::{HostAllocation, ImportedBuffer};

use crate::group::Member;

pub(crate) struct HostSlots {
    /// One import per member, in group order; each holds the host allocation alive.
    pub(crate) imports: Vec<ImportedBuffer>,
    /// Words per half.
    pub(crate) capacity: u64,
    /// Words between the starts of two members' regions.
    pub(crate) stride: u64,
}

impl HostSlots {
    /// The largest of 4096 and every member's `minImportedHostPointerAlignment`.
    pub(crate) fn alignment(members: &[Member]) -> u64 {
        members.iter().map(|m| m.adapter().caps.min_imported_host_pointer_alignment).fold(4096, u64::max)
    }

    /// Allocates slots of `capacity` words per half and imports them into every member.
    pub(crate) fn new(members: &[Member], capacity: u64, fail: &super::FaultHooks) -> Result<Self, String> {
        let align = Self::alignment(members);
        let stride_bytes = (2 * capacity * 4).max(4).next_multiple_of(align);
        let total = stride_bytes * members.len() as u64;
        if fail.take_alloc_failure() {
            return Err("host slot allocation failed (injected)".into());
        }
        let host = Arc::new(
            HostAllocation::new(total, align)
                .map_err(|e| format!("host slot allocation of {total} bytes: {e}"))?,
        );
        let mut imports = Vec::with_capacity(members.len());
        for m in members {
            if fail.take_import_failure() {
                return Err(format!("host pointer import into {} failed (injected)", m.label()));
            }
            let b = ImportedBuffer::new(m.device(), &host)
                .map_err(|e| format!("host pointer import into {}: {e}", m.label()))?;
            imports.push(b);
        }
        Ok(Self { imports, capacity, stride: stride_bytes / 4 })
    }

    /// Word offset of member `j`'s half `h`.
    pub(crate) fn offset(&self, j: usize, h: u64) -> u64 {
        j as u64 * self.stride + h * self.capacity
    }
}
