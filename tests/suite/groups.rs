//! Groups of several logical devices on lavapipe: members opened together, used from one thread
//! with their work interleaved, each result checked against the CPU; opening groups from the
//! `CROSSGPU_DEVICES` syntax (`GroupSpec::parse`); submit counting; teardown.

use crate::common;

use crate::common::reference::{self, ErrorModel, Ev};
use crate::common::{assert_bits, serial, to_f16};
use crossgpu::{AdapterSelector, DType, DeviceGroup, DeviceSpec, GroupSpec, Member, Tensor};

/// What one member works on, and the CPU's replay of it.
struct Work {
    a: Tensor,
    b: Tensor,
    h: Tensor,
    w: Tensor,
    x: Tensor,
    y: Tensor,
    cpu_a: Vec<f32>,
    cpu_b: Vec<f32>,
    cpu_h: Vec<f32>,
    /// Reference for y in f64 and its error bound.
    cpu_y: Vec<(f64, f64)>,
}

const N: usize = 4099;
const ROWS: usize = 33;
const COLS: usize = 515;

/// Uploads different random inputs on each member.
fn setup(m: &Member, seed: u64) -> Work {
    let mut rng = common::rng(seed);
    let a = common::random(&mut rng, N);
    let b = common::random(&mut rng, N);
    let w = common::random(&mut rng, ROWS * COLS);
    let x = common::random(&mut rng, COLS);
    // matvec reference over the f16 weights, bound gamma(COLS + 1) * sum |w x| (see kernels.rs).
    let held: Vec<f64> = w.iter().map(|&v| common::f16(v)).collect();
    let y = reference::matvec(&held, ROWS, &Ev::from_f32(&x), ErrorModel::Bound { extra: 1 });
    let cpu_y = y.v.into_iter().zip(y.e).collect();
    Work {
        a: m.upload_f32(&a).unwrap(),
        b: m.upload_f32(&b).unwrap(),
        h: m.empty(&[N], DType::F16).unwrap(),
        w: m.upload(&w, &[ROWS, COLS], DType::F16).unwrap(),
        x: m.upload_f32(&x).unwrap(),
        y: m.upload_f32(&common::random(&mut rng, ROWS)).unwrap(),
        cpu_a: a,
        cpu_b: b,
        cpu_h: vec![0.0; N],
        cpu_y,
    }
}

/// Step `k` of the work of member `m` (the same sequence on every member, on its own data).
fn step(m: &Member, w: &mut Work, k: usize) {
    let f = 0.5 + m.index() as f32 * 0.25;
    match k {
        0 => {
            m.add(&w.a, &w.b).unwrap();
            w.cpu_a.iter_mut().zip(&w.cpu_b).for_each(|(a, b)| *a += b);
        }
        1 => {
            m.scale(&w.a, f).unwrap();
            w.cpu_a.iter_mut().for_each(|a| *a *= f);
        }
        2 => {
            m.convert_f32_to_f16(&w.a, &w.h).unwrap();
            w.cpu_h = w.cpu_a.iter().map(|&a| to_f16(a)).collect();
        }
        3 => {
            m.matvec(&w.w, &w.x, &w.y).unwrap();
        }
        4 => {
            m.add_f16_into_f32(&w.b, &w.h).unwrap();
            w.cpu_b.iter_mut().zip(&w.cpu_h).for_each(|(b, h)| *b += h);
        }
        5 => {
            m.copy(&w.b, &w.a).unwrap();
            w.cpu_a.clone_from(&w.cpu_b);
        }
        _ => unreachable!(),
    }
}

const STEPS: usize = 6;

fn check(m: &Member, w: &Work) {
    let what = |t: &str| format!("member {} {t}", m.index());
    // Each of these ops is one correctly rounded f32 op per element (or exact), so the CPU's f32
    // replay must match bit for bit.
    assert_bits(&what("a"), &w.a.read().unwrap(), &w.cpu_a);
    assert_bits(&what("b"), &w.b.read().unwrap(), &w.cpu_b);
    assert_bits(&what("h"), &w.h.read().unwrap(), &w.cpu_h);
    let y = w.y.read().unwrap();
    for (r, (&g, &(want, bound))) in y.iter().zip(&w.cpu_y).enumerate() {
        assert!(
            (g as f64 - want).abs() <= bound,
            "{}: row {r}: got {g} want {want} (bound {bound:e})",
            what("y")
        );
    }
}

/// Round-robin over the members: step k of every member, then step k + 1, ...; one member is
/// flushed part-way and another read part-way, so members' streams are in different states.
fn interleaved(group: &DeviceGroup) {
    let n = group.len();
    let mut work: Vec<Work> = group.members().iter().map(|m| setup(m, 1000 + m.index() as u64)).collect();
    for k in 0..STEPS {
        for (m, w) in group.members().iter().zip(work.iter_mut()) {
            step(m, w, k);
        }
        if k == 2 {
            group.member(n - 1).unwrap().flush().unwrap();
        }
        if k == 3 {
            // Reading member 0 submits member 0's work only.
            let before: Vec<u64> = group.members().iter().map(|m| m.stats().submits).collect();
            let h0 = work[0].h.read().unwrap();
            assert_bits("member 0 h part-way", &h0, &work[0].cpu_h);
            for (i, m) in group.members().iter().enumerate() {
                let want = before[i] + u64::from(i == 0);
                assert_eq!(m.stats().submits, want, "member {i}'s submits after member 0's read");
            }
        }
    }
    // Read back in reverse member order.
    for (m, w) in group.members().iter().zip(&work).rev() {
        check(m, w);
    }
    // Members had different inputs: their results differ.
    assert_ne!(work[0].cpu_a, work[1].cpu_a);
}

/// The stand-ins `common::logical` opens instead of one VkDevice per member:
/// `CROSSGPU_TEST_STANDINS` (`1` or `shared`) unless `CROSSGPU_TEST_ADAPTERS` spreads them.
fn logical_standins() -> Option<String> {
    let spread = std::env::var_os("CROSSGPU_TEST_ADAPTERS").is_some();
    std::env::var("CROSSGPU_TEST_STANDINS").ok().filter(|_| !spread)
}

/// `n` members each its own VkDevice with queue 0 (`"{l},{l}"`, and what `common::logical`
/// opens), on the adapters the layout names (adapter 0 here; spread over GPUs with
/// `CROSSGPU_TEST_ADAPTERS`); or, for `standins` (`logical_standins`), one VkDevice whose `n`
/// queues stand in for devices (`1`) or whose one queue the `n` members share (`shared`).
fn check_members(group: &DeviceGroup, n: usize, standins: Option<&str>) {
    assert_eq!(group.len(), n);
    assert!(!group.is_empty());
    assert_eq!(group.members().len(), n);
    for (i, m) in group.members().iter().enumerate() {
        assert_eq!(m.index(), i);
        assert_eq!(group.member(i).unwrap().index(), i);
        assert_eq!(m.group_id(), group.id());
    }
    let kind = standins.filter(|k| matches!(*k, "1" | "shared"));
    match kind {
        Some(k) => {
            let adapter = group.members()[0].adapter().index;
            assert_eq!(group.layout(), &[(adapter, n as u32)], "one VkDevice of {n} members ({k})");
        }
        None => {
            assert_eq!(group.layout().len(), n);
            for (i, m) in group.members().iter().enumerate() {
                assert_eq!(group.layout()[i], (m.adapter().index, 1), "member {i}'s layout entry");
            }
        }
    }
    for (i, m) in group.members().iter().enumerate() {
        let want = match kind {
            Some("1") => format!("VkDevice 0, queue {i})"),
            Some(_) => "VkDevice 0, shared queue 0)".to_string(),
            // Each item is its own VkDevice, with queue 0.
            None => format!("VkDevice {i}, queue 0)"),
        };
        assert!(
            m.label().contains(&format!("member {i}:")) && m.label().contains(&want),
            "label {:?}",
            m.label()
        );
    }
}

#[test]
fn two_logical_devices_interleaved() {
    let _s = serial();
    let group = common::logical(2);
    check_members(&group, 2, logical_standins().as_deref());
    interleaved(&group);
    common::assert_no_validation_errors();
}

#[test]
fn three_logical_devices_interleaved() {
    let _s = serial();
    let group = common::logical(3);
    check_members(&group, 3, logical_standins().as_deref());
    interleaved(&group);
    group.synchronize().unwrap();
    common::assert_no_validation_errors();
}

#[test]
fn two_groups_at_once_are_independent() {
    let _s = serial();
    let g1 = common::logical(2);
    let g2 = common::logical(2);
    assert_ne!(g1.id(), g2.id());
    let mut rng = common::rng(7);
    let data = common::random(&mut rng, 1001);
    // The same input on all four members: the same kernels give the same bits everywhere.
    let ts: Vec<(Tensor, &Member)> =
        g1.members().iter().chain(g2.members()).map(|m| (m.upload_f32(&data).unwrap(), m)).collect();
    for (t, m) in &ts {
        m.scale(t, 3.0).unwrap();
        m.add(t, t).unwrap();
    }
    let want: Vec<f32> = data.iter().map(|v| v * 3.0 * 2.0).collect();
    for (t, m) in &ts {
        assert_eq!(t.member_index(), m.index());
        assert_bits(&format!("{m:?}"), &t.read().unwrap(), &want);
    }
    common::assert_no_validation_errors();
}

#[test]
fn group_spec_parse_forms() {
    use AdapterSelector::{Index, Name};
    let _s = serial();
    let d = |adapter, queues| DeviceSpec { adapter, queues, shared_queue: false };
    assert_eq!(GroupSpec::parse("all").unwrap(), GroupSpec::All);
    assert_eq!(GroupSpec::parse("ALL").unwrap(), GroupSpec::All);
    assert_eq!(GroupSpec::parse("").unwrap(), GroupSpec::All);
    assert_eq!(GroupSpec::parse("  ").unwrap(), GroupSpec::All);
    assert_eq!(GroupSpec::parse("0,0").unwrap(), GroupSpec::Devices(vec![d(Index(0), 1), d(Index(0), 1)]));
    assert_eq!(
        GroupSpec::parse(" 0 , 1 ").unwrap(),
        GroupSpec::Devices(vec![d(Index(0), 1), d(Index(1), 1)])
    );
    assert_eq!(
        GroupSpec::parse("0x2,1X3").unwrap(),
        GroupSpec::Devices(vec![d(Index(0), 2), d(Index(1), 3)])
    );
    assert_eq!(
        GroupSpec::parse("llvmpipe").unwrap(),
        GroupSpec::Devices(vec![d(Name("llvmpipe".into()), 1)])
    );
    assert_eq!(
        GroupSpec::parse("LLVMpipe,nvidia*4,amd radeon,rx7900,2*2").unwrap(),
        GroupSpec::Devices(vec![
            d(Name("llvmpipe".into()), 1),
            d(Name("nvidia".into()), 4),
            d(Name("amd radeon".into()), 1),
            d(Name("rx7900".into()), 1),
            d(Index(2), 2),
        ])
    );
    assert_eq!(GroupSpec::parse("0x64").unwrap(), GroupSpec::Devices(vec![d(Index(0), 64)]));
    common::assert_no_validation_errors();
}

#[test]
fn open_from_parsed_specs() {
    let _s = serial();
    let inst = common::instance();
    // Checks that every member of `g` works: a small add on each.
    let works = |g: &DeviceGroup| {
        for m in g.members() {
            let t = m.upload_f32(&[1.5, -2.0, 0.25]).unwrap();
            m.add(&t, &t).unwrap();
            assert_eq!(t.read().unwrap(), [3.0, -4.0, 0.5], "{m:?}");
        }
    };
    let open = |s: &str| DeviceGroup::open(&inst, &GroupSpec::parse(s).unwrap()).unwrap();
    // Name lookups below are lavapipe's; on the GPU machine lavapipe is not adapter 0.
    let Some(l) = common::lavapipe_index() else { return };

    let g = open(&format!("{l},{l}"));
    check_members(&g, 2, None);
    assert_eq!(g.layout(), &[(l, 1), (l, 1)]);
    works(&g);

    for name in ["llvmpipe", "LLVMPIPE", " llvm "] {
        let g = open(name);
        assert_eq!(g.len(), 1, "{name}");
        assert_eq!(g.layout(), &[(l, 1)], "{name}");
        assert!(g.members()[0].adapter().name.contains("llvmpipe"), "{name}");
        works(&g);
    }
    // By vendor name (lavapipe reports Mesa's vendor id) and by driver id.
    assert_eq!(inst.adapters()[l].vendor_name(), "mesa");
    for name in ["mesa", "mesa_llvmpipe"] {
        let g = open(name);
        assert_eq!(g.layout(), &[(l, 1)], "{name}");
    }
    // Index and name mixed: two VkDevices on the same adapter.
    let g = open(&format!("{l}, llvmpipe"));
    check_members(&g, 2, None);
    works(&g);
    // One queue, spelled out.
    let g = open(&format!("{l}x1"));
    assert_eq!(g.layout(), &[(l, 1)]);
    works(&g);

    // `all`: every adapter once, or two members on the only one (two VkDevices when it has a
    // single queue, as lavapipe does).
    let g = open("all");
    let adapters = inst.adapters();
    if adapters.len() == 1 {
        assert_eq!(g.len(), 2);
        if adapters[0].caps.queue_count >= 2 {
            assert_eq!(g.layout(), &[(0, 2)]);
        } else {
            assert_eq!(g.layout(), &[(0, 1), (0, 1)]);
        }
    } else {
        assert_eq!(g.len(), adapters.len());
    }
    works(&g);

    // from_env reads CROSSGPU_DEVICES (not set here: the test does not change the environment).
    let g = DeviceGroup::from_env(&inst).unwrap();
    let spec = match std::env::var("CROSSGPU_DEVICES") {
        Ok(s) => GroupSpec::parse(&s).unwrap(),
        Err(_) => GroupSpec::All,
    };
    assert_eq!(g.layout(), spec.resolve(adapters).unwrap().as_slice());
    works(&g);
    common::assert_no_validation_errors();
}

#[test]
fn submit_count_counts_queue_submits() {
    let _s = serial();
    let group = common::logical(2);
    let (m0, m1) = (group.member(0).unwrap(), group.member(1).unwrap());
    assert_eq!(m0.stats().submits, 0, "a new member has submitted nothing");
    // Nothing recorded: flush and synchronize submit nothing.
    m0.flush().unwrap();
    m0.synchronize().unwrap();
    assert_eq!(m0.stats().submits, 0);

    // An upload is recorded, not submitted.
    let a = m0.upload_f32(&[1.0, 2.0, 3.0]).unwrap();
    let b = m0.upload_f32(&[0.5, 0.5, 0.5]).unwrap();
    assert_eq!(m0.stats().submits, 0);
    // Many ops, one flush: one submit.
    for _ in 0..10 {
        m0.add(&a, &b).unwrap();
    }
    assert_eq!(m0.stats().submits, 0);
    m0.flush().unwrap();
    assert_eq!(m0.stats().submits, 1);
    m0.flush().unwrap();
    assert_eq!(m0.stats().submits, 1, "flush with nothing recorded");
    // A read records a copy and submits once.
    assert_eq!(a.read().unwrap(), [6.0, 7.0, 8.0]);
    assert_eq!(m0.stats().submits, 2);
    // Ops then a read: still one submit.
    m0.scale(&a, 2.0).unwrap();
    m0.add(&a, &b).unwrap();
    assert_eq!(a.read().unwrap(), [12.5, 14.5, 16.5]);
    assert_eq!(m0.stats().submits, 3);
    m0.synchronize().unwrap();
    assert_eq!(m0.stats().submits, 3, "synchronize with nothing recorded");
    // Work then synchronize: one submit.
    m0.scale(&b, 2.0).unwrap();
    m0.synchronize().unwrap();
    assert_eq!(m0.stats().submits, 4);
    // Ops with nothing to do (empty tensors) record nothing; an empty read submits nothing.
    let e = m0.empty(&[0], DType::F32).unwrap();
    m0.fill(&e, 1.0).unwrap();
    m0.add(&e, &e).unwrap();
    m0.scale(&e, 2.0).unwrap();
    assert!(e.read().unwrap().is_empty());
    m0.flush().unwrap();
    assert_eq!(m0.stats().submits, 4);

    // Member 1 counts separately; group.synchronize flushes every member with work.
    assert_eq!(m1.stats().submits, 0);
    let c = m1.upload_f32(&[4.0]).unwrap();
    m1.scale(&c, 0.5).unwrap();
    m0.scale(&a, 0.5).unwrap();
    group.synchronize().unwrap();
    assert_eq!(m0.stats().submits, 5);
    assert_eq!(m1.stats().submits, 1);
    group.synchronize().unwrap();
    assert_eq!((m0.stats().submits, m1.stats().submits), (5, 1));
    assert_eq!(c.read().unwrap(), [2.0]);
    assert_eq!((m0.stats().submits, m1.stats().submits), (5, 2));
    common::assert_no_validation_errors();
}

#[test]
fn teardown_with_pending_work_and_surviving_tensors() {
    let _s = serial();
    let mut rng = common::rng(9);
    let data = common::random(&mut rng, 100_003);
    // A group dropped with work recorded but never submitted, and with work submitted but not
    // waited for.
    {
        let group = common::logical(2);
        let m0 = group.member(0).unwrap();
        let m1 = group.member(1).unwrap();
        let t0 = m0.upload_f32(&data).unwrap();
        let t1 = m1.upload_f32(&data).unwrap();
        for _ in 0..20 {
            m0.scale(&t0, 1.5).unwrap();
            m1.add(&t1, &t1).unwrap();
        }
        m1.flush().unwrap();
    }
    // A tensor that outlives its group still reads (it keeps its member alive).
    let t = {
        let group = common::logical(2);
        let m = group.member(1).unwrap();
        let t = m.upload_f32(&data).unwrap();
        m.scale(&t, -2.0).unwrap();
        t
    };
    let want: Vec<f32> = data.iter().map(|v| v * -2.0).collect();
    assert_bits("tensor read after its group was dropped", &t.read().unwrap(), &want);
    drop(t);
    common::assert_no_validation_errors();
}

/// Explicit group options (issue 16): `open_with` reads no environment; values outside the
/// variables' ranges are refused; one submit in flight still computes correctly (every
/// recording past the first waits for the oldest).
#[test]
fn explicit_group_options_are_used_and_checked() {
    let _s = serial();
    let inst = common::instance();
    let spec = GroupSpec::parse("0,0").unwrap();
    for bad in [
        crossgpu::GroupOptions { timeout_ms: 0, ..Default::default() },
        crossgpu::GroupOptions { timeout_ms: 86_400_001, ..Default::default() },
        crossgpu::GroupOptions { max_in_flight: 0, ..Default::default() },
        crossgpu::GroupOptions { max_in_flight: 65_537, ..Default::default() },
    ] {
        let r = DeviceGroup::open_with(&inst, &spec, &bad);
        assert!(matches!(r, Err(crossgpu::Error::InvalidArgument(_))), "{bad:?}: {r:?}");
    }
    let opts = crossgpu::GroupOptions { timeout_ms: 30_000, max_in_flight: 1 };
    let group = DeviceGroup::open_with(&inst, &spec, &opts).unwrap();
    let mut rng = common::rng(16);
    for m in group.members() {
        let data = common::random(&mut rng, 4097);
        let t = m.upload_f32(&data).unwrap();
        for _ in 0..5 {
            m.scale(&t, 2.0).unwrap();
            m.flush().unwrap();
        }
        let want: Vec<f32> = data.iter().map(|v| v * 32.0).collect();
        assert_bits("five scales, one submit in flight at a time", &t.read().unwrap(), &want);
    }
    common::assert_no_validation_errors();
}
