//! The collectives beside the f32 sum on the application's own wgpu buffers: all-gather,
//! reduce-scatter, broadcast, reduce, and all-reduce with any [`ReduceOp`] over f32, f16, bf16,
//! i32 and u32 — the rounds [`Comm`](crate::Comm)'s collectives plan (`crate::comm::collectives`,
//! `crate::comm::exchange`), run as the embedding's sum runs its own: phase A copies each
//! member's share into its region of the host slots and signals `done`; the bridge releases
//! `go` once every member's phase A is done; phase B runs `combine_slots.wgsl` on each member
//! over the slots and the member's buffers. So every member ends with bitwise the same result,
//! by the same rules as `Comm`'s (the kernel is the same), and the ordering contract of
//! [`crate::embed`] holds unchanged.

use vk_native::{BufferRange, EmbeddedDispatch};

use super::WgpuComm;
use crate::comm::collectives::Collective;
use crate::comm::exchange::{kind_code, per_word, RoundSpec};
use crate::error::{Error, Result};
use crate::kernels::{CombineSlotsParams, ImmediateWords};
use crate::tensor::DType;
use crate::ReduceOp;

/// A tensor in an application's `wgpu::Buffer`: `len` elements of `dtype` from byte `offset`
/// (a multiple of 4; for binding, crossgpu aligns down to `minStorageBufferOffsetAlignment`
/// itself). The buffer needs [`REQUIRED_USAGE`](super::REQUIRED_USAGE), and must hold the
/// tensor's last element's whole 32-bit word (an f16 tensor of odd length: two bytes more,
/// which a collective reads and writes back unchanged).
#[derive(Debug, Clone, Copy)]
pub struct WgpuTensor<'a> {
    /// The buffer, of its member's device.
    pub buffer: &'a wgpu::Buffer,
    /// Where the tensor starts, in bytes.
    pub offset: u64,
    /// Its elements.
    pub len: usize,
    /// Their type.
    pub dtype: DType,
}

impl<'a> WgpuTensor<'a> {
    /// `len` elements of `dtype` from the start of `buffer`.
    pub fn new(buffer: &'a wgpu::Buffer, len: usize, dtype: DType) -> Self {
        Self { buffer, offset: 0, len, dtype }
    }

    /// The bytes from `offset` to the end of the tensor's last word (saturating: a length no
    /// buffer holds is refused by [`WgpuComm`]'s checks before it is used).
    fn word_bytes(&self) -> u64 {
        (self.len.div_ceil(per_word(self.dtype)) as u64).saturating_mul(4)
    }
}

impl WgpuComm {
    /// All-gather (NCCL's allgather and allgatherv): member i's `recv[i]` ends with every
    /// member's `send[j]` in member order; shares may differ and be empty; every `recv[i]`
    /// holds their total. Any dtype, one for all; the words travel as stored. A receive tensor
    /// may not overlap its member's send tensor.
    ///
    /// As [`WgpuComm::all_reduce`]: checked before any work is submitted (counts, dtypes,
    /// lengths, buffers, usages, devices), returns once submitted, poisons on a later failure.
    pub fn all_gather(&mut self, send: &[WgpuTensor<'_>], recv: &[WgpuTensor<'_>]) -> Result<()> {
        self.collective(Collective::AllGather, send, recv)
    }

    /// Reduce-scatter: the send tensors (one length) reduced with `op` in member order; member
    /// i's `recv[i]` ends with its segment of the result (segments in member order, as long as
    /// the receive tensors, which together hold a send tensor's elements). Arithmetic as
    /// [`ReduceOp`] documents for [`Comm`](crate::Comm).
    pub fn reduce_scatter(
        &mut self,
        send: &[WgpuTensor<'_>],
        recv: &[WgpuTensor<'_>],
        op: ReduceOp,
    ) -> Result<()> {
        self.collective(Collective::ReduceScatter(op), send, recv)
    }

    /// Broadcast, in place: every member's tensor ends with bitwise the root member's.
    pub fn broadcast(&mut self, tensors: &[WgpuTensor<'_>], root: usize) -> Result<()> {
        self.collective(Collective::Broadcast { root }, tensors, tensors)
    }

    /// Reduce, in place on the root: its tensor ends with the reduction of every member's
    /// with `op` (bitwise what [`WgpuComm::all_reduce_op`] gives); the others' stay.
    pub fn reduce(&mut self, tensors: &[WgpuTensor<'_>], root: usize, op: ReduceOp) -> Result<()> {
        self.collective(Collective::Reduce { root, op }, tensors, tensors)
    }

    /// All-reduce in place with `op` over f32, f16, bf16, i32 or u32 tensors: the f32 sum of
    /// tensors at binding-aligned offsets is [`WgpuComm::all_reduce_ranges`]' path; everything
    /// else goes through the combine kernel (the f32 sum there adds in the same order, to the
    /// same bits).
    pub fn all_reduce_op(&mut self, tensors: &[WgpuTensor<'_>], op: ReduceOp) -> Result<()> {
        let aligned = tensors
            .iter()
            .enumerate()
            .all(|(i, t)| i < self.devices.len() && t.offset.is_multiple_of(self.storage_offset_align(i)));
        let f32_sum = op == ReduceOp::Sum && aligned && tensors.iter().all(|t| t.dtype == DType::F32);
        if f32_sum && tensors.len() == self.members.len() {
            self.check_tensors(Collective::AllReduce(op), tensors, tensors)?;
            let ranges: Vec<(&wgpu::Buffer, u64)> = tensors.iter().map(|t| (t.buffer, t.offset)).collect();
            return self.all_reduce_ranges(&ranges, tensors[0].len);
        }
        self.collective(Collective::AllReduce(op), tensors, tensors)
    }

    /// Checks a call before anything is submitted; returns its dtype.
    fn check_tensors(
        &self,
        c: Collective,
        send: &[WgpuTensor<'_>],
        recv: &[WgpuTensor<'_>],
    ) -> Result<DType> {
        self.check_healthy()?;
        let name = c.name();
        let n = self.members.len();
        for (what, ts) in [("send tensor", send), ("receive tensor", recv)] {
            if ts.len() != n {
                return Err(Error::LengthMismatch {
                    what: format!("{name}: one {what} per member"),
                    expected: n,
                    got: ts.len(),
                });
            }
            for (i, t) in ts.iter().enumerate() {
                if !t.offset.is_multiple_of(4) {
                    return Err(Error::InvalidArgument(format!(
                        "{name} {what} {i} starts at byte {}: a tensor starts at a multiple of 4",
                        t.offset
                    )));
                }
                if t.offset.checked_add(t.word_bytes()).is_none_or(|end| end > t.buffer.size()) {
                    return Err(Error::LengthMismatch {
                        what: format!(
                            "{name} {what} {i} (bytes of its buffer, to the end of its last word from byte {})",
                            t.offset
                        ),
                        expected: t.offset.saturating_add(t.word_bytes()) as usize,
                        got: t.buffer.size() as usize,
                    });
                }
                if t.len > 0 {
                    self.check_tensor(i, t)?;
                }
            }
        }
        if !c.in_place() {
            let overlap = |s: &WgpuTensor<'_>, r: &WgpuTensor<'_>| {
                s.buffer == r.buffer
                    && s.offset < r.offset + r.word_bytes()
                    && r.offset < s.offset + s.word_bytes()
            };
            if let Some(i) = (0..n).find(|&i| overlap(&send[i], &recv[i])) {
                return Err(Error::InvalidArgument(format!(
                    "{name}: member {i}'s receive tensor overlaps its send tensor; give it memory of its own"
                )));
            }
        }
        let dtypes: Vec<DType> = send.iter().chain(recv).map(|t| t.dtype).collect();
        let lens = |ts: &[WgpuTensor<'_>]| ts.iter().map(|t| t.len).collect::<Vec<_>>();
        c.check(&dtypes, &lens(send), &lens(recv))
    }

    /// Checks, through wgpu's validation, that member `i`'s device can bind every word of `t`
    /// (in pieces no larger than a round binds).
    fn check_tensor(&self, i: usize, t: &WgpuTensor<'_>) -> Result<()> {
        let align = self.storage_offset_align(i);
        let end = t.offset + t.word_bytes();
        let piece = (self.chunk_words()? as u64 * 4 / align * align).max(align);
        let mut at = t.offset / align * align;
        while at < end {
            let bytes = piece.min(end - at);
            self.check_buffer(i, t.buffer, at, bytes)?;
            at += bytes;
        }
        Ok(())
    }

    /// Runs collective `c` in rounds of at most the slots' capacity each.
    fn collective(&mut self, c: Collective, send: &[WgpuTensor<'_>], recv: &[WgpuTensor<'_>]) -> Result<()> {
        let dtype = self.check_tensors(c, send, recv)?;
        let send_lens: Vec<usize> = send.iter().map(|t| t.len).collect();
        let recv_lens: Vec<usize> = recv.iter().map(|t| t.len).collect();
        let extent = c.extent(&send_lens);
        if extent == 0 {
            return Ok(());
        }
        let per = per_word(dtype);
        let chunk = self.chunk_words()? * per;
        // The slots for the largest round, before anything is submitted (a failure here
        // writes nothing and does not poison).
        self.ensure_slots(chunk.min(extent).div_ceil(per))?;
        for c0 in (0..extent).step_by(chunk) {
            let spec = c.round(&send_lens, &recv_lens, c0, chunk.min(extent - c0));
            self.exchange_round(dtype, &spec, send, recv)
                .inspect_err(|e| self.poisoned = Some(e.to_string()))?;
        }
        Ok(())
    }

    /// One round: phase A's copies (or bare `done` signals), the bridge, phase B's combines
    /// (or bare waits on `go`), in that order on every member as the sum's.
    fn exchange_round(
        &mut self,
        dtype: DType,
        spec: &RoundSpec,
        send: &[WgpuTensor<'_>],
        recv: &[WgpuTensor<'_>],
    ) -> Result<()> {
        self.ensure_slots(spec.words(dtype).max(1))?;
        let slots = self.slots.as_ref().expect("made above");
        let (layout, imports) = (slots.layout, slots.imports.clone());
        let round = self.round + 1;
        let half = round % 2;
        // From here on a failure leaves a round half submitted: the caller poisons. The round
        // counts (for `synchronize` and `Drop`) once the bridge has it.
        for (i, m) in self.members.iter_mut().enumerate() {
            let signal = (&self.done[i], round);
            let r = match spec.sends[i].filter(|s| s.n > 0) {
                Some(s) => {
                    let (w0, words) = s.words(dtype);
                    let (t, region) = (&send[i], layout.region_bytes(i, half));
                    m.submit_copy(
                        t.buffer,
                        t.offset + w0 as u64 * 4,
                        &imports[i],
                        region,
                        words as u64 * 4,
                        signal,
                    )
                }
                None => m.submit_marker(None, Some(signal)),
            };
            r.map_err(|e| Error::native(&format!("member {i}"), e))?;
        }
        self.bridge.submitted(round);
        self.round = round;
        let offset = layout.region_bytes(0, half) / 4;
        let slot_bytes = (offset + layout.members * layout.stride) * 4;
        let scale = 1.0 / self.members.len() as f32;
        let per = per_word(dtype) as u64;
        for i in 0..self.members.len() {
            let align = self.storage_offset_align(i);
            // The member's own values come from its send tensor (as `Comm`'s phase B).
            let own = spec.sends[i].filter(|s| s.n > 0).map(|s| {
                let (w0, words) = s.words(dtype);
                window(&send[i], w0 as u64 * 4, words as u64 * 4, align)
            });
            let mut runs = Vec::new();
            for p in spec.places[i].iter().filter(|p| p.n > 0) {
                let t = if p.dst == 0 { &send[i] } else { &recv[i] };
                let first_word = p.dst_elem as u64 / per;
                let words = (p.dst_elem + p.n).div_ceil(per as usize) as u64 - first_word;
                let (dst, dst_word) = window(t, first_word * 4, words * 4, align);
                let (own_range, own_word) = own.unwrap_or((dst, 0));
                let params = CombineSlotsParams {
                    n: p.n as u32,
                    first: p.first as u32,
                    count: p.count as u32,
                    stride: layout.stride as u32,
                    offset: offset as u32,
                    src_elem: p.src_elem as u32,
                    dst_elem: (dst_word * per + p.dst_elem as u64 % per) as u32,
                    op: p.op.code(),
                    kind: kind_code(dtype),
                    scale,
                    self_index: if own.is_some() { i as u32 } else { u32::MAX },
                    own_elem: (own_word * per) as u32,
                };
                runs.push(EmbeddedDispatch {
                    buffers: vec![dst, own_range],
                    immediates: params.words().as_ref().to_vec(),
                    groups: (p.n.div_ceil(per as usize) + 1).div_ceil(256).clamp(1, 65_535) as u32,
                });
            }
            let wait = (&self.go[i], round);
            let m = &mut self.members[i];
            let r = if runs.is_empty() {
                m.submit_marker(Some(wait), None)
            } else {
                m.submit_dispatches(self.combine_kernel, &imports[i], slot_bytes, &runs, Some(wait))
            };
            r.map_err(|e| Error::native(&format!("member {i}"), e))?;
        }
        Ok(())
    }
}

/// The binding of `bytes` of `t` from byte `at` of it, started at the `align`ed byte at or
/// below, and the word of the binding where byte `at` of the tensor is.
fn window<'a>(t: &WgpuTensor<'a>, at: u64, bytes: u64, align: u64) -> (BufferRange<'a>, u64) {
    let start = t.offset + at;
    let base = start / align * align;
    (BufferRange { buffer: t.buffer, offset: base, bytes: start + bytes - base }, (start - base) / 4)
}
