//! SyncFd transport: members release each other without the host bridge. After every member
//! submitted phase A (signalling a binary semaphore), each payload is exported as a SYNC_FD,
//! duplicated, and imported temporarily into one binary semaphore per peer; each member's
//! phase-B submit waits on its peers' semaphores.
//!
//! The exchange runs inline on the calling thread right after the phase-A submits: exporting a
//! SYNC_FD of a pending signal returns at once (the fd signals later), so a thread would only
//! add a hand-off. The peers' semaphores come from pools and are reused once the submit that
//! used them has completed (Vulkan forbids importing into a semaphore with a pending wait);
//! phase A signals a new semaphore each round (see `Pool::fresh`).

use std::sync::Arc;

use vk_native::{NativeError, SyncFd, SyncFdSemaphore, VkResult};

use super::faults::FaultHooks;
use crate::error::{Error, Result};
use crate::group::Member;

#[derive(Default)]
struct Pool {
    /// Each semaphore with the member's stream value after which it is free again.
    items: Vec<(SyncFdSemaphore, u64)>,
}

impl Pool {
    /// A free semaphore, now reserved until `busy_until` completes.
    fn take(&mut self, m: &Member, completed: u64, busy_until: u64) -> Result<SyncFdSemaphore> {
        if let Some(item) = self.items.iter_mut().find(|(_, v)| *v <= completed) {
            item.1 = busy_until;
            return Ok(item.0.clone());
        }
        let s = SyncFdSemaphore::new(m.device()).map_err(|e| m.shared.err(e))?;
        self.items.push((s.clone(), busy_until));
        Ok(s)
    }

    /// A new semaphore reserved until `busy_until` completes; those whose use completed are
    /// dropped. For phase A's signals: a binary semaphore signalled, exported (which the spec
    /// counts as a wait, so it may be signalled again) and signalled again is valid, but
    /// Debian 12's validation layer reports the second signal as one "not since waited on"
    /// (UNASSIGNED-CoreValidation-DrawState-QueueForwardProgress; Vulkan-ValidationLayers
    /// issues 4762 and 11493), so each phase A signals a semaphore of its own.
    fn fresh(&mut self, m: &Member, completed: u64, busy_until: u64) -> Result<SyncFdSemaphore> {
        self.items.retain(|(_, v)| *v > completed);
        let s = SyncFdSemaphore::new(m.device()).map_err(|e| m.shared.err(e))?;
        self.items.push((s.clone(), busy_until));
        Ok(s)
    }
}

pub(crate) struct SyncFdExchange {
    signal: Vec<Pool>,
    /// `wait[j][i]`: semaphores of member j that receive member i's payload.
    wait: Vec<Vec<Pool>>,
    current: Vec<Option<SyncFdSemaphore>>,
    pending: Vec<Vec<SyncFdSemaphore>>,
    hooks: Arc<FaultHooks>,
}

impl SyncFdExchange {
    pub(crate) fn new(members: &[Member], hooks: Arc<FaultHooks>) -> Result<Self> {
        let n = members.len();
        if let Some(m) = members.iter().find(|m| !m.device().has_sync_fd()) {
            return Err(Error::MissingExtension {
                device: m.label().into(),
                what: "SYNC_FD semaphore export and import".into(),
            });
        }
        Ok(Self {
            signal: (0..n).map(|_| Pool::default()).collect(),
            wait: (0..n).map(|_| (0..n).map(|_| Pool::default()).collect()).collect(),
            current: vec![None; n],
            pending: vec![Vec::new(); n],
            hooks,
        })
    }

    /// The binary semaphore member `i`'s phase-A submit (the next submit of its stream)
    /// signals.
    pub(crate) fn phase_a_signal(&mut self, i: usize, m: &Member) -> Result<SyncFdSemaphore> {
        let (completed, next) = m.shared.progress()?;
        let sem = self.signal[i].fresh(m, completed, next)?;
        self.current[i] = Some(sem.clone());
        Ok(sem)
    }

    /// Exports every member's phase-A payload and imports a copy into each peer.
    pub(crate) fn exchange(&mut self, members: &[Member]) -> Result<()> {
        let n = members.len();
        for i in 0..n {
            let sem = self.current[i].take().expect("phase A ran on every member");
            let fd: SyncFd = sem.export().map_err(|e| members[i].shared.err(e))?;
            for j in (0..n).filter(|&j| j != i) {
                let (completed, next) = members[j].shared.progress()?;
                let target = self.wait[j][i].take(&members[j], completed, next)?;
                let copy = fd.try_clone().map_err(|e| members[i].shared.err(e))?;
                if self.hooks.take_sync_fd_import_failure() {
                    // As the driver's refusal would read; the fd copy is closed on drop.
                    drop(copy);
                    let code = VkResult::ERROR_INVALID_EXTERNAL_HANDLE;
                    let e = NativeError::Vulkan { call: "vkImportSemaphoreFdKHR (injected)", code };
                    return Err(members[j].shared.err(e));
                }
                target.import(copy).map_err(|e| members[j].shared.err(e))?;
                self.pending[j].push(target);
            }
        }
        Ok(())
    }

    /// Attaches member `j`'s imported peer payloads to its next submit.
    pub(crate) fn phase_b_waits(&mut self, j: usize, m: &Member) {
        for sem in self.pending[j].drain(..) {
            m.shared.wait_next_submit_binary(&sem);
        }
    }
}
