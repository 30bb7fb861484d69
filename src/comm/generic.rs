//! The Generic transport: read every partial back, sum on the host in member order in f32 on
//! the same wire values the devices would exchange (rounded to f16 first on the f16 wire), and
//! write the sum back to every member. Works on any devices; the fallback of the fast modes.

use std::time::Duration;

use vk_native::{GpuBuffer, StagingBuffer};

use super::exchange::{evaluate, Exchange};
use super::faults::FaultHooks;
use super::options::Mode;
use super::slots::HostSlots;
use super::transport::{RoundContext, RoundWork, Transport};
use crate::error::Result;
use crate::group::Member;
use crate::tensor::Tensor;

/// Generic's state, kept between rounds: per member a read-back and an upload staging buffer
/// (grown, not made per call), and the host sum.
#[derive(Default)]
pub(super) struct Generic {
    staging: Vec<(StagingBuffer, StagingBuffer)>,
    sum: Vec<f32>,
}

impl Transport for Generic {
    fn mode(&self) -> Mode {
        Mode::Generic
    }

    fn slots(&self) -> Option<&HostSlots> {
        None
    }

    /// A call is one round (no slots bound it), and nothing waits on the devices, so the round
    /// counter stays.
    fn run_round(&mut self, cx: &RoundContext<'_>, _round: &mut u64, work: &RoundWork<'_>) -> Result<()> {
        match *work {
            RoundWork::Sum { tensors, c0, n, f16_wire } => {
                debug_assert_eq!(c0, 0, "Generic runs a call in one round");
                self.sum(cx.members, tensors, n, f16_wire)
            }
            RoundWork::Exchange(x) => exchange_on_host(cx.members, x),
        }
    }

    fn regrow(&mut self, _members: &[Member], _capacity: u64, _hooks: &FaultHooks) -> Result<()> {
        Ok(())
    }

    fn release_waiters(&mut self, _round: u64) {}

    fn wind_down(&mut self, _round: u64, _healthy: bool, _timeout: Duration) {}

    /// Keeps the staging buffers until the communicator drops them, after its members are idle.
    fn retire(&mut self, _members: &[Member]) {}
}

/// A collective's round on the host: every member's sent words read back, each member's
/// tensors read back, combined as the devices would ([`evaluate`]) and written back whole.
fn exchange_on_host(members: &[Member], x: &Exchange<'_>) -> Result<()> {
    let regions = members
        .iter()
        .enumerate()
        .map(|(i, _)| match x.spec.sends[i] {
            Some(s) if s.n > 0 => {
                let (w0, words) = s.words(x.dtype);
                Ok(x.send[i].read_words()?[w0..w0 + words].to_vec())
            }
            _ => Ok(Vec::new()),
        })
        .collect::<Result<Vec<_>>>()?;
    let regions: Vec<&[u32]> = regions.iter().map(Vec::as_slice).collect();
    for (i, m) in members.iter().enumerate() {
        for dst in 0..2 {
            let places: Vec<_> = x.spec.places[i].iter().filter(|p| p.dst == dst && p.n > 0).collect();
            if places.is_empty() {
                continue;
            }
            let t = x.dst[i][dst];
            let mut image = t.read_words()?;
            for p in places {
                evaluate(x.dtype, x.scale, p, &regions, &mut image);
            }
            m.write_bytes(t, bytemuck::cast_slice(&image))?;
        }
    }
    Ok(())
}

impl Generic {
    /// Sums elements `0..n` of `tensors` in place.
    fn sum(&mut self, members: &[Member], tensors: &[&Tensor], n: usize, f16_wire: bool) -> Result<()> {
        // Every member's copy is submitted first, then one wait each.
        let bytes = n as u64 * 4;
        if self.staging.iter().any(|s| s.0.size() < bytes) || self.staging.len() != members.len() {
            self.staging = members
                .iter()
                .map(|m| {
                    let cap = bytes.next_power_of_two().max(4096);
                    let err = |e| m.shared.err(e);
                    Ok((
                        StagingBuffer::new(m.device(), cap, false).map_err(err)?,
                        StagingBuffer::new(m.device(), cap, true).map_err(err)?,
                    ))
                })
                .collect::<Result<Vec<_>>>()?;
        }
        let mut marks = Vec::with_capacity(members.len());
        for ((m, t), (down, _)) in members.iter().zip(tensors.iter()).zip(&self.staging) {
            marks.push(m.shared.read_back(&t.buffer, down, bytes)?);
        }
        let mut raw = vec![0u8; bytes as usize];
        self.sum.resize(n, 0.0);
        for (j, ((m, (down, _)), mark)) in members.iter().zip(&self.staging).zip(marks).enumerate() {
            let sh = &m.shared;
            sh.wait_value(&mut sh.stream(), mark, "an all-reduce read-back")?;
            down.read(0, &mut raw).map_err(|e| sh.err(e))?;
            let part = raw.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]));
            let part = part.map(|v| if f16_wire { crate::tensor::f16_saturating(v).to_f32() } else { v });
            if j == 0 {
                self.sum.iter_mut().zip(part).for_each(|(s, v)| *s = v);
            } else {
                self.sum.iter_mut().zip(part).for_each(|(s, v)| *s += v);
            }
        }
        let sum_bytes: &[u8] = bytemuck::cast_slice(&self.sum);
        for ((m, t), (_, up)) in members.iter().zip(tensors.iter()).zip(self.staging.iter_mut()) {
            let sh = &m.shared;
            // The previous round's copy out of `up` completed: the read-back above waited for
            // everything this member had submitted.
            up.write(0, sum_bytes).map_err(|e| sh.err(e))?;
            sh.record_copy(up, 0, &t.buffer, 0, bytes)?;
        }
        Ok(())
    }
}
