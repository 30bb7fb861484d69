//! One round of a collective other than the f32 sum, as the slot transports run it: what each
//! member sends into its slot region (phase A, as the sum's, words as stored) and how each
//! member combines the members' regions into its own tensors (phase B,
//! `wgsl/combine_slots.wgsl`). The same round is evaluated on the host by [`evaluate`], bit for
//! bit as the kernel does it, where no slots exist (Generic, the gather path between ranks).
//!
//! A round is described twice: [`RoundSpec`] in numbers only (members, element offsets and
//! counts; what `collectives.rs` plans and the ranks agree on), and [`Exchange`], the same with
//! each member's tensors bound.

use vk_native::{BindRange, Buffer, BufferId};

use super::options::CommOptions;
use super::phases::record_phase_a;
use super::slots::HostSlots;
use crate::error::Result;
use crate::group::Member;
use crate::kernels::{elementwise_groups, CombineSlotsParams, COMBINE_SLOTS};
use crate::tensor::{DType, Tensor};

/// How phase B combines the members' values (`combine_slots.wgsl`'s `op`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CombineOp {
    /// Member `first`'s value.
    Copy,
    Sum,
    Prod,
    Max,
    Min,
    /// The f32 sum times `scale`.
    Avg,
}

impl CombineOp {
    pub(crate) fn code(self) -> u32 {
        match self {
            Self::Copy => 0,
            Self::Sum => 1,
            Self::Prod => 2,
            Self::Max => 3,
            Self::Min => 4,
            Self::Avg => 5,
        }
    }
}

/// The element type on the wire, as the kernel's `kind` says it.
pub(crate) fn kind_code(dtype: DType) -> u32 {
    match dtype {
        DType::F32 => 0,
        DType::I32 => 1,
        DType::U32 => 2,
        DType::F16 => 3,
        DType::BF16 => 4,
    }
}

/// Elements per 32-bit word of `dtype`.
pub(crate) fn per_word(dtype: DType) -> usize {
    if dtype.is_half() {
        2
    } else {
        1
    }
}

/// Phase A of one member: elements `elem .. elem + n` of its send tensor into the start of its
/// region (`elem` is a multiple of [`per_word`]; the words that hold them travel whole).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SendSpec {
    pub(crate) elem: usize,
    pub(crate) n: usize,
}

impl SendSpec {
    /// The words it sends: the first, and how many.
    pub(crate) fn words(&self, dtype: DType) -> (usize, usize) {
        let k = per_word(dtype);
        (self.elem / k, self.n.div_ceil(k))
    }
}

/// One combination of phase B on one member: elements `dst_elem .. dst_elem + n` of a tensor
/// of the member become `op` over members `first .. first + count` of their regions' elements
/// `src_elem ..`, in member order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PlaceSpec {
    /// Which of the member's tensors: 0 the call's first (the only one in place), 1 its second.
    pub(crate) dst: usize,
    pub(crate) dst_elem: usize,
    pub(crate) n: usize,
    pub(crate) src_elem: usize,
    pub(crate) first: usize,
    pub(crate) count: usize,
    pub(crate) op: CombineOp,
}

/// A round in numbers: per member what it sends (nothing: `None`) and what it combines.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct RoundSpec {
    pub(crate) sends: Vec<Option<SendSpec>>,
    pub(crate) places: Vec<Vec<PlaceSpec>>,
}

impl RoundSpec {
    /// The most words any member sends: the slot capacity the round needs.
    pub(crate) fn words(&self, dtype: DType) -> usize {
        self.sends.iter().flatten().map(|s| s.words(dtype).1).max().unwrap_or(0)
    }
}

/// A round with each member's tensors: `tensors[i]` are member i's, in the order
/// [`PlaceSpec::dst`] counts them (for a send, the first).
pub(crate) struct Exchange<'a> {
    pub(crate) dtype: DType,
    /// Avg's factor: 1 / members, rounded to f32.
    pub(crate) scale: f32,
    pub(crate) spec: &'a RoundSpec,
    /// Member i's send tensor.
    pub(crate) send: Vec<&'a Tensor>,
    /// Member i's tensors phase B writes, by [`PlaceSpec::dst`].
    pub(crate) dst: Vec<[&'a Tensor; 2]>,
}

impl Exchange<'_> {
    /// Records phase A of member `i` into its region of slot entry `e` (nothing where it sends
    /// nothing; the caller still records the barrier and the release).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn record_send(
        &self,
        m: &Member,
        i: usize,
        slots: &HostSlots,
        e: u64,
        scratch: &mut Option<Buffer>,
        opts: &CommOptions,
    ) -> Result<()> {
        match self.spec.sends[i] {
            Some(s) if s.n > 0 => {
                let (w0, words) = s.words(self.dtype);
                record_phase_a(m, i, self.send[i], slots, e, scratch, opts, w0, words, false)
            }
            _ => Ok(()),
        }
    }

    /// Records phase B of member `i` from slot entry `e`; `after` as for the sum.
    pub(crate) fn record_places(
        &self,
        m: &Member,
        i: usize,
        slots: &HostSlots,
        e: u64,
        after: &[BufferId],
    ) -> Result<()> {
        let (binding, at) = slots.entry(i, e);
        // The member's own values come from its send tensor, not over the bus from its region.
        let (self_index, own_elem) = match self.spec.sends[i] {
            Some(s) if s.n > 0 => (i as u32, s.elem as u32),
            _ => (u32::MAX, 0),
        };
        let own = BindRange::whole(&self.send[i].buffer);
        for p in self.spec.places[i].iter().filter(|p| p.n > 0) {
            let dst = self.dst[i][p.dst];
            let words = p.n.div_ceil(per_word(self.dtype)) + 1;
            m.shared.dispatch_ranges(
                COMBINE_SLOTS,
                &[binding, BindRange::whole(&dst.buffer), own],
                after,
                &CombineSlotsParams {
                    n: p.n as u32,
                    first: p.first as u32,
                    count: p.count as u32,
                    stride: slots.layout.stride as u32,
                    offset: at as u32,
                    src_elem: p.src_elem as u32,
                    dst_elem: p.dst_elem as u32,
                    op: p.op.code(),
                    kind: kind_code(self.dtype),
                    scale: self.scale,
                    self_index,
                    own_elem,
                },
                elementwise_groups(words),
            )?;
        }
        Ok(())
    }
}

/// Phase B of one member on the host, as `combine_slots.wgsl` computes it: `regions[j]` are the
/// words member j sent (its region from the start), `image` the words of the destination tensor
/// from word 0, changed in place.
pub(crate) fn evaluate(dtype: DType, scale: f32, p: &PlaceSpec, regions: &[&[u32]], image: &mut [u32]) {
    let half = dtype.is_half();
    let element = |j: usize, s: usize| -> u32 {
        let r = regions[j];
        if half {
            (r.get(s / 2).copied().unwrap_or(0) >> (16 * (s & 1))) & 0xffff
        } else {
            r.get(s).copied().unwrap_or(0)
        }
    };
    for k in 0..p.n {
        let s = p.src_elem + k;
        let v = match p.op {
            CombineOp::Copy => element(p.first, s),
            _ => {
                let vals = (p.first..p.first + p.count).map(|j| element(j, s));
                combine(dtype, p.op, scale, vals)
            }
        };
        let e = p.dst_elem + k;
        if half {
            let w = &mut image[e / 2];
            let shift = 16 * (e & 1);
            *w = (*w & !(0xffff << shift)) | (v << shift);
        } else {
            image[e] = v;
        }
    }
}

/// `op` over `vals` (bits of `dtype`, in member order), as the kernel does it.
fn combine(dtype: DType, op: CombineOp, scale: f32, mut vals: impl Iterator<Item = u32>) -> u32 {
    let first = vals.next().unwrap_or(0);
    match dtype {
        DType::I32 | DType::U32 => vals.fold(first, |acc, v| match op {
            CombineOp::Prod => acc.wrapping_mul(v),
            CombineOp::Max if dtype == DType::I32 => (acc as i32).max(v as i32) as u32,
            CombineOp::Min if dtype == DType::I32 => (acc as i32).min(v as i32) as u32,
            CombineOp::Max => acc.max(v),
            CombineOp::Min => acc.min(v),
            _ => acc.wrapping_add(v),
        }),
        _ => {
            let widen = |b: u32| match dtype {
                DType::F16 => half::f16::from_bits(b as u16).to_f32(),
                DType::BF16 => f32::from_bits(b << 16),
                _ => f32::from_bits(b),
            };
            let mut acc = widen(first);
            let mut nan = acc.is_nan();
            for v in vals.map(widen) {
                nan |= v.is_nan();
                acc = match op {
                    CombineOp::Prod => acc * v,
                    CombineOp::Max if v > acc => v,
                    CombineOp::Min if v < acc => v,
                    CombineOp::Max | CombineOp::Min => acc,
                    _ => acc + v,
                };
            }
            if op == CombineOp::Avg {
                acc *= scale;
            }
            match dtype {
                DType::F16 if nan || acc.is_nan() => 0x7e00,
                DType::BF16 if nan || acc.is_nan() => 0x7fc0,
                _ if nan || acc.is_nan() => 0x7fc0_0000,
                // half's conversion rounds to nearest even and overflows to infinity, as the
                // kernel's integer code does.
                DType::F16 => u32::from(half::f16::from_f32(acc).to_bits()),
                DType::BF16 => {
                    let b = acc.to_bits();
                    (b + 0x7fff + ((b >> 16) & 1)) >> 16
                }
                _ => acc.to_bits(),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_combinations_follow_the_kernels_rules() {
        let f = |v: f32| v.to_bits();
        let sum = combine(DType::F32, CombineOp::Sum, 1.0, [f(1.0), f(2.5), f(-0.5)].into_iter());
        assert_eq!(f32::from_bits(sum), 3.0);
        let max = combine(DType::F32, CombineOp::Max, 1.0, [f(-0.0), f(0.0)].into_iter());
        assert_eq!(max, f(-0.0), "a tie keeps the earlier member's value");
        let nan = combine(DType::F32, CombineOp::Min, 1.0, [f(1.0), f(f32::NAN), f(0.0)].into_iter());
        assert_eq!(nan, 0x7fc0_0000);
        let avg = combine(DType::F32, CombineOp::Avg, 1.0 / 3.0, [f(1.0), f(2.0), f(4.0)].into_iter());
        assert_eq!(f32::from_bits(avg), 7.0 * (1.0f32 / 3.0));
        let wrap = combine(DType::I32, CombineOp::Sum, 1.0, [i32::MAX as u32, 1].into_iter());
        assert_eq!(wrap as i32, i32::MIN);
        let imin = combine(DType::I32, CombineOp::Min, 1.0, [5u32, (-3i32) as u32].into_iter());
        assert_eq!(imin as i32, -3);
        let h = |v: f32| u32::from(half::f16::from_f32(v).to_bits());
        let big = combine(DType::F16, CombineOp::Sum, 1.0, [h(60000.0), h(60000.0)].into_iter());
        assert_eq!(big, 0x7c00, "an f16 sum past the range is an infinity");
    }

    #[test]
    fn host_places_keep_the_other_half_of_a_shared_word() {
        // Two f16 segments meeting inside word 1: elements 0..3 from member 0, 3..5 from 1.
        let a: Vec<u32> = vec![0x0002_0001, 0x0000_0003];
        let b: Vec<u32> = vec![0x0005_0004];
        let regions: [&[u32]; 2] = [&a, &b];
        let mut image = vec![0xdead_beef; 3];
        let p = |dst_elem, n, first| PlaceSpec {
            dst: 0,
            dst_elem,
            n,
            src_elem: 0,
            first,
            count: 1,
            op: CombineOp::Copy,
        };
        evaluate(DType::F16, 1.0, &p(0, 3, 0), &regions, &mut image);
        evaluate(DType::F16, 1.0, &p(3, 2, 1), &regions, &mut image);
        assert_eq!(image, vec![0x0002_0001, 0x0004_0003, 0xdead_0005]);
    }
}
