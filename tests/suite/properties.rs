//! Property tests of the all-reduce (issue 7): random group sizes (2–4 logical devices), lengths
//! from 0 to a few million (mostly small), wire precision, forced mode, zero-contribution
//! members and sequences of rounds on one communicator (so its host slots grow mid-sequence).
//! Every member's result is checked against the f64 reference and all members bitwise against
//! each other; the validation layer (with synchronization validation) is on throughout.
//!
//! A failing case shrinks to a minimal one, which proptest records in
//! `tests/properties.proptest-regressions` and replays first on every later run.
//!
//! Cost: opening a group is the expensive part, so one group per size is opened once and shared
//! (the tests take turns through a lock); each case makes a new `Comm` on it, starting from the
//! smallest slots. `CASES` cases per property; `PROPTEST_CASES=N` overrides it (e.g. on the GPU
//! machine).

use crate::common;

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;

// One property at a time on the shared groups (`serial`).
use crate::common::{reference, serial};
use crossgpu::{AllReduceOptions, Comm, CommOptions, DeviceGroup, Mode, ModeRequest, Precision, Tensor};
use proptest::prelude::*;
use proptest::test_runner::{Config, FileFailurePersistence, TestCaseError, TestRunner};

/// Cases per property (see the module doc): the whole file takes 4–25 s on the 2-core CI VM.
const CASES: u32 = 128;

/// Groups of 2, 3 and 4 logical devices, opened once.
fn group(members: usize) -> &'static DeviceGroup {
    static GROUPS: [OnceLock<DeviceGroup>; 3] = [OnceLock::new(), OnceLock::new(), OnceLock::new()];
    GROUPS[members - 2].get_or_init(|| common::logical(members))
}

fn runner() -> TestRunner {
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(CASES);
    TestRunner::new(Config {
        cases,
        // A failing case costs a few all-reduces; keep the shrinking of a large one bounded.
        max_shrink_iters: 400,
        source_file: Some(file!()),
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource("proptest-regressions"))),
        ..Config::default()
    })
}

/// Element counts: mostly small, sometimes around the f16 threshold, sometimes millions.
fn len() -> impl Strategy<Value = usize> {
    prop_oneof![
        2 => Just(0usize),
        20 => 1usize..64,
        12 => 64usize..5_000,
        5 => 5_000usize..300_000,
        2 => 300_000usize..3_000_000,
    ]
}

/// What the cases covered, printed at the end of the main property.
#[derive(Default)]
struct Coverage {
    cases: AtomicUsize,
    rounds: AtomicUsize,
    elements: AtomicU64,
    max_len: AtomicUsize,
    f16_wire: AtomicUsize,
    zero_contribution: AtomicUsize,
    growths: AtomicUsize,
    generic: AtomicUsize,
}

static COVERAGE: Coverage = Coverage {
    cases: AtomicUsize::new(0),
    rounds: AtomicUsize::new(0),
    elements: AtomicU64::new(0),
    max_len: AtomicUsize::new(0),
    f16_wire: AtomicUsize::new(0),
    zero_contribution: AtomicUsize::new(0),
    growths: AtomicUsize::new(0),
    generic: AtomicUsize::new(0),
};

#[derive(Debug, Clone)]
struct Round {
    len: usize,
    precision: Precision,
    /// Per-call f16 threshold (`None`: the Comm's), so `Auto` switches wire at small sizes too.
    threshold: Option<u64>,
    zero_contribution: Vec<usize>,
    /// Magnitude of the inputs: 70000 exceeds the f16 range, so the f16 wire saturates.
    scale: f32,
    seed: u64,
}

#[derive(Debug, Clone)]
struct Case {
    members: usize,
    mode: ModeRequest,
    rounds: Vec<Round>,
}

fn round(members: usize) -> impl Strategy<Value = Round> {
    let precision = prop_oneof![Just(Precision::Auto), Just(Precision::F32), Just(Precision::F16)];
    let threshold = prop_oneof![
        3 => Just(None),
        1 => Just(Some(0u64)),
        1 => (1u64..40_000).prop_map(Some),
    ];
    let zero = prop_oneof![
        3 => Just(Vec::new()),
        1 => proptest::sample::subsequence((0..members).collect::<Vec<_>>(), 1..=members),
    ];
    let scale = prop_oneof![4 => Just(1.0f32), 1 => Just(1000.0f32), 1 => Just(70_000.0f32)];
    (len(), precision, threshold, zero, scale, any::<u64>()).prop_map(
        |(len, precision, threshold, zero_contribution, scale, seed)| Round {
            len,
            precision,
            threshold,
            zero_contribution,
            scale,
            seed,
        },
    )
}

fn case() -> impl Strategy<Value = Case> {
    let mode = prop_oneof![
        Just(ModeRequest::Forced(Mode::HostBridge)),
        Just(ModeRequest::Forced(Mode::Generic)),
        Just(ModeRequest::Auto),
    ];
    (2usize..=4, mode).prop_flat_map(|(members, mode)| {
        // Growing sequences (sorted by length) make the slots grow round after round; others
        // also shrink back to small rounds on grown slots.
        (proptest::collection::vec(round(members), 1..=4), any::<bool>()).prop_map(
            move |(mut rounds, grow)| {
                if grow {
                    rounds.sort_by_key(|r| r.len);
                }
                Case { members, mode, rounds }
            },
        )
    })
}

fn options(mode: ModeRequest) -> CommOptions {
    CommOptions { mode, ..CommOptions::from_env().unwrap() }
}

/// Whether this round's partials go over the wire as f16. Generic mode rounds the partials it
/// reads back to f16 the same way (`Comm::generic`), so one rule serves every mode.
fn f16_wire(_comm: &Comm, r: &Round, comm_threshold: u64) -> bool {
    match r.precision {
        Precision::F32 => false,
        Precision::F16 => true,
        Precision::Auto => r.len as u64 * 4 >= r.threshold.unwrap_or(comm_threshold),
    }
}

fn inputs(r: &Round, members: usize) -> Vec<Vec<f32>> {
    let mut rng = common::rng(r.seed);
    (0..members).map(|_| common::random(&mut rng, r.len).into_iter().map(|v| v * r.scale).collect()).collect()
}

/// Checks every member's result against the f64 sum of the wire values of the contributing
/// members: the GPU (or Generic's CPU loop) adds N values in f32 in member order, so
/// |got - want| ≤ (N-1)·2^-24·Σ|x_j| (`reference::all_reduce` derives it); and all members
/// bitwise equal.
fn check(
    what: &str,
    parts: &[Vec<f32>],
    zero: &[usize],
    results: &[Vec<f32>],
    f16_wire: bool,
) -> Result<(), TestCaseError> {
    let n = parts[0].len();
    let reference = reference::all_reduce(parts, zero, f16_wire);
    let r0 = &results[0];
    prop_assert_eq!(r0.len(), n, "{}: member 0 length", what);
    for (i, (&g, (want, bound))) in r0.iter().zip(reference.pairs()).enumerate() {
        let got = g as f64;
        prop_assert!(
            (got - want).abs() <= bound,
            "{}: member 0 element {} of {}: got {} want {} (bound {:e}, f16 wire {})",
            what,
            i,
            n,
            g,
            want,
            bound,
            f16_wire
        );
    }
    for (j, r) in results.iter().enumerate().skip(1) {
        prop_assert_eq!(r.len(), n, "{}: member {} length", what, j);
        if let Some(i) = (0..n).find(|&i| r[i].to_bits() != r0[i].to_bits()) {
            return Err(TestCaseError::fail(format!(
                "{what}: member {j} differs bitwise from member 0 at element {i} of {n}: {} vs {}",
                r[i], r0[i]
            )));
        }
    }
    Ok(())
}

fn run_case(c: &Case) -> Result<(), TestCaseError> {
    let group = group(c.members);
    let opts = options(c.mode);
    let comm_threshold = opts.f16_threshold_bytes;
    let mut comm = Comm::with_options(group, opts).map_err(|e| TestCaseError::fail(e.to_string()))?;
    let mode = comm.mode();
    let cov = &COVERAGE;
    cov.cases.fetch_add(1, Ordering::Relaxed);
    if mode == Mode::Generic {
        cov.generic.fetch_add(1, Ordering::Relaxed);
    }
    if let ModeRequest::Forced(m) = c.mode {
        prop_assert_eq!(mode, m, "forced mode granted ({})", comm.reason());
    }
    for (k, r) in c.rounds.iter().enumerate() {
        let parts = inputs(r, c.members);
        let mut tensors: Vec<Tensor> =
            group.members().iter().zip(&parts).map(|(m, p)| m.upload_f32(p).unwrap()).collect();
        let wire16 = f16_wire(&comm, r, comm_threshold);
        let cap_before = comm.slot_capacity();
        let ar = AllReduceOptions {
            precision: r.precision,
            f16_threshold_bytes: r.threshold,
            zero_contribution: r.zero_contribution.clone(),
            ..Default::default()
        };
        comm.all_reduce(&mut tensors, &ar).map_err(|e| TestCaseError::fail(format!("round {k}: {e}")))?;
        let results: Vec<Vec<f32>> = tensors.iter().map(|t| t.read().unwrap()).collect();
        let what =
            format!("round {k} ({} elements, mode {}, slots {})", r.len, comm.mode(), comm.slot_capacity());
        check(&what, &parts, &r.zero_contribution, &results, wire16)?;
        cov.rounds.fetch_add(1, Ordering::Relaxed);
        cov.elements.fetch_add(r.len as u64, Ordering::Relaxed);
        cov.max_len.fetch_max(r.len, Ordering::Relaxed);
        cov.f16_wire.fetch_add(usize::from(wire16), Ordering::Relaxed);
        cov.zero_contribution.fetch_add(usize::from(!r.zero_contribution.is_empty()), Ordering::Relaxed);
        cov.growths.fetch_add(usize::from(comm.slot_capacity() > cap_before), Ordering::Relaxed);
    }
    prop_assert_eq!(comm.mode(), mode, "no fallback in the middle of a sequence ({})", comm.reason());
    Ok(())
}

#[test]
fn all_reduce_matches_the_f64_reference_and_members_agree_bitwise() {
    let _s = serial();
    if let Err(e) = runner().run(&case(), |c| run_case(&c)) {
        panic!("{e}");
    }
    let c = &COVERAGE;
    let g = |a: &AtomicUsize| a.load(Ordering::Relaxed);
    eprintln!(
        "covered: {} cases ({} in Generic), {} rounds, {} elements (largest {}), {} on the f16 wire, {} with zero-contribution members, {} slot growths",
        g(&c.cases),
        g(&c.generic),
        g(&c.rounds),
        c.elements.load(Ordering::Relaxed),
        g(&c.max_len),
        g(&c.f16_wire),
        g(&c.zero_contribution),
        g(&c.growths)
    );
    common::assert_no_validation_errors();
}

/// On the f32 wire HostBridge and Generic do the same f32 additions in the same order, so they
/// agree bit for bit, and a fallback from one to the other changes no result.
#[test]
fn host_bridge_and_generic_agree_bitwise_on_the_f32_wire() {
    let _s = serial();
    let strategy = (2usize..=4, len(), any::<u64>());
    let result = runner().run(&strategy, |(members, n, seed)| {
        let group = group(members);
        let mut bridge = Comm::with_options(group, options(ModeRequest::Forced(Mode::HostBridge))).unwrap();
        let mut generic = Comm::with_options(group, options(ModeRequest::Forced(Mode::Generic))).unwrap();
        let r = Round {
            len: n,
            precision: Precision::F32,
            threshold: None,
            zero_contribution: Vec::new(),
            scale: 1.0,
            seed,
        };
        let parts = inputs(&r, members);
        let ar = AllReduceOptions { precision: Precision::F32, ..Default::default() };
        let mut got = Vec::new();
        for comm in [&mut bridge, &mut generic] {
            let mut t: Vec<Tensor> =
                group.members().iter().zip(&parts).map(|(m, p)| m.upload_f32(p).unwrap()).collect();
            comm.all_reduce(&mut t, &ar).map_err(|e| TestCaseError::fail(e.to_string()))?;
            got.push(t[members - 1].read().unwrap());
        }
        if let Some(i) = (0..n).find(|&i| got[0][i].to_bits() != got[1][i].to_bits()) {
            return Err(TestCaseError::fail(format!(
                "{members} members, {n} elements: HostBridge {} vs Generic {} at element {i}",
                got[0][i], got[1][i]
            )));
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    common::assert_no_validation_errors();
}
