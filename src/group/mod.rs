//! Device groups: N members, each a queue of a VkDevice with its own stream, opened from an
//! adapter list. A member is what the rest of crossgpu calls a "device": it owns its tensors,
//! its stream and its bind groups; members that share a VkDevice (queue stand-ins) share only
//! the pipelines.

//!
//! - `options.rs`: [`GroupOptions`], [`GroupId`].
//! - `shared.rs`: the member state its handles share, and the recording primitives.
//! - `member.rs`: [`Member`] and [`MemberStats`].
//! - `device_group.rs`: [`DeviceGroup`], opened from an adapter list.
//! - `selection.rs`: which adapters a spec names; `binds.rs`: each member's bind-group cache.

mod binds;
mod device_group;
mod member;
mod options;
mod selection;
mod shared;
mod uploads;

pub(crate) use device_group::submit_batch;
pub use device_group::DeviceGroup;
pub use member::{Member, MemberStats};
pub use options::{GroupId, GroupOptions};
pub use selection::{AdapterSelector, DeviceSpec, GroupSpec};
pub(crate) use shared::{MemberShared, StreamHook};
pub(crate) use uploads::FillRows;
