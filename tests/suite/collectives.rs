//! The collectives beside the f32 sum — all-reduce with every op and dtype, broadcast, reduce,
//! all-gather (unequal and empty shares) and reduce-scatter — on lavapipe, 1 to 4 members, in
//! every mode the driver can do, against references computed here: exact for copies,
//! max/min and integers, within a derived bound of an f64 computation for float sums,
//! products and averages, and bitwise the same on every member. Misuse is refused up front,
//! naming what is wrong, and writes nothing. The validation layer is on.

use crate::common::{self, reference::gamma, serial};
use crossgpu::{
    AllReduceOptions, Comm, CommOptions, DType, DeviceGroup, Error, Member, Mode, ModeRequest, Precision,
    ReduceOp, Tensor,
};
use rand::Rng;

const DTYPES: [DType; 5] = [DType::F32, DType::F16, DType::BF16, DType::I32, DType::U32];
const U32: f64 = 1.0 / (1u64 << 24) as f64;

/// A communicator over `group` in `mode`, or `None` (said loudly; a failure where required)
/// where the driver or layout cannot do it.
fn comm(group: &DeviceGroup, mode: Mode) -> Option<Comm> {
    let request = if group.len() < 2 { ModeRequest::Auto } else { ModeRequest::Forced(mode) };
    match Comm::with_options(group, CommOptions { mode: request, ..CommOptions::from_env().unwrap() }) {
        Ok(c) => Some(c),
        Err(e @ (Error::Unsupported(_) | Error::MissingExtension { .. }))
            if common::mode_refused_by_layout(mode, &e.to_string()) =>
        {
            common::skip(common::requirement(mode), &format!("{mode} over {} members: {e}", group.len()));
            None
        }
        Err(e) => panic!("{mode} over {} members: {e}", group.len()),
    }
}

/// Random element bits of `dtype`: floats of either sign in [-1, 1) (never zero), integers over
/// their whole range (so sums and products wrap).
fn random_bits(rng: &mut impl Rng, dtype: DType, n: usize) -> Vec<u32> {
    match dtype {
        DType::F32 => common::random(rng, n).iter().map(|v| v.to_bits()).collect(),
        DType::F16 => {
            common::random(rng, n).iter().map(|&v| u32::from(half::f16::from_f32(v).to_bits())).collect()
        }
        DType::BF16 => {
            common::random(rng, n).iter().map(|&v| u32::from(half::bf16::from_f32(v).to_bits())).collect()
        }
        DType::I32 | DType::U32 => (0..n).map(|_| rng.random()).collect(),
    }
}

fn upload(m: &Member, dtype: DType, bits: &[u32]) -> Tensor {
    match dtype {
        DType::F32 => m.upload_f32(&bits.iter().map(|&b| f32::from_bits(b)).collect::<Vec<_>>()).unwrap(),
        DType::U32 => m.upload_u32(bits).unwrap(),
        DType::I32 => m.upload_i32(&bits.iter().map(|&b| b as i32).collect::<Vec<_>>()).unwrap(),
        DType::F16 | DType::BF16 => {
            // Widening is exact, and the upload rounds the value back to the same bits.
            let v: Vec<f32> = bits.iter().map(|&b| value(dtype, b) as f32).collect();
            m.upload(&v, &[v.len()], dtype).unwrap()
        }
    }
}

fn read_bits(t: &Tensor) -> Vec<u32> {
    match t.dtype() {
        DType::F32 => t.read().unwrap().iter().map(|v| v.to_bits()).collect(),
        DType::U32 => t.read_u32().unwrap(),
        DType::I32 => t.read_i32().unwrap().iter().map(|&v| v as u32).collect(),
        DType::F16 | DType::BF16 => t.read_halves().unwrap().iter().map(|&h| u32::from(h)).collect(),
    }
}

/// An element's value, exactly.
fn value(dtype: DType, b: u32) -> f64 {
    match dtype {
        DType::F32 => f64::from(f32::from_bits(b)),
        DType::F16 => half::f16::from_bits(b as u16).to_f64(),
        DType::BF16 => f64::from(f32::from_bits(b << 16)),
        DType::I32 => f64::from(b as i32),
        DType::U32 => f64::from(b),
    }
}

/// The relative rounding of a result narrowed to `dtype` (f32 arithmetic's own is in the bound).
fn narrowing(dtype: DType) -> f64 {
    match dtype {
        DType::F16 => 1.0 / 2048.0,
        DType::BF16 => 1.0 / 256.0,
        _ => 0.0,
    }
}

/// Checks element `k` of a reduction with `op` of `column` (the members' bits, in member order):
/// integers exactly (wrapping), max and min exactly, float sums, products and averages within
/// f32 accumulation in member order (γ_(N-1) of Σ|x| or of |Πx|), the avg's factor and product
/// (2u), and the rounding to the dtype.
fn check_element(dtype: DType, op: ReduceOp, column: &[u32], got: u32, what: &dyn Fn() -> String) {
    let n = column.len();
    if matches!(dtype, DType::I32 | DType::U32) {
        let want = column[1..].iter().fold(column[0], |acc, &v| match op {
            ReduceOp::Sum => (u64::from(acc) + u64::from(v)) as u32,
            ReduceOp::Prod => (u64::from(acc) * u64::from(v)) as u32,
            ReduceOp::Max if dtype == DType::I32 => (acc as i32).max(v as i32) as u32,
            ReduceOp::Min if dtype == DType::I32 => (acc as i32).min(v as i32) as u32,
            ReduceOp::Max => acc.max(v),
            ReduceOp::Min => acc.min(v),
            ReduceOp::Avg => unreachable!("refused for integers"),
        });
        assert_eq!(got, want, "{}", what());
        return;
    }
    let vals: Vec<f64> = column.iter().map(|&b| value(dtype, b)).collect();
    let g = value(dtype, got);
    let (want, bound) = match op {
        ReduceOp::Max => (vals.iter().copied().fold(f64::MIN, f64::max), 0.0),
        ReduceOp::Min => (vals.iter().copied().fold(f64::MAX, f64::min), 0.0),
        ReduceOp::Sum | ReduceOp::Avg => {
            let sum: f64 = vals.iter().sum();
            let abs: f64 = vals.iter().map(|v| v.abs()).sum();
            if op == ReduceOp::Sum {
                (sum, gamma(n - 1) * abs)
            } else {
                (sum / n as f64, gamma(n - 1) * abs / n as f64 + 2.0 * U32 * (sum / n as f64).abs() * 1.01)
            }
        }
        ReduceOp::Prod => {
            let prod: f64 = vals.iter().product();
            (prod, gamma(n - 1) * prod.abs())
        }
    };
    // Narrowed to f16/bf16: half an ulp of the result's magnitude, and f16's subnormal step.
    let bound = bound
        + narrowing(dtype) * (want.abs() + bound)
        + if dtype == DType::F16 { 2f64.powi(-25) } else { 0.0 };
    assert!((g - want).abs() <= bound, "{}: got {g}, want {want} (bound {bound:e})", what());
}

/// Uploads `bits` (one vector per member) and all-reduces them with `op`; checks every element
/// of member 0 against the reference and every member bitwise against member 0. Returns the
/// inputs' tensors and member 0's result.
fn all_reduce_checked(
    group: &DeviceGroup,
    comm: &mut Comm,
    dtype: DType,
    op: ReduceOp,
    bits: &[Vec<u32>],
) -> Vec<u32> {
    let mut ts: Vec<Tensor> = group.members().iter().zip(bits).map(|(m, b)| upload(m, dtype, b)).collect();
    comm.all_reduce(&mut ts, &AllReduceOptions { op, ..Default::default() }).unwrap();
    let got: Vec<Vec<u32>> = ts.iter().map(read_bits).collect();
    let mode = comm.mode();
    for (j, g) in got.iter().enumerate() {
        assert_eq!(g, &got[0], "{mode} all_reduce {op} {dtype}: member {j} differs bitwise from member 0");
    }
    for (k, &g) in got[0].iter().enumerate() {
        let column: Vec<u32> = bits.iter().map(|b| b[k]).collect();
        check_element(dtype, op, &column, g, &|| {
            format!(
                "{mode} all_reduce {op} {dtype} over {} members, element {k} of {}",
                bits.len(),
                bits[0].len()
            )
        });
    }
    got[0].clone()
}

/// Every collective, op and dtype at one size over `group` in `mode`.
fn check_all(group: &DeviceGroup, comm: &mut Comm, rng: &mut impl Rng, n: usize) {
    let nm = group.len();
    let mode = comm.mode();
    for dtype in DTYPES {
        let bits: Vec<Vec<u32>> = (0..nm).map(|_| random_bits(rng, dtype, n)).collect();
        let mut sums = None;
        for op in ReduceOp::ALL {
            if op == ReduceOp::Avg && matches!(dtype, DType::I32 | DType::U32) {
                continue;
            }
            let r = all_reduce_checked(group, comm, dtype, op, &bits);
            if op == ReduceOp::Sum {
                sums = Some(r);
            }
        }
        let sums = sums.expect("the sum ran");
        let what = |c: &str| format!("{mode} {c} {dtype} over {nm} members, {n} elements");

        // Broadcast from the last member: every member ends with its bits.
        let root = nm - 1;
        let mut ts: Vec<Tensor> =
            group.members().iter().zip(&bits).map(|(m, b)| upload(m, dtype, b)).collect();
        comm.broadcast(&mut ts, root).unwrap();
        for t in &ts {
            assert_eq!(read_bits(t), bits[root], "{}", what("broadcast"));
        }

        // Reduce (sum) to member 0: the all-reduce's bits there, the others untouched.
        let mut ts: Vec<Tensor> =
            group.members().iter().zip(&bits).map(|(m, b)| upload(m, dtype, b)).collect();
        comm.reduce(&mut ts, 0, ReduceOp::Sum).unwrap();
        assert_eq!(read_bits(&ts[0]), sums, "{}", what("reduce"));
        for (t, b) in ts.iter().zip(&bits).skip(1) {
            assert_eq!(
                &read_bits(t),
                b,
                "{}: a member that is not the root keeps its tensor",
                what("reduce")
            );
        }

        // All-gather of unequal shares (member j sends n + j - 1 elements, the first none when
        // n is 1): every member receives their concatenation.
        let shares: Vec<Vec<u32>> =
            (0..nm).map(|j| random_bits(rng, dtype, (n + j).saturating_sub(1))).collect();
        let total: usize = shares.iter().map(Vec::len).sum();
        let send: Vec<Tensor> =
            group.members().iter().zip(&shares).map(|(m, b)| upload(m, dtype, b)).collect();
        let mut recv: Vec<Tensor> =
            group.members().iter().map(|m| upload(m, dtype, &random_bits(rng, dtype, total))).collect();
        comm.all_gather(&send, &mut recv).unwrap();
        let want: Vec<u32> = shares.concat();
        for (i, t) in recv.iter().enumerate() {
            assert_eq!(read_bits(t), want, "{} (member {i})", what("all_gather"));
        }

        // Reduce-scatter (sum) into unequal segments, one of them empty: member i receives its
        // segment of the all-reduce's bits.
        let mut cuts: Vec<usize> = (0..nm - 1).map(|_| rng.random_range(0..=n)).collect();
        cuts.push(0);
        cuts.push(n);
        cuts.sort_unstable();
        let send: Vec<Tensor> = group.members().iter().zip(&bits).map(|(m, b)| upload(m, dtype, b)).collect();
        let mut recv: Vec<Tensor> = group
            .members()
            .iter()
            .enumerate()
            .map(|(i, m)| upload(m, dtype, &random_bits(rng, dtype, cuts[i + 1] - cuts[i])))
            .collect();
        comm.reduce_scatter(&send, &mut recv, ReduceOp::Sum).unwrap();
        for (i, t) in recv.iter().enumerate() {
            assert_eq!(read_bits(t), sums[cuts[i]..cuts[i + 1]], "{} (member {i})", what("reduce_scatter"));
        }
    }
}

fn modes() -> [Mode; 4] {
    [Mode::HostBridge, Mode::SyncFd, Mode::DevicePoll, Mode::Generic]
}

#[test]
fn every_collective_op_and_dtype_matches_its_reference_in_every_mode() {
    let _s = serial();
    let mut rng = common::rng(32);
    for members in [1, 2, 3, 4] {
        let group = common::logical(members);
        for mode in modes() {
            if members == 1 && mode != Mode::Generic {
                continue;
            }
            let Some(mut comm) = comm(&group, mode) else { continue };
            for n in [1, 2, 7, 1000, 4099] {
                check_all(&group, &mut comm, &mut rng, n);
            }
        }
    }
    common::assert_no_validation_errors();
}

#[test]
fn rounds_larger_than_a_slot_run_in_chunks() {
    let _s = serial();
    let mut rng = common::rng(33);
    let group = common::logical(3);
    let mut comm = comm(&group, Mode::HostBridge).unwrap();
    // The slots hold at most maxStorageBufferRange / members per member: a tensor of a whole
    // binding's f16 elements needs several rounds.
    let limit = group.members()[0].adapter().caps.max_storage_buffer_range;
    let n = (limit / 4 * 2) as usize - 6;
    let bits: Vec<Vec<u32>> = (0..3).map(|_| random_bits(&mut rng, DType::F16, n)).collect();
    let mut ts: Vec<Tensor> =
        group.members().iter().zip(&bits).map(|(m, b)| upload(m, DType::F16, b)).collect();
    comm.all_reduce(&mut ts, &AllReduceOptions { op: ReduceOp::Max, ..Default::default() }).unwrap();
    assert!(comm.slot_capacity() * 2 < n as u64, "the call needed more than one round");
    let got: Vec<Vec<u32>> = ts.iter().map(read_bits).collect();
    for (k, &g) in got[0].iter().enumerate().step_by(997) {
        let column: Vec<u32> = bits.iter().map(|b| b[k]).collect();
        check_element(DType::F16, ReduceOp::Max, &column, g, &|| format!("chunked max, element {k}"));
    }
    assert!(got.iter().all(|g| g == &got[0]), "every member holds the same bits");
    // An odd-length segment boundary crossing a round's edge: reduce-scatter of the same data.
    let cut = n / 2 + 1;
    let send = ts;
    let mut recv: Vec<Tensor> = [cut, n - cut - 5, 5]
        .iter()
        .zip(group.members())
        .map(|(&l, m)| m.empty(&[l], DType::F16).unwrap())
        .collect();
    comm.reduce_scatter(&send, &mut recv, ReduceOp::Min).unwrap();
    let max = &got[0];
    let seg = |i: usize| -> std::ops::Range<usize> {
        let starts = [0, cut, n - 5, n];
        starts[i]..starts[i + 1]
    };
    // The inputs are now every member's max; their min is the max itself.
    for (i, t) in recv.iter().enumerate() {
        assert_eq!(read_bits(t), max[seg(i)], "member {i}'s segment of the chunked reduce-scatter");
    }
    common::assert_no_validation_errors();
}

#[test]
fn misuse_is_refused_up_front_and_writes_nothing() {
    let _s = serial();
    let group = common::logical(3);
    let other = common::logical(3);
    let mut comm = comm(&group, Mode::HostBridge).unwrap();
    let m = group.members();
    let up = |m: &Member, v: &[f32]| m.upload_f32(v).unwrap();
    let mut ts: Vec<Tensor> = m.iter().map(|m| up(m, &[1.0, 2.0, 3.0])).collect();
    let err = |r: crossgpu::Result<()>| r.expect_err("refused").to_string();

    let e = err(comm.broadcast(&mut ts, 3));
    assert!(e.contains("root"), "{e}");
    let e = err(comm.all_reduce(&mut ts[..2], &AllReduceOptions { op: ReduceOp::Max, ..Default::default() }));
    assert!(e.contains("one send tensor per member"), "{e}");
    let mut ints: Vec<Tensor> = m.iter().map(|m| m.upload_i32(&[1, 2, 3]).unwrap()).collect();
    let e = err(comm.all_reduce(&mut ints, &AllReduceOptions { op: ReduceOp::Avg, ..Default::default() }));
    assert!(e.contains("avg"), "{e}");
    let f16 = AllReduceOptions { op: ReduceOp::Max, precision: Precision::F16, ..Default::default() };
    let e = err(comm.all_reduce(&mut ts, &f16));
    assert!(e.contains("f16 wire"), "{e}");
    let mut mixed: Vec<Tensor> = vec![up(&m[0], &[1.0]), m[1].upload_u32(&[1]).unwrap(), up(&m[2], &[1.0])];
    let e = err(comm.broadcast(&mut mixed, 0));
    assert!(e.contains("tensor 1"), "{e}");
    let mut foreign: Vec<Tensor> =
        vec![up(&m[0], &[1.0]), up(&other.members()[1], &[1.0]), up(&m[2], &[1.0])];
    let e = err(comm.reduce(&mut foreign, 0, ReduceOp::Sum));
    assert!(e.contains("tensor 1"), "{e}");
    let mut short: Vec<Tensor> = m.iter().map(|m| up(m, &[0.0; 8])).collect();
    let e = err(comm.all_gather(&ts, &mut short));
    assert!(e.contains("receive tensor 0"), "{e}");
    let e = err(comm.reduce_scatter(&ts, &mut short, ReduceOp::Sum));
    assert!(e.contains("receive tensors"), "{e}");
    let same: Vec<&Tensor> = ts.iter().collect();
    let mut same_recv = same.clone();
    let e = err(comm.all_gather(&same, &mut same_recv));
    assert!(e.contains("its send tensor"), "{e}");

    for t in ts.iter().chain(&short) {
        let v = t.read().unwrap();
        assert!(v == [1.0, 2.0, 3.0] || v == [0.0; 8], "a refused call wrote {v:?}");
    }
    // Nothing was poisoned: the communicator still works.
    comm.all_reduce(&mut ts, &AllReduceOptions { op: ReduceOp::Max, ..Default::default() }).unwrap();
    assert_eq!(ts[2].read().unwrap(), [1.0, 2.0, 3.0]);
    common::assert_no_validation_errors();
}
