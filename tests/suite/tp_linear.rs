//! Tensor parallelism, the linear layers: column- and row-parallel layers over 1, 2 and 3
//! logical devices, even, weighted and with empty members, against the f64 product of the
//! matrix the CPU twin of init_weights draws (`tests/common/reference.rs`), within the derived
//! worst-case bound; and their bad requests. The validation layer (with synchronization
//! validation) is on and any error it reports fails the test.
//!
//! Tests whose failure message starts with `BUG (file): ...` document library bugs found while
//! writing them (bad requests that are accepted or panic); they fail until the library is fixed.

use crate::common;

use crate::common::reference::{self, ErrorModel, Ev};
use crate::common::{assert_bits, assert_within_ev, serial};
use crossgpu::tp::{init, split_ranges, ColumnParallelLinear, RowParallelLinear};
use crossgpu::{Comm, DType, DeviceGroup, Error, Tensor};

/// The splits the linear-layer tests run: (members, weights, granularity). Uneven, weighted,
/// and with empty members (a zero weight; or too few units for three members).
const SPLITS: [(usize, &[f64], usize); 7] = [
    (1, &[1.0], 1),
    (2, &[1.0, 1.0], 1),
    (2, &[2.0, 1.0], 8),
    (3, &[1.0, 1.0, 1.0], 1),
    (3, &[1.0, 0.0, 1.0], 64),
    (3, &[3.0, 1.0, 1.0], 64),
    (3, &[1.0, 1.0, 1.0], 512),
];

/// Shapes (in_features, out_features): odd (the generic f16 kernel, rows starting mid-word),
/// multiples of 8 (the vec8 kernel), and > 256 columns (the strided loop iterates).
const SHAPES: [(usize, usize); 3] = [(301, 37), (256, 130), (640, 72)];

fn groups() -> Vec<DeviceGroup> {
    (1..=3).map(common::logical).collect()
}

/// ColumnParallelLinear: every member holds exactly rows `ranges[i]` of the twin's matrix; the
/// concatenated outputs equal the CPU product within gamma_K·Σ|W x| (K = in_features) and are
/// bitwise the one-member product (each row is the same dot product with the same kernel).
#[test]
fn column_parallel_linear_matches_full_matrix() {
    let _s = serial();
    let mut rng = common::rng(109);
    let groups = groups();
    for (k, &(inp, out)) in SHAPES.iter().enumerate() {
        let seed = 1000 + k as u32;
        let shift = init::shift_for_fan_in(inp);
        let w = reference::init_matrix(seed, out, inp, shift);
        let x = common::random(&mut rng, inp);
        // Within gamma_K·Σ|W x|.
        let want = reference::matvec(&w, out, &Ev::from_f32(&x), ErrorModel::Bound { extra: 0 });
        // The one-member product of the whole matrix, for the bitwise comparison.
        let m0 = groups[0].member(0).unwrap();
        let wt = m0.empty(&[out, inp], DType::F16).unwrap();
        m0.transformer().init_weights(&wt, seed, inp, 0, 0, shift).unwrap();
        let (xt, yt) = (m0.upload_f32(&x).unwrap(), m0.empty(&[out], DType::F32).unwrap());
        m0.matvec(&wt, &xt, &yt).unwrap();
        let whole = yt.read().unwrap();
        assert_within_ev(&format!("matvec {out}x{inp}"), &whole, &want);
        for &(n, weights, granularity) in &SPLITS {
            let group = &groups[n - 1];
            let members = group.members();
            let ranges = split_ranges(out, granularity, weights).unwrap();
            let what = format!("column-parallel {out}x{inp} over {n}, ranges {ranges:?}");
            let layer = ColumnParallelLinear::random(members, inp, out, ranges.clone(), seed, shift).unwrap();
            assert_eq!((layer.in_features, layer.out_features, &layer.ranges), (inp, out, &ranges));
            let xs: Vec<Tensor> = members.iter().map(|m| m.upload_f32(&x).unwrap()).collect();
            let ys: Vec<Tensor> = members
                .iter()
                .zip(&ranges)
                .map(|(m, r)| m.upload_f32(&common::random(&mut rng, r.len())).unwrap())
                .collect();
            layer.forward(members, &xs.iter().collect::<Vec<_>>(), &ys.iter().collect::<Vec<_>>()).unwrap();
            let mut cat = Vec::with_capacity(out);
            for (i, r) in ranges.iter().enumerate() {
                let slice: Vec<f32> = w[r.start * inp..r.end * inp].iter().map(|&v| v as f32).collect();
                assert_eq!(
                    layer.weight(i).unwrap().shape(),
                    &[r.len(), inp],
                    "{what}: member {i} weight shape"
                );
                assert_bits(
                    &format!("{what}: member {i} weights"),
                    &layer.weight(i).unwrap().read().unwrap(),
                    &slice,
                );
                let y = ys[i].read().unwrap();
                assert_eq!(y.len(), r.len());
                cat.extend(y);
            }
            assert_within_ev(&what, &cat, &want);
            assert_bits(&format!("{what}: vs the one-member product"), &cat, &whole);
        }
    }
    common::assert_no_validation_errors();
}

/// RowParallelLinear: every member holds exactly columns `ranges[i]`; each computes a partial
/// product of its K_i columns (within gamma_{K_i} of its exact value), the all-reduce adds the
/// N partials in f32 (N - 1 more roundings of terms bounded by Σ|W x|), so the sum is within
/// gamma_{K + N - 1}·Σ_k|W_rk x_k|, and every member must hold bitwise the same output. A
/// member with an empty range must contribute zeros (its output tensor starts as garbage).
#[test]
fn row_parallel_linear_matches_full_matrix_on_every_member() {
    let _s = serial();
    let mut rng = common::rng(110);
    let groups = groups();
    let mut comms: Vec<Option<Comm>> =
        groups.iter().map(|g| if g.len() > 1 { Some(Comm::new(g).unwrap()) } else { None }).collect();
    for (k, &(inp, out)) in SHAPES.iter().enumerate() {
        let seed = 2000 + k as u32;
        let shift = init::shift_for_fan_in(inp);
        let w = reference::init_matrix(seed, out, inp, shift);
        let x = common::random(&mut rng, inp);
        for &(n, weights, granularity) in &SPLITS {
            let group = &groups[n - 1];
            let members = group.members();
            let ranges = split_ranges(inp, granularity, weights).unwrap();
            let what = format!("row-parallel {out}x{inp} over {n}, ranges {ranges:?}");
            let layer = RowParallelLinear::random(members, inp, out, ranges.clone(), seed, shift).unwrap();
            assert_eq!((layer.in_features, layer.out_features, &layer.ranges), (inp, out, &ranges));
            for (i, r) in ranges.iter().enumerate() {
                let cols: Vec<f32> = (0..out)
                    .flat_map(|row| r.clone().map(move |c| (row, c)))
                    .map(|(row, c)| w[row * inp + c] as f32)
                    .collect();
                assert_eq!(
                    layer.weight(i).unwrap().shape(),
                    &[out, r.len()],
                    "{what}: member {i} weight shape"
                );
                assert_bits(
                    &format!("{what}: member {i} weights"),
                    &layer.weight(i).unwrap().read().unwrap(),
                    &cols,
                );
            }
            let xs: Vec<Tensor> =
                members.iter().zip(&ranges).map(|(m, r)| m.upload_f32(&x[r.clone()]).unwrap()).collect();
            let ys: Vec<Tensor> =
                members.iter().map(|m| m.upload_f32(&common::random(&mut rng, out)).unwrap()).collect();
            // An empty member's partial alone: zeros, whatever the output held.
            for (i, r) in ranges.iter().enumerate().filter(|(_, r)| r.is_empty()) {
                let probe = members[i].upload_f32(&common::random(&mut rng, out)).unwrap();
                members[i].matvec(layer.weight(i).unwrap(), &xs[i], &probe).unwrap();
                assert_bits(
                    &format!("{what}: empty member {i} ({r:?}) partial"),
                    &probe.read().unwrap(),
                    &vec![0.0; out],
                );
            }
            let mut yrefs: Vec<&Tensor> = ys.iter().collect();
            layer
                .forward(members, comms[n - 1].as_mut(), &xs.iter().collect::<Vec<_>>(), &mut yrefs)
                .unwrap();
            // Within gamma_{K + N - 1}·Σ|W x|.
            let want = reference::matvec(&w, out, &Ev::from_f32(&x), ErrorModel::Bound { extra: n - 1 });
            let first = ys[0].read().unwrap();
            assert_within_ev(&what, &first, &want);
            for (i, y) in ys.iter().enumerate().skip(1) {
                assert_bits(&format!("{what}: member {i} vs member 0"), &y.read().unwrap(), &first);
            }
        }
    }
    drop(comms);
    common::assert_no_validation_errors();
}

/// Issue 13, bug 1: a layer built over some members and called with more (or other) members
/// was an index out of bounds panic; it is an error naming the mismatch, and nothing runs.
#[test]
fn linear_forward_over_more_members_than_built_is_an_error() {
    let _s = serial();
    let group = common::logical(2);
    let ms = group.members();
    let col = ColumnParallelLinear::random(&ms[..1], 8, 4, std::iter::once(0..4).collect(), 1, 10).unwrap();
    let row = RowParallelLinear::random(&ms[..1], 8, 4, std::iter::once(0..8).collect(), 1, 10).unwrap();
    let x: Vec<Tensor> = ms.iter().map(|m| m.upload_f32(&[0.5; 8]).unwrap()).collect();
    let y: Vec<Tensor> = ms.iter().map(|m| m.upload_f32(&[0.25; 4]).unwrap()).collect();
    let e = col.forward(ms, &[&x[0], &x[1]], &[&y[0], &y[1]]).unwrap_err();
    assert!(
        matches!(e, Error::LengthMismatch { expected: 1, got: 2, .. })
            && e.to_string().contains("built over 1"),
        "{e}"
    );
    let mut comm = Comm::new(&group).unwrap();
    let mut ys: Vec<&Tensor> = y.iter().collect();
    let e = row.forward(ms, Some(&mut comm), &[&x[0], &x[1]], &mut ys).unwrap_err();
    assert!(matches!(e, Error::LengthMismatch { expected: 1, got: 2, .. }), "{e}");
    // A member's slice past the layer's members is an error too.
    assert!(matches!(col.weight(1), Err(Error::IndexOutOfRange { index: 1, len: 1, .. })));
    assert!(matches!(row.weight(7), Err(Error::IndexOutOfRange { index: 7, len: 1, .. })));
    // Nothing ran: y is as uploaded, and the layer still works over its own member.
    assert_eq!(y[1].read().unwrap(), vec![0.25; 4]);
    col.forward(&ms[..1], &[&x[0]], &[&y[0]]).unwrap();
    assert_eq!(comm.all_reduce_count(), 0);
    drop(comm);
    common::assert_no_validation_errors();
}

/// The linear layers' bad requests: ranges per member, coverage, tensors per member, and a
/// row-parallel layer over several members without a communicator.
#[test]
fn linear_layers_reject_bad_requests() {
    let _s = serial();
    let group = common::logical(2);
    let ms = group.members();
    let r2 = vec![0..5, 5..10];
    assert!(matches!(
        ColumnParallelLinear::random(ms, 8, 10, std::iter::once(0..10).collect(), 1, 10),
        Err(Error::LengthMismatch { .. })
    ));
    assert!(matches!(
        ColumnParallelLinear::random(ms, 8, 11, r2.clone(), 1, 10),
        Err(Error::LengthMismatch { .. })
    ));
    assert!(matches!(
        RowParallelLinear::random(ms, 10, 8, std::iter::once(0..10).collect(), 1, 10),
        Err(Error::LengthMismatch { .. })
    ));
    assert!(matches!(
        RowParallelLinear::random(ms, 9, 8, r2.clone(), 1, 10),
        Err(Error::LengthMismatch { .. })
    ));
    let col = ColumnParallelLinear::random(ms, 8, 10, r2.clone(), 1, 10).unwrap();
    let row = RowParallelLinear::random(ms, 10, 8, r2.clone(), 1, 10).unwrap();
    let x8: Vec<Tensor> = ms.iter().map(|m| m.upload_f32(&[0.5; 8]).unwrap()).collect();
    let x5: Vec<Tensor> = ms.iter().map(|m| m.upload_f32(&[0.5; 5]).unwrap()).collect();
    let y5: Vec<Tensor> = ms.iter().map(|m| m.upload_f32(&[0.5; 5]).unwrap()).collect();
    let y8: Vec<Tensor> = ms.iter().map(|m| m.upload_f32(&[0.5; 8]).unwrap()).collect();
    assert!(matches!(col.forward(ms, &[&x8[0]], &[&y5[0], &y5[1]]), Err(Error::LengthMismatch { .. })));
    col.forward(ms, &[&x8[0], &x8[1]], &[&y5[0], &y5[1]]).unwrap();
    let mut ys: Vec<&Tensor> = y8.iter().collect();
    assert!(matches!(row.forward(ms, None, &[&x5[0], &x5[1]], &mut ys), Err(Error::InvalidArgument(_))));
    let mut comm = Comm::new(&group).unwrap();
    assert!(matches!(
        row.forward(ms, Some(&mut comm), &[&x5[0]], &mut ys),
        Err(Error::LengthMismatch { .. })
    ));
    row.forward(ms, Some(&mut comm), &[&x5[0], &x5[1]], &mut ys).unwrap();
    assert_bits("row-parallel after rejected calls", &y8[1].read().unwrap(), &y8[0].read().unwrap());
    drop(comm);
    common::assert_no_validation_errors();
}

/// Ranges must tile `0..features` contiguously, in member order: anything else (overlapping
/// ranges, a gap, a first range not starting at 0) is no split of the layer, and a row-parallel
/// layer built on it would silently sum some input features twice, or never. The constructors
/// only check that the last range ends at the feature count.
#[test]
fn linear_layers_reject_ranges_that_do_not_tile_the_features() {
    let _s = serial();
    let group = common::logical(2);
    let ms = group.members();
    let mut rng = common::rng(111);
    let (inp, out, seed, shift) = (10usize, 8usize, 5u32, 10u32);
    let w = reference::init_matrix(seed, out, inp, shift);
    let x = common::random(&mut rng, inp);
    let want = reference::matvec(&w, out, &Ev::from_f32(&x), ErrorModel::BOUND).v;
    let mut comm = Comm::new(&group).unwrap();
    let mut accepted = Vec::new();
    for ranges in [vec![0..6, 4..10], vec![0..3, 5..10], vec![2..6, 6..10]] {
        let col = ColumnParallelLinear::random(ms, out, inp, ranges.clone(), seed, shift);
        let row = RowParallelLinear::random(ms, inp, out, ranges.clone(), seed, shift);
        if let Ok(row) = &row {
            let xs: Vec<Tensor> =
                ms.iter().zip(&ranges).map(|(m, r)| m.upload_f32(&x[r.clone()]).unwrap()).collect();
            let ys: Vec<Tensor> = ms.iter().map(|m| m.upload_f32(&vec![0.0; out]).unwrap()).collect();
            let mut yrefs: Vec<&Tensor> = ys.iter().collect();
            row.forward(ms, Some(&mut comm), &xs.iter().collect::<Vec<_>>(), &mut yrefs).unwrap();
            let y = ys[0].read().unwrap();
            let off = (0..out).map(|i| (y[i] as f64 - want[i]).abs()).fold(0.0, f64::max);
            accepted.push(format!(
                "RowParallelLinear over {ranges:?} accepted; forward gives y[0] = {} where W x has {:.6} (max error {off:.3})",
                y[0], want[0]
            ));
        }
        if col.is_ok() {
            accepted.push(format!("ColumnParallelLinear over {ranges:?} (out_features {inp}) accepted"));
        }
    }
    drop(comm);
    common::assert_no_validation_errors();
    assert!(
        accepted.is_empty(),
        "BUG (src/tp/linear.rs): ColumnParallelLinear::random and RowParallelLinear::random check only \
         that the last range ends at the feature count, not that the ranges tile 0..features \
         contiguously; overlapping or gapped ranges are accepted and the row-parallel forward then \
         returns a wrong y = W x without an error:\n  {}",
        accepted.join("\n  ")
    );
}
