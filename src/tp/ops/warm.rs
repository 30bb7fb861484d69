//! Warming the GPU's L2 cache with the next product's weights while a dispatch that leaves
//! most of the GPU idle (a norm, attention) runs: `warm_l2.wgsl`.

use vk_native::GpuBuffer;

use crate::error::{Error, Result};
use crate::kernels::{row_groups, WarmParams, WARM_L2};
use crate::tensor::{DType, Tensor};

use super::transformer::TransformerOps;

/// Bytes one fetch brings into the cache, and the stride at which `warm_l2` reads.
const SECTOR: u64 = 32;
/// Sectors one workgroup of `warm_l2` reads.
const SECTORS_PER_GROUP: u64 = 2048;
/// What a `warm_l2` thread stores into the sink's first word where the xor of the words it read
/// equals it: the kernel's only effect, which the tests use to see which words it reads.
pub const WARM_L2_KEY: u32 = 0x9e37_79b9;
/// The most a warm reads of one buffer: far past any GPU's L2 (H200: 50 MB), and within the
/// kernel's 32-bit word index.
pub const WARM_MAX_BYTES: u64 = 1 << 30;

impl<'m> TransformerOps<'m> {
    /// Reads the first bytes of up to three tensors — `(tensor, bytes)`, each capped at the
    /// tensor's storage and at [`WARM_MAX_BYTES`] — one word per 32-byte sector, so that those
    /// lines sit in the device's last-level cache for the next command that streams them. The
    /// result is nothing: `sink` (a u32 tensor of this member, at least one element) is bound
    /// for the kernel's only store, which keeps its loads from being removed, and holds no
    /// meaning after it. (Thread t of workgroup g reads, of the tensor its workgroup covers,
    /// sectors `2048 g' + t + 256 k` for k < 8, g' its workgroup's index among that tensor's,
    /// each sector's first word; where their xor is [`WARM_L2_KEY`] it stores the key into
    /// `sink[0]` with an atomic max.)
    ///
    /// It conflicts with nothing that reads the tensors, so it gets no barrier after a
    /// dispatch that does not write them or `sink`, and runs beside it: recorded right after a
    /// norm or attention, whose one workgroup per vector or head leaves the other
    /// multiprocessors idle, it fetches the next product's first weights meanwhile. The next
    /// command with a barrier waits for it too. It changes no value anywhere.
    pub fn warm_l2(&self, tensors: &[(&Tensor, u64)], sink: &Tensor) -> Result<()> {
        if tensors.is_empty() || tensors.len() > 3 {
            return Err(Error::InvalidArgument(format!(
                "warm_l2: {} tensors; it reads one to three",
                tensors.len()
            )));
        }
        for (t, _) in tensors {
            self.own(&[(t, "warm_l2 tensor")])?;
        }
        self.own(&[(sink, "warm_l2 sink")])?;
        sink.check_dtype(DType::U32, "warm_l2 sink")?;
        if sink.is_empty() {
            return Err(Error::InvalidArgument("warm_l2: the sink has no element to store into".into()));
        }
        let sectors: Vec<u64> = tensors
            .iter()
            .map(|(t, bytes)| (*bytes).min(t.dtype().storage_bytes(t.len())).min(WARM_MAX_BYTES) / SECTOR)
            .collect();
        let groups: Vec<u64> = sectors.iter().map(|s| s.div_ceil(SECTORS_PER_GROUP)).collect();
        let total: u64 = groups.iter().sum();
        if total == 0 {
            return Ok(());
        }
        // The kernel binds three buffers; fewer tensors leave the last bound again, read for 0.
        let last = tensors[tensors.len() - 1].0;
        let bound = |i: usize| tensors.get(i).map_or(last, |(t, _)| *t);
        let count = |v: &[u64], i: usize| v.get(i).copied().unwrap_or(0) as u32;
        let params = WarmParams {
            sectors_a: count(&sectors, 0),
            sectors_b: count(&sectors, 1),
            sectors_c: count(&sectors, 2),
            groups_a: count(&groups, 0),
            groups_b: count(&groups, 1),
            key: WARM_L2_KEY,
        };
        let b: [&dyn GpuBuffer; 4] = [&bound(0).buffer, &bound(1).buffer, &bound(2).buffer, &sink.buffer];
        self.m.shared.dispatch(WARM_L2, &b, &[], &params, row_groups(total as usize))
    }
}
