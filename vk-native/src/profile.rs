//! GPU time per recorded command, from timestamp queries: a [`Recorder`](crate::Recorder)
//! with a profile writes a timestamp after every dispatch and copy, so the time between two
//! stamps is what that command added to the queue's timeline (its run, the barrier before it
//! and any idle gap, such as a wait for a semaphore the submit carried).

use std::sync::Arc;

use ash::vk;

use crate::device::Device;
use crate::error::{map_vk, NativeError, Result};

/// A Vulkan timestamp query pool of one device.
pub(crate) struct QueryPool {
    device: Device,
    pub(crate) raw: vk::QueryPool,
    pub(crate) capacity: u32,
}

impl QueryPool {
    fn new(device: &Device, capacity: u32) -> Result<Self> {
        let info =
            vk::QueryPoolCreateInfo::default().query_type(vk::QueryType::TIMESTAMP).query_count(capacity);
        // SAFETY: a valid device and create info; the pool is destroyed in Drop, after every
        // command buffer that uses it completed (the recorder keeps it alive until then).
        let raw =
            unsafe { device.raw().create_query_pool(&info, None) }.map_err(map_vk("vkCreateQueryPool"))?;
        Ok(Self { device: device.clone(), raw, capacity })
    }

    /// The first `count` timestamps, waiting until they are written.
    fn read(&self, count: u32) -> Result<Vec<u64>> {
        let mut out = vec![0u64; count as usize];
        if count == 0 {
            return Ok(out);
        }
        // SAFETY: queries 0..count were reset and written by submitted command buffers of this
        // device (the caller waited for them: WAIT only guards against a late write).
        unsafe {
            self.device.raw().get_query_pool_results(
                self.raw,
                0,
                &mut out,
                vk::QueryResultFlags::TYPE_64 | vk::QueryResultFlags::WAIT,
            )
        }
        .map_err(map_vk("vkGetQueryPoolResults"))?;
        Ok(out)
    }
}

impl Drop for QueryPool {
    fn drop(&mut self) {
        // SAFETY: no command buffer that uses the pool is pending (they keep it alive).
        unsafe { self.device.raw().destroy_query_pool(self.raw, None) };
    }
}

/// What a recorder's profile collected since it was started or last taken.
pub(crate) struct Profile {
    pub(crate) pool: Arc<QueryPool>,
    /// The command each stamp after the first ends (kernel names, "copy").
    pub(crate) names: Vec<Arc<str>>,
    /// Stamps written (the first marks the start).
    pub(crate) used: u32,
    period_ns: f64,
}

impl Profile {
    pub(crate) fn new(device: &Device, capacity: u32) -> Result<Self> {
        let period_ns = f64::from(device.info().caps.timestamp_period_ns);
        if period_ns <= 0.0 {
            return Err(NativeError::Unsupported(format!(
                "{} has no timestamps on its compute queues",
                device.info().name
            )));
        }
        if capacity < 2 {
            return Err(NativeError::Unsupported("a profile needs room for two timestamps".into()));
        }
        Ok(Self { pool: Arc::new(QueryPool::new(device, capacity)?), names: Vec::new(), used: 0, period_ns })
    }

    /// Nanoseconds each command added, in recording order, once the GPU wrote every stamp;
    /// the profile then starts over.
    pub(crate) fn take(&mut self) -> Result<Vec<(Arc<str>, f64)>> {
        let stamps = self.pool.read(self.used)?;
        let out = self
            .names
            .drain(..)
            .zip(stamps.windows(2))
            .map(|(name, w)| (name, w[1].wrapping_sub(w[0]) as f64 * self.period_ns))
            .collect();
        self.used = 0;
        Ok(out)
    }
}
