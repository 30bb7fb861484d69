//! Embedding in wgpu applications: a `wgpu::Device` opened with the interop extensions, and a
//! borrowed member of it ([`EmbeddedMember`]) whose work — a copy into imported host memory, a
//! kernel over imported host memory and an application buffer — is recorded into the
//! application's own wgpu command encoders and submitted with the application's own
//! `wgpu::Queue::submit`, waiting and signalling timelines the caller gives. The all-reduce
//! protocol built from them is `crossgpu::embed`'s; nothing here knows rounds or phases.
//!
//! - `shared.rs`: what a member needs from its wgpu device, read once ([`Shared`]).
//! - `open.rs`: [`request_wgpu_device`], a wgpu device opened with the interop extensions.
//! - `slots.rs`: host memory imported into the device ([`EmbeddedSlots`]).
//! - `kernel.rs`: the member's compute kernels, made on the borrowed device.
//! - `claim.rs`: the application's buffer checked by wgpu before any raw command names it.
//! - `submit.rs`: how every command buffer is recorded, ordered and submitted.
//! - `work.rs`: the kinds of work: [`EmbeddedMember::submit_copy`], kernels
//!   ([`EmbeddedMember::submit_kernel`], [`EmbeddedMember::submit_dispatches`]) and a bare
//!   wait or signal ([`EmbeddedMember::submit_marker`]).
//! - `lifetimes.rs`: what a submission keeps alive, released when wgpu reports it done.

mod claim;
mod kernel;
mod lifetimes;
mod open;
mod shared;
mod slots;
mod submit;
mod work;

use std::collections::VecDeque;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use crate::error::{NativeError, Result};
use crate::host::HostAllocation;
use crate::semaphore::TimelineSemaphore;
use crate::shader::Shader;

use kernel::{make_kernel, HalKernel};
pub use open::request_wgpu_device;
use shared::Shared;
pub use slots::EmbeddedSlots;
pub use work::{BufferRange, EmbeddedDispatch};

struct Pending {
    /// wgpu's index of the submission, and whether wgpu reported it done.
    index: wgpu::SubmissionIndex,
    done: Arc<AtomicBool>,
    bind_groups: Vec<wgpu_hal::vulkan::BindGroup>,
    _buffers: Vec<wgpu::Buffer>,
    _slots: Option<EmbeddedSlots>,
    /// The timelines the submission waits on or signals.
    _timelines: Vec<TimelineSemaphore>,
}

/// One application wgpu device (and its queue), borrowed: host memory imported into it,
/// timeline semaphores on it, and two kinds of work — a copy into imported host memory and one
/// compute kernel over (imported host memory, an application buffer) — each recorded into a
/// fresh wgpu command encoder and submitted with the application's own queue, waiting and
/// signalling the timelines it is given. What the work means (the all-reduce's phases) is
/// `crossgpu::embed`'s.
pub struct EmbeddedMember {
    /// The member's kernels: the one it was made with (0), then [`EmbeddedMember::add_kernel`]'s.
    kernels: Vec<HalKernel>,
    pending: VecDeque<Pending>,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for EmbeddedMember {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddedMember").field("name", &self.shared.name).finish()
    }
}

impl EmbeddedMember {
    /// Makes `device` (opened by [`request_wgpu_device`]) and its `queue` a member, with the
    /// compute kernel `shader`, whose interface must be two storage buffers — binding 0
    /// read-only (the imported host memory), binding 1 read-write (the application's buffer) —
    /// and `immediate_bytes` of immediates.
    ///
    /// Errors: not a Vulkan device, VK_EXT_external_memory_host not enabled on it (a device
    /// from plain `request_device`), no timeline semaphores, a kernel of another interface.
    pub fn new(device: &wgpu::Device, queue: &wgpu::Queue, shader: &Shader) -> Result<Self> {
        let shared = Shared::new(device, queue)?;
        let kernel = make_kernel(&shared, shader)?;
        Ok(Self { kernels: vec![kernel], pending: VecDeque::new(), shared })
    }

    /// Adds another kernel, of the interface [`EmbeddedMember::new`]'s takes or with more
    /// read-only storage buffers after it (bindings 2 ..), and returns its index for
    /// [`EmbeddedMember::submit_dispatches`] (the kernel `new` made is 0).
    pub fn add_kernel(&mut self, shader: &Shader) -> Result<usize> {
        self.kernels.push(make_kernel(&self.shared, shader)?);
        Ok(self.kernels.len() - 1)
    }

    /// The adapter's name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// `minImportedHostPointerAlignment`.
    pub fn min_import_alignment(&self) -> u64 {
        self.shared.min_align
    }

    /// `maxStorageBufferRange`.
    pub fn max_storage_buffer_range(&self) -> u64 {
        self.shared.max_storage_range
    }

    /// A new timeline semaphore (value 0) on this member's device, for the waits and signals
    /// of [`EmbeddedMember::submit_copy`] and [`EmbeddedMember::submit_kernel`].
    pub fn timeline(&self) -> Result<TimelineSemaphore> {
        TimelineSemaphore::embedded(&self.shared)
    }

    /// Imports all of `host` into this member's device.
    pub fn import(&self, host: &Arc<HostAllocation>) -> Result<EmbeddedSlots> {
        EmbeddedSlots::import(&self.shared, host)
    }

    /// Refuses slots imported into another device (their buffer would be meaningless here).
    fn check_slots(&self, slots: &EmbeddedSlots) -> Result<()> {
        if !slots.is_of(&self.shared) {
            return Err(NativeError::Unsupported("slots imported into another device".into()));
        }
        Ok(())
    }

    /// Refuses a timeline semaphore of another device (its raw handle would be meaningless here).
    fn check_own(&self, sem: &TimelineSemaphore) -> Result<()> {
        if sem.raw_device_handle() != self.shared.raw.handle() {
            return Err(NativeError::Unsupported("a timeline semaphore of another device".into()));
        }
        Ok(())
    }
}
