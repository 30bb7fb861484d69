//! Fault injection for the reliability tests: failures of the host-slot allocation and of the
//! host-pointer import, armed before creation ([`super::Comm::with_faults`]) or before a growth
//! ([`super::Comm::inject_growth_failure`]), and of a SYNC_FD import
//! ([`super::Comm::inject_sync_fd_import_failure`]). No effect unless armed.

use std::sync::atomic::{AtomicBool, Ordering};

/// Fault injection (armed only through the `test-hooks` feature's entry points; no effect
/// unless armed).
#[derive(Debug, Default)]
pub(crate) struct FaultHooks {
    pub(super) alloc: AtomicBool,
    pub(super) import: AtomicBool,
    /// The next SYNC_FD import into a peer's semaphore fails (SyncFd transport).
    pub(super) sync_fd_import: AtomicBool,
}

impl FaultHooks {
    /// Arms the failures of the next allocation and of the next import.
    #[cfg_attr(not(feature = "test-hooks"), allow(dead_code))]
    pub(super) fn arm(&self, alloc: bool, import: bool) {
        self.alloc.store(alloc, Ordering::Relaxed);
        self.import.store(import, Ordering::Relaxed);
    }
    pub(super) fn take_alloc_failure(&self) -> bool {
        self.alloc.swap(false, Ordering::Relaxed)
    }
    pub(super) fn take_import_failure(&self) -> bool {
        self.import.swap(false, Ordering::Relaxed)
    }
    pub(super) fn take_sync_fd_import_failure(&self) -> bool {
        self.sync_fd_import.swap(false, Ordering::Relaxed)
    }
}
