//! DevicePoll's hook on its members' streams: a submit of one member submits its peers' rounds
//! too, and a wait that ran out is reported once.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

use crate::comm::relay::Words;
use crate::error::Result;
use crate::group::{MemberShared, StreamHook};

/// The transport's hook on its members' streams ([`StreamHook`]): a submit of a member that
/// holds this transport's rounds submits every peer that holds some too (a submitted wait
/// needs its peers' phase A on their GPUs, not on the host), and a successful wait reports a
/// wait of this transport's that ran out, once (the communicator is poisoned from then on; the
/// member's other work is unaffected). Each communicator has its own, so a second one on the
/// same group neither clears nor overwrites this one's.
pub(super) struct PollHook {
    pub(super) members: Vec<Weak<MemberShared>>,
    /// Per member: its open command buffer holds rounds of this transport (set after each
    /// round is recorded, cleared when the member submits).
    pub(super) unsubmitted: Vec<AtomicBool>,
    pub(super) words: Arc<Words>,
    pub(super) reported: Vec<AtomicBool>,
}

impl PollHook {
    /// Notes that member `i` recorded a round of this transport.
    pub(super) fn recorded(&self, i: usize) {
        self.unsubmitted[i].store(true, Ordering::Release);
    }
}

impl StreamHook for PollHook {
    fn submitted(&self, index: usize) -> Result<()> {
        if !self.unsubmitted.get(index).is_some_and(|u| u.swap(false, Ordering::AcqRel)) {
            return Ok(());
        }
        for (j, peer) in self.members.iter().enumerate() {
            if j != index && self.unsubmitted[j].swap(false, Ordering::AcqRel) {
                if let Some(peer) = peer.upgrade() {
                    peer.flush()?;
                }
            }
        }
        Ok(())
    }

    fn waited(&self, index: usize) -> Result<()> {
        match self.words.expired(index) {
            Some(e) if !self.reported[index].swap(true, Ordering::AcqRel) => Err(e),
            _ => Ok(()),
        }
    }
}
