//! Counts of live Vulkan objects made by this crate, so tests can show that dropping things in
//! any order leaks nothing.

use std::sync::atomic::{AtomicI64, Ordering};

pub(crate) static BUFFERS: AtomicI64 = AtomicI64::new(0);
pub(crate) static IMPORTS: AtomicI64 = AtomicI64::new(0);
pub(crate) static HOST_ALLOCATIONS: AtomicI64 = AtomicI64::new(0);
pub(crate) static SEMAPHORES: AtomicI64 = AtomicI64::new(0);
pub(crate) static KERNELS: AtomicI64 = AtomicI64::new(0);
pub(crate) static BIND_GROUPS: AtomicI64 = AtomicI64::new(0);
pub(crate) static RECORDERS: AtomicI64 = AtomicI64::new(0);
pub(crate) static RECORDINGS: AtomicI64 = AtomicI64::new(0);
pub(crate) static DEVICES: AtomicI64 = AtomicI64::new(0);

pub(crate) fn inc(c: &AtomicI64) {
    c.fetch_add(1, Ordering::Relaxed);
}

pub(crate) fn dec(c: &AtomicI64) {
    c.fetch_sub(1, Ordering::Relaxed);
}

/// Live objects of each kind in the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LiveObjects {
    /// Device-local and staging buffers.
    pub buffers: i64,
    /// Host allocations imported as buffers.
    pub imports: i64,
    /// Page-aligned host allocations ([`crate::HostAllocation`]).
    pub host_allocations: i64,
    /// Timeline and binary semaphores.
    pub semaphores: i64,
    /// Compute pipelines ([`crate::Kernel`]), one per kernel and device.
    pub kernels: i64,
    /// Bind groups ([`crate::BindGroup`]).
    pub bind_groups: i64,
    /// Command recorders (each with its command pools).
    pub recorders: i64,
    /// Logical devices (VkDevice).
    pub devices: i64,
    /// Recordings made for replay ([`crate::Replay`]), in progress or ended.
    pub recordings: i64,
}

/// A snapshot of the live-object counters.
pub fn live_objects() -> LiveObjects {
    let g = |c: &AtomicI64| c.load(Ordering::Relaxed);
    LiveObjects {
        buffers: g(&BUFFERS),
        imports: g(&IMPORTS),
        host_allocations: g(&HOST_ALLOCATIONS),
        semaphores: g(&SEMAPHORES),
        kernels: g(&KERNELS),
        bind_groups: g(&BIND_GROUPS),
        recorders: g(&RECORDERS),
        devices: g(&DEVICES),
        recordings: g(&RECORDINGS),
    }
}
