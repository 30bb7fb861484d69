//! The phase primitives every slot-based transport records, the same on each so that every
//! member adds the same wire values in the same order: phase A (a member's partial into its
//! region of a slot entry), phase B's sum (every member's region, in member order), and the
//! release of slots before new ones. Used by the two-phase transports (`two_phase.rs`),
//! DevicePoll (`poll/`) and the shared-memory path between ranks (`ranks/shared.rs`).

use vk_native::{BindRange, Buffer, BufferId, BufferUsage, GpuBuffer};

use super::options::CommOptions;
use super::slots::HostSlots;
use crate::error::Result;
use crate::group::Member;
use crate::kernels::{
    elementwise_groups, CopyParams, ReduceSlotsParams, COPY_U32, F32_TO_F16, REDUCE_SLOTS_F16,
    REDUCE_SLOTS_F32,
};
use crate::tensor::Tensor;

/// Drops `slots` and every member's `scratch` buffer, and every cached bind group over them:
/// what both two-phase transports (semaphore-released and DevicePoll) do before new slots.
pub(crate) fn forget_slots(
    members: &[Member],
    slots: &mut Option<HostSlots>,
    scratch: &mut [Option<Buffer>],
) {
    if let Some(old) = slots.take() {
        for (m, b) in members.iter().zip(&old.imports) {
            m.shared.forget_buffer(b.id());
        }
    }
    for (m, b) in members.iter().zip(scratch.iter_mut()) {
        if let Some(b) = b.take() {
            m.shared.forget_buffer(b.id());
        }
    }
}

/// Records phase A of member `i`: elements `c0..c0 + n` of `t` (its partial), as f32 or
/// converted to f16, into its region of slot entry `e`: by a kernel storing straight into host
/// memory up to `opts.phase_a_kernel_bytes`, else through the copy engine (the f16 wire first
/// converts into `scratch`, device memory made or grown here). The caller records the barrier
/// that makes it visible to the host.
#[allow(clippy::too_many_arguments)]
pub(crate) fn record_phase_a(
    m: &Member,
    i: usize,
    t: &Tensor,
    slots: &HostSlots,
    e: u64,
    scratch: &mut Option<Buffer>,
    opts: &CommOptions,
    c0: usize,
    n: usize,
    f16_wire: bool,
) -> Result<()> {
    let sh = &m.shared;
    let slot = slots.import(i);
    let words = if f16_wire { n.div_ceil(2) } else { n } as u64;
    if words * 4 <= opts.phase_a_kernel_bytes {
        // A kernel stores straight into this member's region of the entry.
        let (region, at) = slots.own_region(i, e);
        let entry = if f16_wire { F32_TO_F16 } else { COPY_U32 };
        sh.dispatch_ranges(
            entry,
            &[BindRange::whole(&t.buffer), region],
            &[],
            &CopyParams { n: n as u32, src_offset: c0 as u32, dst_offset: at as u32 },
            elementwise_groups(words as usize),
        )
    } else if f16_wire {
        // Convert into device memory, then let the copy engine write the host slot.
        let need = slots.capacity * 4;
        if scratch.as_ref().is_none_or(|b| b.size() < need) {
            if let Some(old) = scratch.take() {
                sh.forget_buffer(old.id());
            }
            let usage = BufferUsage { copy_src: true, copy_dst: false };
            *scratch =
                Some(Buffer::new(&sh.device, need, usage, "crossgpu f16 wire").map_err(|e| sh.err(e))?);
        }
        let scratch = scratch.as_ref().expect("made above");
        sh.dispatch(
            F32_TO_F16,
            &[&t.buffer, scratch],
            &[],
            &CopyParams { n: n as u32, src_offset: c0 as u32, dst_offset: 0 },
            elementwise_groups(words as usize),
        )?;
        sh.record_copy(scratch, 0, slot, slots.region_bytes(i, e), words * 4)
    } else {
        sh.record_copy(&t.buffer, c0 as u64 * 4, slot, slots.region_bytes(i, e), words * 4)
    }
}

/// Records phase B's sum on member `i` of `nm`: every member's wire values of slot entry `e`,
/// in member order, into elements `c0..c0 + n` of `t`. `after` are buffers the sum must wait
/// for (hazard tracking places the barrier).
#[allow(clippy::too_many_arguments)]
pub(crate) fn record_reduce(
    m: &Member,
    i: usize,
    nm: usize,
    t: &Tensor,
    slots: &HostSlots,
    e: u64,
    c0: usize,
    n: usize,
    f16_wire: bool,
    after: &[BufferId],
) -> Result<()> {
    let sh = &m.shared;
    let words = if f16_wire { n.div_ceil(2) } else { n };
    let entry = if f16_wire { REDUCE_SLOTS_F16 } else { REDUCE_SLOTS_F32 };
    // The kernel reads the peers' slots straight from host memory with 16-byte loads
    // (docs/BENCHMARKS.md: faster than staging them through device memory first).
    let (binding, at) = slots.entry(i, e);
    let imm = ReduceSlotsParams {
        n: n as u32,
        members: nm as u32,
        stride: slots.layout.stride as u32,
        offset: at as u32,
        dst_offset: c0 as u32,
        self_index: i as u32,
    };
    // reduce_slots reads 4 words per thread and step (vec4 loads).
    sh.dispatch_ranges(
        entry,
        &[binding, BindRange::whole(&t.buffer)],
        after,
        &imm,
        elementwise_groups(words.div_ceil(4)),
    )
}
