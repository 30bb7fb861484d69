//! [`DeviceGroup`]: a set of members opened together, and the joint submission of members
//! sharing a queue.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use vk_native::{Device, Recorder, TimelineSemaphore};

use super::binds;
use super::member::Member;
use super::options::{GroupId, GroupOptions, NEXT_GROUP};
use super::selection::GroupSpec;
use super::shared::MemberShared;

use crate::config;
use crate::error::{Error, Result};
use crate::instance::Instance;
use crate::kernels::Pipelines;
use crate::stream::Stream;

/// A set of members that compute together. Members are numbered in the order the spec lists
/// them.
pub struct DeviceGroup {
    id: GroupId,
    members: Vec<Member>,
    instance: Instance,
    spec: Vec<(usize, u32)>,
}

impl std::fmt::Debug for DeviceGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceGroup").field("members", &self.members).finish()
    }
}

impl DeviceGroup {
    /// Opens the group `CROSSGPU_DEVICES` names (every adapter when unset: [`GroupSpec::All`]).
    pub fn from_env(instance: &Instance) -> Result<Self> {
        Self::from_env_or(instance, &GroupSpec::All)
    }

    /// Opens the group `CROSSGPU_DEVICES` names, or `default` when it is unset (a model's
    /// commands pass [`GroupSpec::Gpus`]).
    pub fn from_env_or(instance: &Instance, default: &GroupSpec) -> Result<Self> {
        let spec = match config::devices_from_env() {
            Some(s) => GroupSpec::parse(&s)?,
            None => default.clone(),
        };
        Self::open_with(instance, &spec, &GroupOptions::from_env()?)
    }

    /// Whether two members are on one physical device (queue stand-ins or VkDevices of one
    /// adapter): they share its compute, so the group is a test of the all-reduce, not a
    /// speed-up.
    pub fn shares_a_device(&self) -> bool {
        self.members
            .iter()
            .enumerate()
            .any(|(i, m)| self.members[..i].iter().any(|p| p.adapter().index == m.adapter().index))
    }

    /// Opens the group `spec` describes, its options from the environment
    /// ([`GroupOptions::from_env`]).
    pub fn open(instance: &Instance, spec: &GroupSpec) -> Result<Self> {
        Self::open_with(instance, spec, &GroupOptions::from_env()?)
    }

    /// Opens the group `spec` describes with explicit options (no environment read).
    pub fn open_with(instance: &Instance, spec: &GroupSpec, options: &GroupOptions) -> Result<Self> {
        let resolved = spec.resolve(instance.adapters())?;
        Self::open_devices(instance, &resolved, &spec.shared_queues(), options)
    }

    /// Opens one VkDevice per `(adapter index, members)` pair, each member on its own queue,
    /// options from the environment.
    pub fn open_resolved(instance: &Instance, devices: &[(usize, u32)]) -> Result<Self> {
        Self::open_devices(instance, devices, &[], &GroupOptions::from_env()?)
    }

    /// Like [`DeviceGroup::open_resolved`]; where `shared_queue[i]` is true, the members of
    /// VkDevice i share one queue. Options from the environment.
    pub fn open_with_queues(
        instance: &Instance,
        devices: &[(usize, u32)],
        shared_queue: &[bool],
    ) -> Result<Self> {
        Self::open_devices(instance, devices, shared_queue, &GroupOptions::from_env()?)
    }

    /// One VkDevice per `(adapter index, members)` pair (members sharing a queue where
    /// `shared_queue[i]`), with `options`.
    pub fn open_devices(
        instance: &Instance,
        devices: &[(usize, u32)],
        shared_queue: &[bool],
        options: &GroupOptions,
    ) -> Result<Self> {
        options.validate()?;
        let GroupOptions { timeout_ms, max_in_flight } = *options;
        let id = GroupId(NEXT_GROUP.fetch_add(1, Ordering::Relaxed));
        let mut members = Vec::new();
        for (dev_no, &(adapter, queues)) in devices.iter().enumerate() {
            let info = instance.adapters().get(adapter).ok_or(Error::IndexOutOfRange {
                what: "adapter index",
                index: adapter,
                len: instance.adapters().len(),
                of: "Vulkan adapters (see `crossgpu devices`)",
            })?;
            let shared = shared_queue.get(dev_no).copied().unwrap_or(false);
            let device = Device::open(&instance.native, adapter, if shared { 1 } else { queues })
                .map_err(|e| Error::native(&info.name, e))?;
            let pipelines = Arc::new(Pipelines::new(device.clone()));
            for m in 0..queues {
                let index = members.len();
                let q = if shared { 0 } else { m };
                let label = if shared {
                    format!("member {index}: {} (VkDevice {dev_no}, shared queue 0)", info.name)
                } else {
                    format!("member {index}: {} (VkDevice {dev_no}, queue {q})", info.name)
                };
                let rec = Recorder::with_max_pending(&device, q, max_in_flight)
                    .map_err(|e| Error::native(&label, e))?;
                let stream = Stream::new(rec);
                members.push(Member {
                    shared: Arc::new(MemberShared {
                        index,
                        group: id,
                        device: device.clone(),
                        queue_index: q,
                        label,
                        pipelines: pipelines.clone(),
                        stream: Mutex::new(stream),
                        binds: Mutex::new(binds::BindCache::default()),
                        timeout_ms,
                        hooks: Mutex::new(Vec::new()),
                        zero_position: std::sync::OnceLock::new(),
                        uploads: Mutex::default(),
                    }),
                });
            }
        }
        if members.is_empty() {
            return Err(Error::InvalidArgument("a group needs at least one member".into()));
        }
        log::info!(
            "opened group {:?}: {}",
            id,
            members.iter().map(|m| m.label().to_string()).collect::<Vec<_>>().join("; ")
        );
        Ok(Self { id, members, instance: instance.clone(), spec: devices.to_vec() })
    }

    /// This group's identity: tensors and communicators remember it, so one used with another
    /// group is an [`Error::WrongOwner`].
    pub fn id(&self) -> GroupId {
        self.id
    }

    /// Number of members (at least one: opening an empty group fails).
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether the group has no members (never true for an opened group).
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Member `index`, or [`Error::IndexOutOfRange`].
    pub fn member(&self, index: usize) -> Result<&Member> {
        self.members.get(index).ok_or(Error::member_index(index, self.members.len()))
    }

    /// Every member, in group order (index 0 first).
    pub fn members(&self) -> &[Member] {
        &self.members
    }

    /// The instance the group was opened from.
    pub fn instance(&self) -> &Instance {
        &self.instance
    }

    /// `(adapter index, queues)` of each VkDevice, in order.
    pub fn layout(&self) -> &[(usize, u32)] {
        &self.spec
    }

    /// Waits for every member's work.
    pub fn synchronize(&self) -> Result<()> {
        self.members.iter().try_for_each(|m| m.synchronize())
    }
}

/// Submits the open command buffers of `batch` (members sharing one queue, or one member) as
/// one batch, member `batch[k]` signalling `signals[k]`.
pub(crate) fn submit_batch<const S: usize>(
    members: &[Member],
    batch: &[usize],
    signals: &[[(&TimelineSemaphore, u64); S]],
) -> Result<()> {
    let mut guards: Vec<_> = batch.iter().map(|&j| members[j].shared.stream()).collect();
    let mut streams: Vec<&mut Stream> = guards.iter_mut().map(|g| &mut **g).collect();
    let signals: Vec<&[(&TimelineSemaphore, u64)]> = signals.iter().map(|a| &a[..]).collect();
    Stream::submit_together(&mut streams, &signals, &vec![&[][..]; batch.len()])
        .map_err(|e| members[batch[0]].shared.err(e))?;
    drop(streams);
    drop(guards);
    batch.iter().try_for_each(|&j| members[j].shared.submitted())
}
