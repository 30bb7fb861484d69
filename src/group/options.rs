//! [`GroupOptions`] and [`GroupId`].

use std::sync::atomic::AtomicU64;

use crate::config;
use crate::error::{Error, Result};

pub(super) static NEXT_GROUP: AtomicU64 = AtomicU64::new(1);

/// Options of a group, explicit (`DeviceGroup::open_with`, `open_devices`) or from the
/// environment ([`GroupOptions::from_env`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupOptions {
    /// Bound on every wait for a member's device, in ms (`CROSSGPU_TIMEOUT_MS`, 1 ms to one
    /// day).
    pub timeout_ms: u64,
    /// Submits a member's stream keeps in flight before recording waits for the oldest
    /// (`CROSSGPU_MAX_IN_FLIGHT`, 1 to 65536); each holds a command pool.
    pub max_in_flight: usize,
}

impl Default for GroupOptions {
    fn default() -> Self {
        Self { timeout_ms: config::TIMEOUT_MS.0, max_in_flight: config::MAX_IN_FLIGHT.0 as usize }
    }
}

impl GroupOptions {
    /// `CROSSGPU_TIMEOUT_MS` and `CROSSGPU_MAX_IN_FLIGHT`, the defaults where unset; a value
    /// crossgpu cannot use is an error naming the variable.
    pub fn from_env() -> Result<Self> {
        Ok(Self {
            timeout_ms: config::timeout_ms_from_env()?,
            max_in_flight: config::max_in_flight_from_env()?,
        })
    }

    /// Refuses values outside the ranges the variables allow.
    pub(super) fn validate(&self) -> Result<()> {
        let check = |what: &str, v: u64, range: std::ops::RangeInclusive<u64>| {
            if range.contains(&v) {
                Ok(())
            } else {
                Err(Error::InvalidArgument(format!(
                    "GroupOptions::{what} {v}: must be between {} and {}",
                    range.start(),
                    range.end()
                )))
            }
        };
        check("timeout_ms", self.timeout_ms, config::TIMEOUT_MS.1)?;
        check("max_in_flight", self.max_in_flight as u64, config::MAX_IN_FLIGHT.1)
    }
}

/// Identity of a group, unique in the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GroupId(pub u64);
