//! `WgpuComm`'s collectives beside the f32 sum on the application's own buffers: three wgpu
//! devices, every collective × op × dtype, tensors at awkward byte offsets inside larger
//! buffers (not on a binding alignment, odd f16 lengths sharing a word with their neighbour).
//! Each result is checked bit for bit against the documented rules computed here on the host
//! (member order, f32 accumulation rounded once per operation, halves rounded to nearest even,
//! ties keep the earlier member), float sums and averages also against an f64 bound; every
//! byte outside the tensors must stay as it was. Misuse is refused before anything is
//! submitted and writes nothing.

use super::{assert_no_wgpu_errors, desc, member_adapters};
use crate::common::{self, reference::gamma};
use crossgpu::embed::{self, WgpuComm, WgpuTensor};
use crossgpu::{DType, Error, ReduceOp};
use rand::Rng;

const DTYPES: [DType; 5] = [DType::F32, DType::F16, DType::BF16, DType::I32, DType::U32];
const OPS: [ReduceOp; 5] = [ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Max, ReduceOp::Min, ReduceOp::Avg];

/// A member's device and one buffer of `words` random words it holds its tensors in.
struct Pool {
    device: wgpu::Device,
    queue: wgpu::Queue,
    buffer: wgpu::Buffer,
    words: Vec<u32>,
}

impl Pool {
    fn new(device: wgpu::Device, queue: wgpu::Queue, words: usize) -> Self {
        let buffer = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("pool"),
            size: (words * 4) as u64,
            usage: embed::REQUIRED_USAGE,
            mapped_at_creation: false,
        });
        Self { device, queue, buffer, words: vec![0; words] }
    }

    /// Fills the pool with random words (host copy and device).
    fn refill(&mut self, rng: &mut impl Rng) {
        self.words.iter_mut().for_each(|w| *w = rng.random());
        self.queue.write_buffer(&self.buffer, 0, bytemuck::cast_slice(&self.words));
    }

    /// Writes `bits` as the elements of the tensor at byte `at` (host copy and device).
    fn put(&mut self, at: u64, dtype: DType, bits: &[u32]) {
        for (e, &b) in bits.iter().enumerate() {
            set(&mut self.words, at, dtype, e, b);
        }
        self.queue.write_buffer(&self.buffer, 0, bytemuck::cast_slice(&self.words));
    }

    fn read(&self) -> Vec<u32> {
        let bytes = (self.words.len() * 4) as u64;
        let staging = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("read back"),
            size: bytes,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let mut enc = self.device.create_command_encoder(&Default::default());
        enc.copy_buffer_to_buffer(&self.buffer, 0, &staging, 0, bytes);
        self.queue.submit([enc.finish()]);
        let slice = staging.slice(..);
        slice.map_async(wgpu::MapMode::Read, |r| r.expect("map_async"));
        self.device.poll(wgpu::PollType::wait_indefinitely()).expect("poll");
        let out = bytemuck::cast_slice(&slice.get_mapped_range().expect("mapped range")).to_vec();
        staging.unmap();
        out
    }
}

fn pools(n: usize, words: usize) -> Vec<Pool> {
    member_adapters(n)
        .iter()
        .map(|a| {
            let (d, q) = embed::request_device(a, &desc()).expect("request_device");
            Pool::new(d, q, words)
        })
        .collect()
}

fn comm(pools: &[Pool]) -> WgpuComm {
    let pairs: Vec<(&wgpu::Device, &wgpu::Queue)> = pools.iter().map(|p| (&p.device, &p.queue)).collect();
    WgpuComm::new(&pairs).expect("WgpuComm::new")
}

fn half(dtype: DType) -> bool {
    matches!(dtype, DType::F16 | DType::BF16)
}

/// Sets element `e` of the tensor at byte `at` of `words`.
fn set(words: &mut [u32], at: u64, dtype: DType, e: usize, v: u32) {
    let w0 = (at / 4) as usize;
    if half(dtype) {
        let w = &mut words[w0 + e / 2];
        let shift = 16 * (e & 1);
        *w = (*w & !(0xffff << shift)) | (v << shift);
    } else {
        words[w0 + e] = v;
    }
}

/// Random element bits: floats of either sign in [-1, 1), never zero; integers over their
/// whole range (sums and products wrap).
fn random_bits(rng: &mut impl Rng, dtype: DType, n: usize) -> Vec<u32> {
    let floats = common::random(rng, n);
    match dtype {
        DType::F32 => floats.iter().map(|v| v.to_bits()).collect(),
        DType::F16 => floats.iter().map(|&v| u32::from(half::f16::from_f32(v).to_bits())).collect(),
        DType::BF16 => floats.iter().map(|&v| u32::from(half::bf16::from_f32(v).to_bits())).collect(),
        DType::I32 | DType::U32 => (0..n).map(|_| rng.random()).collect(),
    }
}

fn widen(dtype: DType, b: u32) -> f32 {
    match dtype {
        DType::F16 => half::f16::from_bits(b as u16).to_f32(),
        DType::BF16 => f32::from_bits(b << 16),
        _ => f32::from_bits(b),
    }
}

/// `op` over one element of every member, as the documented rules say (inputs hold no NaN).
fn combine(dtype: DType, op: ReduceOp, column: &[u32]) -> u32 {
    let (first, rest) = column.split_first().expect("a member");
    if matches!(dtype, DType::I32 | DType::U32) {
        return rest.iter().fold(*first, |acc, &v| match op {
            ReduceOp::Prod => acc.wrapping_mul(v),
            ReduceOp::Max if dtype == DType::I32 => (acc as i32).max(v as i32) as u32,
            ReduceOp::Min if dtype == DType::I32 => (acc as i32).min(v as i32) as u32,
            ReduceOp::Max => acc.max(v),
            ReduceOp::Min => acc.min(v),
            _ => acc.wrapping_add(v),
        });
    }
    let mut acc = widen(dtype, *first);
    for v in rest.iter().map(|&b| widen(dtype, b)) {
        acc = match op {
            ReduceOp::Prod => acc * v,
            ReduceOp::Max if v > acc => v,
            ReduceOp::Min if v < acc => v,
            ReduceOp::Max | ReduceOp::Min => acc,
            _ => acc + v,
        };
    }
    if op == ReduceOp::Avg {
        acc *= 1.0 / column.len() as f32;
    }
    match dtype {
        DType::F16 => u32::from(half::f16::from_f32(acc).to_bits()),
        DType::BF16 => {
            let b = acc.to_bits();
            (b + 0x7fff + ((b >> 16) & 1)) >> 16
        }
        _ => acc.to_bits(),
    }
}

/// The f64 check of a float sum or average: within the f32 accumulation's bound plus the
/// narrowing's half unit.
fn assert_near_f64(dtype: DType, op: ReduceOp, column: &[u32], got: u32, what: &str) {
    if !matches!(op, ReduceOp::Sum | ReduceOp::Avg) || matches!(dtype, DType::I32 | DType::U32) {
        return;
    }
    let n = column.len();
    let scale = if op == ReduceOp::Avg { 1.0 / n as f64 } else { 1.0 };
    let vals: Vec<f64> = column.iter().map(|&b| f64::from(widen(dtype, b))).collect();
    let exact = vals.iter().sum::<f64>() * scale;
    let abs = vals.iter().map(|v| v.abs()).sum::<f64>() * scale;
    let unit = match dtype {
        DType::F16 => 1.0 / 2048.0,
        DType::BF16 => 1.0 / 256.0,
        _ => 0.0,
    };
    let bound = gamma(n + 1) * abs + unit * exact.abs() + 1e-30;
    let g = f64::from(widen(dtype, got));
    assert!((g - exact).abs() <= bound, "{what}: {g} vs f64 {exact} (bound {bound})");
}

/// A byte offset for a tensor inside a pool: a multiple of 4, often not of a binding alignment.
fn offset(rng: &mut impl Rng, max_words: usize) -> u64 {
    4 * rng.random_range(0..max_words as u64)
}

/// Lengths of one share per member summing to `total`, one of them empty where there are
/// more than one.
fn shares(rng: &mut impl Rng, members: usize, total: usize) -> Vec<usize> {
    let mut cuts: Vec<usize> = (0..members - 1).map(|_| rng.random_range(0..=total)).collect();
    cuts.sort_unstable();
    if members > 1 {
        cuts[0] = 0;
    }
    let mut out = Vec::new();
    let mut prev = 0;
    for c in cuts.into_iter().chain([total]) {
        out.push(c - prev);
        prev = c;
    }
    out
}

#[derive(Clone, Copy, Debug)]
enum Call {
    AllReduce(ReduceOp),
    Broadcast(usize),
    Reduce(usize, ReduceOp),
    AllGather,
    ReduceScatter(ReduceOp),
}

/// One call on fresh random pools: tensors placed, the call run, every pool compared word for
/// word with its expected image.
fn run_checked(
    pools: &mut [Pool],
    comm: &mut WgpuComm,
    rng: &mut impl Rng,
    call: Call,
    dtype: DType,
    n: usize,
) {
    let m = pools.len();
    let what = format!("{call:?} of {n} {dtype}");
    for p in pools.iter_mut() {
        p.refill(rng);
    }
    // The send tensor in the first 300 + n words of the pool, the receive tensor after them.
    let in_place = matches!(call, Call::AllReduce(_) | Call::Broadcast(_) | Call::Reduce(..));
    let words = n.div_ceil(if half(dtype) { 2 } else { 1 });
    let needed = if in_place { 300 + words } else { 600 + 2 * words + 1 };
    assert!(needed <= pools[0].words.len(), "the pools hold the tensors");
    let send_at: Vec<u64> = (0..m).map(|_| offset(rng, 300)).collect();
    let recv_at: Vec<u64> = (0..m).map(|_| 4 * (300 + words as u64 + 1) + offset(rng, 300)).collect();
    let send_lens: Vec<usize> = match call {
        Call::AllGather => shares(rng, m, n),
        _ => vec![n; m],
    };
    let recv_lens: Vec<usize> = match call {
        Call::AllGather => vec![n; m],
        Call::ReduceScatter(_) => shares(rng, m, n),
        _ => send_lens.clone(),
    };
    let inputs: Vec<Vec<u32>> = send_lens.iter().map(|&l| random_bits(rng, dtype, l)).collect();
    for (i, p) in pools.iter_mut().enumerate() {
        p.put(send_at[i], dtype, &inputs[i]);
    }
    let mut want: Vec<Vec<u32>> = pools.iter().map(|p| p.words.clone()).collect();
    let column = |e: usize| -> Vec<u32> { inputs.iter().map(|v| v[e]).collect() };
    match call {
        Call::AllReduce(op) => {
            for e in 0..n {
                let v = combine(dtype, op, &column(e));
                assert_near_f64(dtype, op, &column(e), v, &what);
                for (i, w) in want.iter_mut().enumerate() {
                    set(w, send_at[i], dtype, e, v);
                }
            }
        }
        Call::Broadcast(root) => {
            for (i, w) in want.iter_mut().enumerate() {
                for (e, &v) in inputs[root].iter().enumerate() {
                    set(w, send_at[i], dtype, e, v);
                }
            }
        }
        Call::Reduce(root, op) => {
            for e in 0..n {
                set(&mut want[root], send_at[root], dtype, e, combine(dtype, op, &column(e)));
            }
        }
        Call::AllGather => {
            let all: Vec<u32> = inputs.concat();
            for (i, w) in want.iter_mut().enumerate() {
                for (e, &v) in all.iter().enumerate() {
                    set(w, recv_at[i], dtype, e, v);
                }
            }
        }
        Call::ReduceScatter(op) => {
            let mut start = 0;
            for (i, w) in want.iter_mut().enumerate() {
                for e in 0..recv_lens[i] {
                    set(w, recv_at[i], dtype, e, combine(dtype, op, &column(start + e)));
                }
                start += recv_lens[i];
            }
        }
    }
    let wt = |at: &[u64], lens: &[usize]| -> Vec<WgpuTensor<'_>> {
        (0..m).map(|i| WgpuTensor { buffer: &pools[i].buffer, offset: at[i], len: lens[i], dtype }).collect()
    };
    let (send, recv) = (wt(&send_at, &send_lens), wt(&recv_at, &recv_lens));
    let r = match call {
        Call::AllReduce(op) => comm.all_reduce_op(&send, op),
        Call::Broadcast(root) => comm.broadcast(&send, root),
        Call::Reduce(root, op) => comm.reduce(&send, root, op),
        Call::AllGather => comm.all_gather(&send, &recv),
        Call::ReduceScatter(op) => comm.reduce_scatter(&send, &recv, op),
    };
    r.unwrap_or_else(|e| panic!("{what}: {e}"));
    comm.synchronize().expect("synchronize");
    for (i, p) in pools.iter().enumerate() {
        let got = p.read();
        if let Some(k) = (0..got.len()).find(|&k| got[k] != want[i][k]) {
            panic!(
                "{what}, member {i}: word {k} is {:#010x}, expected {:#010x} (send at byte {}, receive at byte {})",
                got[k], want[i][k], send_at[i], recv_at[i]
            );
        }
    }
}

#[test]
fn every_collective_on_application_buffers_follows_the_rules_bit_for_bit() {
    let mut pools = pools(3, 16_384);
    let mut comm = comm(&pools);
    let mut rng = common::rng(0x0C01_1EC7);
    let mut calls = 0;
    for dtype in DTYPES {
        let ops: Vec<ReduceOp> = OPS
            .iter()
            .copied()
            .filter(|&op| op != ReduceOp::Avg || !matches!(dtype, DType::I32 | DType::U32))
            .collect();
        let mut list: Vec<Call> = vec![Call::Broadcast(2), Call::Broadcast(0), Call::AllGather];
        for &op in &ops {
            list.extend([Call::AllReduce(op), Call::Reduce(1, op), Call::ReduceScatter(op)]);
        }
        for (k, &call) in list.iter().enumerate() {
            let n = [1, 7, 1001, 4097][k % 4];
            run_checked(&mut pools, &mut comm, &mut rng, call, dtype, n);
            calls += 1;
        }
    }
    eprintln!("{calls} collectives checked");
    drop(comm);
    assert_no_wgpu_errors();
}

/// A collective larger than a binding goes in rounds: a broadcast, a max and a reduce of f32
/// past the wgpu device's `max_storage_buffer_binding_size`, and an f16 reduce-scatter and
/// all-gather of several rounds with odd segments, at offsets, exact.
#[test]
fn collectives_larger_than_a_binding_go_in_rounds() {
    let probe = pools(1, 1);
    let max = probe[0].device.limits().max_storage_buffer_binding_size as usize;
    drop(probe);
    let n = max / 4 + 12_345;
    let mut pools = pools(2, n + 700);
    let mut comm = comm(&pools);
    let mut rng = common::rng(0xB16);
    for call in [Call::Broadcast(1), Call::AllReduce(ReduceOp::Max), Call::Reduce(0, ReduceOp::Sum)] {
        run_checked(&mut pools, &mut comm, &mut rng, call, DType::F32, n);
    }
    // Half as many bytes per tensor, send and receive in the same pool: still several rounds.
    let halves = n / 2 * 2 + 1;
    for call in [Call::ReduceScatter(ReduceOp::Sum), Call::AllGather] {
        run_checked(&mut pools, &mut comm, &mut rng, call, DType::F16, halves);
    }
    drop(comm);
    assert_no_wgpu_errors();
}

/// Misuse is refused before anything is submitted, naming what is wrong, and writes nothing;
/// the communicator works afterwards.
#[test]
fn collective_misuse_is_refused_and_writes_nothing() {
    let mut pools = pools(2, 4096);
    let mut rng = common::rng(0xBAD);
    for p in pools.iter_mut() {
        p.refill(&mut rng);
    }
    let mut comm = comm(&pools);
    let other = pools[1].device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("other"),
        size: 4096,
        usage: embed::REQUIRED_USAGE,
        mapped_at_creation: false,
    });
    let t = |i: usize, offset: u64, len: usize, dtype: DType| WgpuTensor {
        buffer: &pools[i].buffer,
        offset,
        len,
        dtype,
    };
    let two =
        |offset: u64, len: usize, dtype: DType| vec![t(0, offset, len, dtype), t(1, offset, len, dtype)];
    let cases: Vec<(&str, Result<(), Error>)> = vec![
        ("one tensor for two members", comm.broadcast(&two(0, 8, DType::F32)[..1], 0)),
        (
            "dtypes differ",
            comm.all_reduce_op(&[t(0, 0, 8, DType::F32), t(1, 0, 8, DType::I32)], ReduceOp::Max),
        ),
        (
            "lengths differ",
            comm.all_reduce_op(&[t(0, 0, 8, DType::F16), t(1, 0, 9, DType::F16)], ReduceOp::Min),
        ),
        ("root out of range", comm.broadcast(&two(0, 8, DType::U32), 2)),
        ("avg of integers", comm.all_reduce_op(&two(0, 8, DType::I32), ReduceOp::Avg)),
        ("offset not a multiple of 4", comm.broadcast(&two(2, 8, DType::F16), 0)),
        ("past the buffer", comm.reduce(&two(4096 * 4 - 8, 3, DType::F32), 0, ReduceOp::Sum)),
        ("odd f16 whose last word is past the buffer", comm.broadcast(&two(4096 * 4 - 4, 3, DType::F16), 1)),
        (
            "another device's buffer",
            comm.broadcast(&[WgpuTensor::new(&other, 8, DType::F32), t(1, 0, 8, DType::F32)][..], 0),
        ),
        (
            "receive overlaps send",
            comm.all_gather(&two(0, 8, DType::F32), &[t(0, 16, 16, DType::F32), t(1, 64, 16, DType::F32)]),
        ),
        (
            "gather's receive too short",
            comm.all_gather(&two(0, 8, DType::F32), &[t(0, 256, 15, DType::F32), t(1, 256, 15, DType::F32)]),
        ),
        (
            "scatter's segments do not add up",
            comm.reduce_scatter(
                &two(0, 8, DType::F32),
                &[t(0, 256, 4, DType::F32), t(1, 256, 3, DType::F32)],
                ReduceOp::Sum,
            ),
        ),
    ];
    for (what, r) in cases {
        let e = r.expect_err(what);
        eprintln!("{what}: {e}");
        assert!(!matches!(e, Error::Poisoned(..)), "{what}: {e}");
    }
    comm.synchronize().expect("synchronize");
    for (i, p) in pools.iter().enumerate() {
        assert_eq!(p.read(), p.words, "member {i}: a refused call wrote");
    }
    run_checked(&mut pools, &mut comm, &mut rng, Call::AllGather, DType::F16, 33);
    drop(comm);
    assert_no_wgpu_errors();
}
