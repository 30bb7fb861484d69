//! SyncFd transport: members release each other without the host bridge. After every member
//! submitted phase A (signalling a binary semaphore), each payload is exported as a SYNC_FD,
//! duplicated, and imported temporarily into one binary semaphore per peer; each member's
//! phase-B submit waits on its peers' semaphores.
//!
//! The exchange runs inline on the calling thread right after the phase-A submits: exporting a
//! SYNC_FD of a pending signal returns at once (the fd signals later), so a thread would only
//! add a hand-off. Semaphores come from pools and are reused once the submit that used them has
//! completed (Vulkan forbids importing into a semaphore with a pending wait).

use vk_native::{SyncFd, SyncFdSemaphore};

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
}

pub(crate) struct SyncFdExchange {
    signal: Vec<Pool>,
    /// `wait[j][i]`: semaphores of member j that receive member i's payload.
    wait: Vec<Vec<Pool>>,
    current: Vec<Option<SyncFdSemaphore>>,
    pending: Vec<Vec<SyncFdSemaphore>>,
}

impl SyncFdExchange {
    pub(crate) fn new(members: &[Member]) -> Result<Self> {
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
        })
    }

    /// The binary semaphore member `i`'s phase-A submit (the next submit of its stream)
    /// signals.
    pub(crate) fn phase_a_signal(&mut self, i: usize, m: &Member) -> Result<SyncFdSemaphore> {
        let (completed, next) = m.shared.progress()?;
        let sem = self.signal[i].take(m, completed, next)?;
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
