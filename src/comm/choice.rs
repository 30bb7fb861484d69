//! Which mode a communicator runs: the one forced (`CROSSGPU_ALLREDUCE`), refused with the
//! reason where the members cannot run it, or the fastest the members can (SyncFd where every
//! member is on a Mesa driver with SYNC_FD, then HostBridge, else Generic). DevicePoll is never
//! chosen on its own: it is asked for.

use super::options::{Mode, ModeRequest};
use super::poll;
use crate::error::{Error, Result};
use crate::group::Member;

/// The mode for `members` under `request`, and why.
pub(super) fn choose(members: &[Member], request: ModeRequest) -> Result<(Mode, String)> {
    let all_mesa_fd = members.iter().all(|m| m.adapter().is_mesa()) && sync_fd_blocker(members).is_none();
    Ok(match request {
        ModeRequest::Forced(Mode::Generic) => {
            (Mode::Generic, "forced by CROSSGPU_ALLREDUCE=generic".to_string())
        }
        ModeRequest::Forced(Mode::HostBridge) => match host_bridge_blocker(members) {
            None => (Mode::HostBridge, "forced by CROSSGPU_ALLREDUCE=bridge".to_string()),
            Some(why) => return Err(Error::Unsupported(format!("CROSSGPU_ALLREDUCE=bridge: {why}"))),
        },
        ModeRequest::Forced(Mode::SyncFd) => match sync_fd_blocker(members) {
            None => (Mode::SyncFd, "forced by CROSSGPU_ALLREDUCE=sync_fd".to_string()),
            Some(why) => return Err(Error::Unsupported(format!("CROSSGPU_ALLREDUCE=sync_fd: {why}"))),
        },
        ModeRequest::Forced(Mode::DevicePoll) => match poll::blocker(members) {
            None => (Mode::DevicePoll, "forced by CROSSGPU_ALLREDUCE=poll".to_string()),
            Some(why) => return Err(Error::Unsupported(format!("CROSSGPU_ALLREDUCE=poll: {why}"))),
        },
        ModeRequest::Auto if members.len() < 2 => (Mode::Generic, "fewer than two members".to_string()),
        ModeRequest::Auto if all_mesa_fd => {
            (Mode::SyncFd, "every member is on a Mesa driver with SYNC_FD export and import".to_string())
        }
        ModeRequest::Auto => match host_bridge_blocker(members) {
            None => (
                Mode::HostBridge,
                "every member has VK_EXT_external_memory_host and timeline semaphores".to_string(),
            ),
            Some(why) => (Mode::Generic, why),
        },
    })
}

/// Why the fast modes cannot run on these members, or `None` if they can.
fn host_bridge_blocker(members: &[Member]) -> Option<String> {
    members.iter().find_map(|m| {
        let c = &m.adapter().caps;
        if !m.device().has_host_import() {
            Some(format!("{} lacks VK_EXT_external_memory_host", m.label()))
        } else if !c.timeline_semaphore {
            Some(format!("{} lacks timeline semaphores", m.label()))
        } else {
            None
        }
    })
}

fn sync_fd_blocker(members: &[Member]) -> Option<String> {
    if members.len() < 2 {
        return Some("SyncFd needs at least two members".into());
    }
    host_bridge_blocker(members).or_else(|| {
        members.iter().find(|m| !m.device().has_sync_fd()).map(|m| {
            format!("{} lacks VK_KHR_external_semaphore_fd with SYNC_FD export and import", m.label())
        })
    })
}
