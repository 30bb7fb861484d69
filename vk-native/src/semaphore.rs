//! Timeline semaphores signalled and waited from the host, and binary semaphores whose payload
//! travels between devices as a SYNC_FD.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use ash::vk;

use crate::device::Device;
use crate::error::{map_vk, NativeError, Result};

/// Host-side operations on a raw timeline semaphore of the device `raw`: the one implementation
/// behind [`TimelineSemaphore`], on crossgpu's devices and on the wgpu embedding's. The callers
/// map the `vk::Result` (a device-owning caller also records device loss).
pub(crate) mod timeline {
    use ash::vk;

    /// Creates a timeline semaphore starting at `initial`.
    ///
    /// # Safety
    /// `raw` must be a live device with the timeline-semaphore feature enabled; the caller
    /// destroys the semaphore.
    pub(crate) unsafe fn create(raw: &ash::Device, initial: u64) -> ash::prelude::VkResult<vk::Semaphore> {
        let mut ty = vk::SemaphoreTypeCreateInfo::default()
            .semaphore_type(vk::SemaphoreType::TIMELINE)
            .initial_value(initial);
        let info = vk::SemaphoreCreateInfo::default().push_next(&mut ty);
        // SAFETY: the caller's contract.
        unsafe { raw.create_semaphore(&info, None) }
    }

    /// The current counter value.
    ///
    /// # Safety
    /// `sem` must be a live timeline semaphore of `raw`.
    pub(crate) unsafe fn value(raw: &ash::Device, sem: vk::Semaphore) -> ash::prelude::VkResult<u64> {
        // SAFETY: the caller's contract.
        unsafe { raw.get_semaphore_counter_value(sem) }
    }

    /// Signals `value` from the host.
    ///
    /// # Safety
    /// As [`value`].
    pub(crate) unsafe fn signal(
        raw: &ash::Device,
        sem: vk::Semaphore,
        value: u64,
    ) -> ash::prelude::VkResult<()> {
        let info = vk::SemaphoreSignalInfo::default().semaphore(sem).value(value);
        // SAFETY: the caller's contract.
        unsafe { raw.signal_semaphore(&info) }
    }

    /// Blocks until the counter reaches `value` or `timeout_ns` passes; `Ok(false)` on timeout.
    ///
    /// # Safety
    /// As [`value`].
    pub(crate) unsafe fn wait(
        raw: &ash::Device,
        sem: vk::Semaphore,
        value: u64,
        timeout_ns: u64,
    ) -> ash::prelude::VkResult<bool> {
        let sems = [sem];
        let values = [value];
        let info = vk::SemaphoreWaitInfo::default().semaphores(&sems).values(&values);
        // SAFETY: the caller's contract.
        match unsafe { raw.wait_semaphores(&info, timeout_ns) } {
            Ok(()) => Ok(true),
            Err(vk::Result::TIMEOUT) => Ok(false),
            Err(e) => Err(e),
        }
    }
}

/// The VkDevice a timeline semaphore belongs to, kept alive by the semaphore: a crossgpu
/// [`Device`], or a `wgpu::Device` the embedding borrows (`crate::embed`).
pub(crate) trait SemaphoreOwner: Send + Sync {
    /// The device's function table.
    fn raw_device(&self) -> &ash::Device;
    /// Records what a failed call says about the device (a crossgpu device remembers loss).
    fn note(&self, e: NativeError) -> NativeError {
        e
    }
}

impl SemaphoreOwner for Device {
    fn raw_device(&self) -> &ash::Device {
        self.raw()
    }
    fn note(&self, e: NativeError) -> NativeError {
        Device::note(self, e)
    }
}

struct TimelineInner {
    owner: Arc<dyn SemaphoreOwner>,
    raw: vk::Semaphore,
    /// Set once a submission signals the semaphore: from then on the host cannot know its
    /// pending values, so a host signal can no longer be checked (see `signal`).
    gpu_signalled: AtomicBool,
    /// Serialises host signals, so the check of the current value and the signal are one step.
    host_signal: Mutex<()>,
}

impl Drop for TimelineInner {
    fn drop(&mut self) {
        crate::live::dec(&crate::live::SEMAPHORES);
        // SAFETY: every pending submission that waits on or signals this semaphore holds a clone
        // (see `Recorder`; the embedding waits for its submissions before it drops them), so
        // none is pending now.
        unsafe { self.owner.raw_device().destroy_semaphore(self.raw, None) };
    }
}

/// A timeline semaphore. Clones share it.
#[derive(Clone)]
pub struct TimelineSemaphore(Arc<TimelineInner>);

impl std::fmt::Debug for TimelineSemaphore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("TimelineSemaphore").field(&self.0.raw).finish()
    }
}

impl TimelineSemaphore {
    /// A timeline semaphore of `device` whose counter starts at `initial`. Fails with
    /// [`NativeError::MissingExtension`] when the device has no timeline semaphores.
    pub fn new(device: &Device, initial: u64) -> Result<Self> {
        if !device.info().caps.timeline_semaphore {
            return Err(NativeError::MissingExtension("timeline semaphores"));
        }
        // SAFETY: timeline semaphores are enabled (wgpu-hal enables the feature where present,
        // checked above).
        unsafe { Self::with_owner(Arc::new(device.clone()), initial) }
    }

    /// A timeline semaphore of `owner`'s device, destroyed when the last clone drops.
    ///
    /// # Safety
    /// `owner`'s device must have the timelineSemaphore feature enabled.
    pub(crate) unsafe fn with_owner(owner: Arc<dyn SemaphoreOwner>, initial: u64) -> Result<Self> {
        // SAFETY: the caller's promise; the semaphore is destroyed in TimelineInner::drop,
        // while `owner` keeps the device alive.
        let raw =
            unsafe { timeline::create(owner.raw_device(), initial) }.map_err(map_vk("vkCreateSemaphore"))?;
        crate::live::inc(&crate::live::SEMAPHORES);
        Ok(Self(Arc::new(TimelineInner {
            owner,
            raw,
            gpu_signalled: AtomicBool::new(false),
            host_signal: Mutex::new(()),
        })))
    }

    /// The current counter value.
    pub fn value(&self) -> Result<u64> {
        // SAFETY: live timeline semaphore of this device.
        unsafe { timeline::value(self.0.owner.raw_device(), self.0.raw) }
            .map_err(|e| self.0.owner.note(map_vk("vkGetSemaphoreCounterValue")(e)))
    }

    /// Signals `value` from the host, after checking what Vulkan requires of it: the value must
    /// exceed the current one (VUID-VkSemaphoreSignalInfo-value-03258) and every value a pending
    /// signal operation will set, which the host can only know for a semaphore no submission
    /// has signalled. So this refuses, with [`NativeError::Unsupported`], a value not above the
    /// current one and any semaphore a submission signals (a [`Recorder`](crate::Recorder)'s or
    /// the embedding's); such a semaphore is only waited on from the host. Host signals of one
    /// semaphore are serialised, so two threads cannot both pass the check with one value.
    pub fn signal(&self, value: u64) -> Result<()> {
        if self.0.gpu_signalled.load(Ordering::Acquire) {
            return Err(NativeError::Unsupported(
                "host signal of a timeline semaphore that submissions signal: its pending values are unknown to the host".into(),
            ));
        }
        let _one_at_a_time = self.0.host_signal.lock().unwrap_or_else(|p| p.into_inner());
        let current = self.value()?;
        if value <= current {
            return Err(NativeError::Unsupported(format!(
                "host signal of {value} on a timeline semaphore already at {current}: the value must increase"
            )));
        }
        // SAFETY: checked above: the value increases and no submission signals this semaphore.
        unsafe { self.signal_unchecked(value) }
    }

    /// Signals `value` from the host without the checks of [`TimelineSemaphore::signal`].
    ///
    /// # Safety
    /// `value` must exceed the semaphore's current value and every value a pending signal
    /// operation will set (Vulkan: VUID-VkSemaphoreSignalInfo-value-03258); the validation
    /// layer reports a violation, the driver's behaviour is undefined.
    pub unsafe fn signal_unchecked(&self, value: u64) -> Result<()> {
        // SAFETY: live timeline semaphore of this device; the value rule is the caller's.
        unsafe { timeline::signal(self.0.owner.raw_device(), self.0.raw, value) }
            .map_err(|e| self.0.owner.note(map_vk("vkSignalSemaphore")(e)))
    }

    /// Records that a submission signals this semaphore (host signals are refused from then).
    pub(crate) fn mark_gpu_signalled(&self) {
        self.0.gpu_signalled.store(true, Ordering::Release);
    }

    /// Blocks until the counter reaches `value` or `timeout_ns` passes; `Ok(false)` on timeout.
    pub fn wait(&self, value: u64, timeout_ns: u64) -> Result<bool> {
        // SAFETY: live timeline semaphore of this device.
        unsafe { timeline::wait(self.0.owner.raw_device(), self.0.raw, value, timeout_ns) }
            .map_err(|e| self.0.owner.note(map_vk("vkWaitSemaphores")(e)))
    }

    pub(crate) fn raw(&self) -> vk::Semaphore {
        self.0.raw
    }

    /// The VkDevice the semaphore belongs to.
    pub(crate) fn raw_device_handle(&self) -> vk::Device {
        self.0.owner.raw_device().handle()
    }

    pub(crate) fn keep_alive(&self) -> Arc<dyn std::any::Any + Send + Sync> {
        self.0.clone()
    }
}

/// A SYNC_FD payload exported from a semaphore ([`SyncFdSemaphore::export`]); no other code can
/// make one, so [`SyncFdSemaphore::import`] only ever receives a payload the driver produced
/// (what Vulkan requires of an imported sync file) and may stay a safe function. An fd of -1
/// from the driver means "already signalled" and is kept as no fd; dropping closes the fd.
#[derive(Debug)]
pub struct SyncFd(Option<OwnedFd>);

impl SyncFd {
    /// Whether the driver reported the signal as already completed (exported fd -1).
    pub fn is_signalled(&self) -> bool {
        self.0.is_none()
    }

    /// Duplicates the fd (a signalled payload stays signalled).
    pub fn try_clone(&self) -> Result<Self> {
        match &self.0 {
            None => Ok(Self(None)),
            Some(fd) => fd
                .try_clone()
                .map(|f| Self(Some(f)))
                .map_err(|e| NativeError::Unsupported(format!("dup(sync_fd): {e}"))),
        }
    }
}

struct BinaryInner {
    device: Device,
    raw: vk::Semaphore,
    state: std::sync::Mutex<BinaryState>,
}

/// What Vulkan requires before an export or an import, as the submissions left it.
#[derive(Default)]
pub(crate) struct BinaryState {
    /// A signal was submitted and not exported yet (an export needs one).
    signal_submitted: bool,
    /// The latest submission that waited on or signalled the semaphore: the submitting
    /// recorder's progress timeline and the value it reaches when that submission completed
    /// (an import needs it completed).
    last_use: Option<(TimelineSemaphore, u64)>,
}

impl Drop for BinaryInner {
    fn drop(&mut self) {
        crate::live::dec(&crate::live::SEMAPHORES);
        // SAFETY: pending submissions hold a clone, so none uses it now.
        unsafe { self.device.raw().destroy_semaphore(self.raw, None) };
    }
}

/// A binary semaphore exportable as SYNC_FD, and into which a SYNC_FD can be imported
/// temporarily (the import lasts for the next wait only).
#[derive(Clone)]
pub struct SyncFdSemaphore(Arc<BinaryInner>);

impl SyncFdSemaphore {
    /// A binary semaphore of `device` exportable as SYNC_FD. Fails with
    /// [`NativeError::MissingExtension`] unless the device offers SYNC_FD export and import
    /// ([`Device::has_sync_fd`]).
    pub fn new(device: &Device) -> Result<Self> {
        if !device.has_sync_fd() {
            return Err(NativeError::MissingExtension(
                "VK_KHR_external_semaphore_fd with SYNC_FD export and import",
            ));
        }
        let mut export = vk::ExportSemaphoreCreateInfo::default()
            .handle_types(vk::ExternalSemaphoreHandleTypeFlags::SYNC_FD);
        let info = vk::SemaphoreCreateInfo::default().push_next(&mut export);
        // SAFETY: the extension is enabled on this device.
        let raw =
            unsafe { device.raw().create_semaphore(&info, None) }.map_err(map_vk("vkCreateSemaphore"))?;
        crate::live::inc(&crate::live::SEMAPHORES);
        Ok(Self(Arc::new(BinaryInner { device: device.clone(), raw, state: Default::default() })))
    }

    fn state(&self) -> std::sync::MutexGuard<'_, BinaryState> {
        self.0.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Notes a submission (completing when `progress` reaches `value`) that waits on the
    /// semaphore, or signals it when `signal`; returns the state before, for
    /// [`SyncFdSemaphore::restore`] if the submit fails.
    pub(crate) fn note_submitted(
        &self,
        progress: &TimelineSemaphore,
        value: u64,
        signal: bool,
    ) -> BinaryState {
        let mut st = self.state();
        let before = BinaryState { signal_submitted: st.signal_submitted, last_use: st.last_use.clone() };
        st.last_use = Some((progress.clone(), value));
        if signal {
            st.signal_submitted = true;
        }
        before
    }

    /// Puts back the state from before a submit that failed.
    pub(crate) fn restore(&self, before: BinaryState) {
        *self.state() = before;
    }

    /// Exports the payload of the signal operation last submitted, as a SYNC_FD; the semaphore
    /// is unsignalled again afterwards. Fails with [`NativeError::Unsupported`] when no signal
    /// was submitted since the last export (Vulkan requires one pending or done).
    pub fn export(&self) -> Result<SyncFd> {
        let mut st = self.state();
        if !st.signal_submitted {
            return Err(NativeError::Unsupported(
                "SYNC_FD export of a semaphore with no submitted signal".into(),
            ));
        }
        let loader = self
            .0
            .device
            .shared
            .semaphore_fd
            .as_ref()
            .ok_or(NativeError::MissingExtension("VK_KHR_external_semaphore_fd"))?;
        let info = vk::SemaphoreGetFdInfoKHR::default()
            .semaphore(self.0.raw)
            .handle_type(vk::ExternalSemaphoreHandleTypeFlags::SYNC_FD);
        // SAFETY: the semaphore was created exportable as SYNC_FD and a signal of it was
        // submitted (checked above).
        let fd = unsafe { loader.get_semaphore_fd(&info) }.map_err(map_vk("vkGetSemaphoreFdKHR"))?;
        st.signal_submitted = false;
        // SAFETY: a non-negative fd returned by the driver is owned by us from now on.
        Ok(SyncFd((fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) })))
    }

    /// Imports `fd` temporarily; the next submission that waits on this semaphore waits for it.
    /// Ownership of the fd passes to the driver on success. Fails with
    /// [`NativeError::Unsupported`] while a submission that waits on or signals the semaphore
    /// has not completed (Vulkan forbids importing into a semaphore in use); the fd is closed.
    pub fn import(&self, fd: SyncFd) -> Result<()> {
        let st = self.state();
        if let Some((progress, value)) = &st.last_use {
            if progress.value()? < *value {
                return Err(NativeError::Unsupported(
                    "SYNC_FD import into a semaphore that a pending submission still uses".into(),
                ));
            }
        }
        let loader = self
            .0
            .device
            .shared
            .semaphore_fd
            .as_ref()
            .ok_or(NativeError::MissingExtension("VK_KHR_external_semaphore_fd"))?;
        let raw_fd = fd.0.as_ref().map_or(-1, |f| f.as_raw_fd());
        let info = vk::ImportSemaphoreFdInfoKHR::default()
            .semaphore(self.0.raw)
            .flags(vk::SemaphoreImportFlags::TEMPORARY)
            .handle_type(vk::ExternalSemaphoreHandleTypeFlags::SYNC_FD)
            .fd(raw_fd);
        // SAFETY: no pending submission uses the semaphore (checked above, under the state lock;
        // a submit notes its use under that lock before it reaches the queue); on success the
        // driver owns the fd, so we forget our OwnedFd.
        unsafe { loader.import_semaphore_fd(&info) }.map_err(map_vk("vkImportSemaphoreFdKHR"))?;
        if let Some(f) = fd.0 {
            std::mem::forget(f);
        }
        Ok(())
    }

    pub(crate) fn raw(&self) -> vk::Semaphore {
        self.0.raw
    }

    pub(crate) fn keep_alive(&self) -> Arc<dyn std::any::Any + Send + Sync> {
        self.0.clone()
    }
}
