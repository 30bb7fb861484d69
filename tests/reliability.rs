//! Reliability of the all-reduce (issue 7): no hang when a release never comes, fault injection
//! (host allocation and host-pointer import failures at creation and at growth, device loss),
//! misuse (bad environment values, `Send`/`Sync`, use from another thread). Drop orders and
//! live-object counts are in `tests/drop_orders.rs` (their own binary: the counters are
//! process-wide).
//!
//! Tests that need environment variables (which tests in one process must not change under each
//! other) run in a child process: the test re-invokes this binary with the variables set and a
//! filter selecting an `#[ignore]`d helper test, then checks what the helper printed.

mod common;

use std::process::Command;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use crossgpu::{
    AllReduceOptions, Comm, CommOptions, DeviceGroup, Error, GroupSpec, Mode, ModeRequest, Precision, Tensor,
};
use rand::Rng;

// ---------------------------------------------------------------------------------------------
// Harness: a logger that keeps crossgpu's warnings per thread, so a test can check that its own
// fallback was logged; the f64 reference check of tests/allreduce.rs.

struct Capture;

fn captured() -> &'static Mutex<Vec<(std::thread::ThreadId, String)>> {
    static LOG: OnceLock<Mutex<Vec<(std::thread::ThreadId, String)>>> = OnceLock::new();
    LOG.get_or_init(|| Mutex::new(Vec::new()))
}

impl log::Log for Capture {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        m.level() <= log::Level::Warn
    }
    fn log(&self, r: &log::Record<'_>) {
        if self.enabled(r.metadata()) {
            let msg = format!("{} {}: {}", r.level(), r.target(), r.args());
            eprintln!("{msg}");
            captured().lock().unwrap_or_else(|p| p.into_inner()).push((std::thread::current().id(), msg));
        }
    }
    fn flush(&self) {}
}

/// Installs the capturing logger (before the harness's env_logger, which then stays out).
fn init() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        if log::set_boxed_logger(Box::new(Capture)).is_ok() {
            log::set_max_level(log::LevelFilter::Warn);
        }
    });
}

/// The warnings logged on this thread so far.
fn my_warnings() -> Vec<String> {
    let me = std::thread::current().id();
    captured()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .filter(|(t, _)| *t == me)
        .map(|(_, m)| m.clone())
        .collect()
}

fn logical(n: usize) -> DeviceGroup {
    init();
    common::logical(n)
}

fn options(mode: ModeRequest) -> CommOptions {
    CommOptions { mode, ..CommOptions::from_env().unwrap() }
}

fn random_parts(seed: u64, members: usize, n: usize) -> Vec<Vec<f32>> {
    let mut rng = common::rng(seed);
    (0..members).map(|_| common::random(&mut rng, n)).collect()
}

fn upload(group: &DeviceGroup, parts: &[Vec<f32>]) -> Vec<Tensor> {
    group.members().iter().zip(parts).map(|(m, p)| m.upload_f32(p).unwrap()).collect()
}

/// Checks `results` (one per member) against the f64 sum of `parts` (f32 wire unless
/// `f16_wire`; `reference::all_reduce`): |got - want| ≤ (N-1)·2^-24·Σ|x_j|, and every member
/// bitwise equal to member 0.
fn check(what: &str, parts: &[Vec<f32>], results: &[Vec<f32>], f16_wire: bool) {
    let n = parts[0].len();
    let reference = common::reference::all_reduce(parts, &[], f16_wire);
    for (j, r) in results.iter().enumerate() {
        assert_eq!(r.len(), n, "{what}: member {j} length");
        for (i, (&g, (want, bound))) in r.iter().zip(reference.pairs()).enumerate() {
            assert!(
                (g as f64 - want).abs() <= bound,
                "{what}: member {j} element {i} of {n}: got {g} want {want} (bound {bound:e})"
            );
        }
        assert!(
            r.iter().map(|v| v.to_bits()).eq(results[0].iter().map(|v| v.to_bits())),
            "{what}: member {j} differs bitwise from member 0"
        );
    }
}

fn read_all(tensors: &[Tensor]) -> Vec<Vec<f32>> {
    tensors.iter().map(|t| t.read().unwrap()).collect()
}

/// Runs the ignored helper test `name` of this binary in a child process with `env` set (and
/// every other crossgpu configuration variable removed), returns its exit status and output.
fn child(name: &str, env: &[(&str, &str)]) -> (bool, String) {
    // Under scripts/newer-lavapipe.sh the child starts through the same wrapper (its driver
    // needs trixie's loader and libraries); there the process's executable is that loader, and
    // argv[0] the test binary.
    let mut cmd = match std::env::var_os("CROSSGPU_TEST_WRAPPER") {
        Some(wrapper) => {
            let mut c = Command::new(wrapper);
            c.arg("run").arg(std::env::args_os().next().expect("argv[0], the test binary"));
            c
        }
        None => Command::new(std::env::current_exe().expect("the test binary's path")),
    };
    cmd.args([name, "--exact", "--ignored", "--nocapture", "--test-threads=1"]);
    for v in [
        "CROSSGPU_DEVICES",
        "CROSSGPU_TIMEOUT_MS",
        "CROSSGPU_ALLREDUCE",
        "CROSSGPU_ALLREDUCE_SPIN_US",
        "CROSSGPU_F16_WIRE_BYTES",
        "CROSSGPU_MAX_IN_FLIGHT",
        "CROSSGPU_PHASE_A_KERNEL_BYTES",
    ] {
        cmd.env_remove(v);
    }
    cmd.env("CROSSGPU_RELIABILITY_CHILD", "1");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("running the test binary as a child");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

/// The lines the helper printed with `CHILD ` in front, without it.
fn child_lines(output: &str) -> Vec<String> {
    // Anywhere in a line: libtest prints `test NAME ... ` before the test's first output.
    output.lines().filter_map(|l| l.find("CHILD ").map(|p| l[p + 6..].to_string())).collect()
}

/// Whether this process is a child started by [`child`] (helpers do nothing otherwise).
fn in_child() -> bool {
    std::env::var("CROSSGPU_RELIABILITY_CHILD").as_deref() == Ok("1")
}

// ---------------------------------------------------------------------------------------------
// (a) No hang.

/// A bridge that never releases member 1: the Comm's own timeout bounds the wait, the error names
/// the round and the member, the Comm is poisoned afterwards, dropping it completes, and the
/// group is usable again by a new Comm.
#[test]
fn withheld_release_times_out_poisons_the_comm_and_drop_completes() {
    let group = logical(3);
    let opts =
        CommOptions { timeout: Duration::from_millis(300), ..options(ModeRequest::Forced(Mode::HostBridge)) };
    let mut comm = Comm::with_options(&group, opts).unwrap();
    comm.withhold_release(1);
    let parts = random_parts(11, 3, 1000);
    let mut t = upload(&group, &parts);
    // Round 1: phase A goes out; the bridge releases members 0 and 2, never member 1. The call
    // itself does not wait for the release, so it returns Ok, or the timeout if it came first.
    match comm.all_reduce(&mut t, &AllReduceOptions::default()) {
        Ok(()) | Err(Error::Timeout { .. }) => {}
        Err(e) => panic!("first all-reduce: unexpected {e:?}"),
    }
    // Let the bridge's own 300 ms bound on round 1 pass first (not a time limit: the wait
    // below has the same bound, and whichever fires first decides the message; the bridge's
    // names the member, see docs/RELIABILITY.md).
    std::thread::sleep(Duration::from_millis(600));
    // A larger all-reduce must grow the slots, which first waits for every earlier round to be
    // released: that wait is bounded by the Comm's timeout and fails naming round and member.
    let big = random_parts(12, 3, 20_000);
    let mut tb = upload(&group, &big);
    let err = comm.all_reduce(&mut tb, &AllReduceOptions::default()).unwrap_err();
    let msg = err.to_string();
    match &err {
        Error::Timeout { what, .. } => {
            assert!(what.contains("round 1"), "the timeout names the round: {msg}");
            assert!(what.contains("member 1"), "the timeout names the member: {msg}");
        }
        Error::Poisoned(..) => assert!(msg.contains("round 1") && msg.contains("member 1"), "{msg}"),
        e => panic!("expected a timeout, got {e:?}"),
    }
    // Poisoned from now on, with the original cause in the message.
    for _ in 0..2 {
        match comm.all_reduce(&mut t, &AllReduceOptions::default()) {
            Err(Error::Poisoned(what, cause)) => {
                assert_eq!(what, "the communicator");
                assert!(cause.contains("round 1") && cause.contains("member 1"), "cause: {cause}");
            }
            r => panic!("a poisoned Comm must refuse: {r:?}"),
        }
    }
    // Dropping the poisoned Comm signals every `go` so no queue stays blocked, and returns.
    drop(comm);
    drop(t);
    drop(tb);
    // The members drained: a new Comm on the same group sums correctly.
    let mut comm = Comm::with_options(&group, options(ModeRequest::Forced(Mode::HostBridge))).unwrap();
    let parts = random_parts(13, 3, 777);
    let mut t = upload(&group, &parts);
    comm.all_reduce(&mut t, &AllReduceOptions::default()).unwrap();
    check("after recovery", &parts, &read_all(&t), false);
    drop(comm);
    drop(t);
    drop(group);
    common::assert_no_validation_errors();
}

/// As above, followed by reading the tensors, which waits on the members' queues; those waits
/// are bounded by `CROSSGPU_TIMEOUT_MS` (the group's), so this runs in a child process with it set
/// low.
#[test]
fn withheld_release_then_reading_returns_errors_instead_of_blocking() {
    init();
    let (ok, out) = child("child_withheld_release_then_read", &[("CROSSGPU_TIMEOUT_MS", "2000")]);
    let lines = child_lines(&out);
    assert!(ok && lines.iter().any(|l| l == "done"), "child failed:\n{out}");
    eprintln!("child reported:\n  {}", lines.join("\n  "));
    common::assert_no_validation_errors();
}

#[test]
#[ignore = "helper: run in a child process by withheld_release_then_reading_returns_errors_instead_of_blocking"]
fn child_withheld_release_then_read() {
    if !in_child() {
        return;
    }
    let group = logical(3);
    let opts =
        CommOptions { timeout: Duration::from_millis(300), ..options(ModeRequest::Forced(Mode::HostBridge)) };
    let mut comm = Comm::with_options(&group, opts).unwrap();
    comm.withhold_release(1);
    let parts = random_parts(21, 3, 1000);
    let mut t = upload(&group, &parts);
    let first = comm.all_reduce(&mut t, &AllReduceOptions::default());
    println!("CHILD all_reduce: {first:?}");
    let want: Vec<f32> = (0..1000).map(|i| parts[0][i] + parts[1][i] + parts[2][i]).collect();
    let mut errors = usize::from(first.is_err());
    for (j, tensor) in t.iter().enumerate() {
        match tensor.read() {
            // A member that was released holds the right sum: no silent corruption.
            Ok(v) => {
                assert_ne!(j, 1, "member 1 was never released, yet its read succeeded");
                assert_eq!(v, want, "member {j} was released and must hold the sum");
                println!("CHILD read member {j}: ok, correct sum");
            }
            Err(e) => {
                println!("CHILD read member {j}: {e}");
                assert!(matches!(e, Error::Timeout { .. } | Error::Poisoned(..)), "member {j}: {e:?}");
                assert!(e.to_string().contains(&format!("member {j}")), "names the member: {e}");
                errors += 1;
            }
        }
    }
    assert!(errors > 0, "withholding member 1's release produced no error at all");
    // The next call reports the bridge's timeout (naming round and member) or is refused as
    // poisoned; every call after that is refused.
    let next = comm.all_reduce(&mut t, &AllReduceOptions::default());
    println!("CHILD next all_reduce: {next:?}");
    match next {
        Err(Error::Timeout { what, .. }) => {
            assert!(what.contains("round 1") && what.contains("member 1"), "{what}")
        }
        Err(Error::Poisoned(..)) => {}
        r => panic!("expected Timeout or Poisoned, got {r:?}"),
    }
    let later = comm.all_reduce(&mut t, &AllReduceOptions::default());
    println!("CHILD later all_reduce: {later:?}");
    assert!(matches!(later, Err(Error::Poisoned(..))), "{later:?}");
    drop(t);
    drop(comm);
    drop(group);
    common::assert_no_validation_errors();
    println!("CHILD done");
}

// ---------------------------------------------------------------------------------------------
// (b) Fault injection.

#[test]
fn host_allocation_or_import_failure_at_creation_falls_back_to_generic() {
    let group = logical(3);
    for (fail_alloc, fail_import, what) in
        [(true, false, "host slot allocation failed"), (false, true, "host pointer import into")]
    {
        for mode in [ModeRequest::Auto, ModeRequest::Forced(Mode::HostBridge)] {
            let mut comm = Comm::with_faults(&group, options(mode), fail_alloc, fail_import).unwrap();
            assert_eq!(comm.mode(), Mode::Generic, "{mode:?}, alloc {fail_alloc}, import {fail_import}");
            assert!(
                comm.reason().starts_with("fallback: ") && comm.reason().contains(what),
                "{}",
                comm.reason()
            );
            assert!(
                my_warnings().iter().any(|w| w.contains("falls back to Generic") && w.contains(what)),
                "a warning names the fallback and its cause: {:?}",
                my_warnings()
            );
            assert_eq!(comm.slot_capacity(), 0);
            for (seed, n) in [(31, 1), (32, 4097), (33, 300_001)] {
                let parts = random_parts(seed, 3, n);
                let mut t = upload(&group, &parts);
                comm.all_reduce(&mut t, &AllReduceOptions::default()).unwrap();
                // Generic keeps the wire precision Auto picks (f16 from 1 MiB).
                check(
                    &format!("fallback at creation, {n} elements"),
                    &parts,
                    &read_all(&t),
                    n * 4 >= 1 << 20,
                );
            }
        }
    }
    common::assert_no_validation_errors();
}

/// Growth that fails (allocation or import of the larger slots) falls back to Generic for that
/// call and every later one; nothing recorded before is lost: a round still in flight (its phase
/// B not yet submitted) completes with the right sum.
#[test]
fn growth_failure_falls_back_to_generic_and_loses_no_data() {
    let group = logical(3);
    for (alloc, import, what) in
        [(true, false, "host slot allocation failed"), (false, true, "host pointer import")]
    {
        let mut comm = Comm::with_options(&group, options(ModeRequest::Forced(Mode::HostBridge))).unwrap();
        // Two rounds in flight, not read: the second all-reduces the first's output again.
        let small = random_parts(41, 3, 1000);
        let mut ts = upload(&group, &small);
        comm.all_reduce(&mut ts, &AllReduceOptions::default()).unwrap();
        comm.all_reduce(&mut ts, &AllReduceOptions::default()).unwrap();
        assert_eq!(comm.mode(), Mode::HostBridge);
        let cap = comm.slot_capacity();
        comm.inject_growth_failure(alloc, import);
        // Larger than the slots: growth, which fails.
        let n = cap as usize * 3 + 5;
        let big = random_parts(42, 3, n);
        let mut tb = upload(&group, &big);
        comm.all_reduce(&mut tb, &AllReduceOptions { precision: Precision::F32, ..Default::default() })
            .unwrap();
        assert_eq!(comm.mode(), Mode::Generic, "growth failure falls back ({})", comm.reason());
        assert!(comm.reason().contains(what), "{}", comm.reason());
        assert!(
            my_warnings().iter().any(|w| w.contains("falls back to Generic") && w.contains(what)),
            "a warning names the fallback: {:?}",
            my_warnings()
        );
        check(&format!("{what}: the round that grew"), &big, &read_all(&tb), false);
        // The rounds before the fallback: sum, then sum of the sums (3 × the sum, in f32).
        let got = read_all(&ts);
        for (j, r) in got.iter().enumerate() {
            for i in 0..1000 {
                let s = small[0][i] + small[1][i] + small[2][i];
                assert_eq!(r[i], s + s + s, "{what}: in-flight rounds, member {j} element {i}");
            }
        }
        // And it keeps working, in Generic, at every size.
        for (seed, n) in [(43, 10), (44, 70_000)] {
            let parts = random_parts(seed, 3, n);
            let mut t = upload(&group, &parts);
            comm.all_reduce(&mut t, &AllReduceOptions::default()).unwrap();
            check(&format!("{what}: after the fallback"), &parts, &read_all(&t), false);
        }
    }
    common::assert_no_validation_errors();
}

/// A device lost on one member: the next operation that submits on it fails with DeviceLost
/// (poisoning the Comm when it was an all-reduce), nothing hangs, and everything drops.
#[test]
fn device_lost_surfaces_as_an_error_and_nothing_hangs() {
    for mode in [Mode::HostBridge, Mode::Generic] {
        let group = logical(3);
        let mut comm = Comm::with_options(&group, options(ModeRequest::Forced(mode))).unwrap();
        let parts = random_parts(51, 3, 2000);
        let mut t = upload(&group, &parts);
        comm.all_reduce(&mut t, &AllReduceOptions::default()).unwrap();
        check(&format!("{mode}: before the loss"), &parts, &read_all(&t), false);
        // One more round in flight (phase B pending), then the device is lost.
        comm.all_reduce(&mut t, &AllReduceOptions::default()).unwrap();
        group.members()[1].inject_device_lost();
        let err = comm.all_reduce(&mut t, &AllReduceOptions::default()).unwrap_err();
        // Members standing in on one VkDevice (CROSSGPU_TEST_STANDINS) lose it together, so the
        // first member to submit may be the one named.
        let shares_device = group.layout().len() < group.len();
        match &err {
            Error::DeviceLost { device } => {
                assert!(shares_device || device.contains("member 1"), "names the member: {err}")
            }
            e => panic!("{mode}: expected DeviceLost, got {e:?}"),
        }
        assert!(
            matches!(comm.all_reduce(&mut t, &AllReduceOptions::default()), Err(Error::Poisoned(..))),
            "{mode}: the Comm is poisoned after a device loss"
        );
        // The lost member's own operations fail fast too.
        assert!(matches!(t[1].read(), Err(Error::DeviceLost { .. })), "{mode}: read on the lost member");
        assert!(matches!(group.members()[1].synchronize(), Err(Error::DeviceLost { .. })));
        assert!(matches!(group.members()[1].upload_f32(&[1.0]), Err(Error::DeviceLost { .. })));
        // The other members still work on their own, unless they stand in on the lost VkDevice
        // (CROSSGPU_TEST_STANDINS: every member of `logical` is on one VkDevice then).
        if shares_device {
            assert!(
                matches!(t[0].read(), Err(Error::DeviceLost { .. })),
                "{mode}: member 0 shares the device"
            );
        } else {
            assert_eq!(t[0].read().unwrap().len(), 2000);
        }
        drop(comm);
        drop(t);
        drop(group);
    }
    common::assert_no_validation_errors();
}

// ---------------------------------------------------------------------------------------------
// (c) Misuse: bad configuration values are errors naming the variable.

fn bad_config_name(e: &Error) -> Option<&'static str> {
    match e {
        Error::BadConfig { name, .. } => Some(name),
        _ => None,
    }
}

#[test]
fn bad_mode_and_device_specs_are_clear_errors() {
    init();
    for bad in ["bogus", "host", "bridge2", "sync-fd-", "generic,auto", "1"] {
        let e = ModeRequest::parse(bad).unwrap_err();
        assert_eq!(bad_config_name(&e), Some("CROSSGPU_ALLREDUCE"), "{bad}: {e:?}");
        let msg = e.to_string();
        assert!(msg.contains("CROSSGPU_ALLREDUCE") && msg.contains(bad), "{msg}");
        assert!(msg.contains("auto, bridge, sync_fd, poll or generic"), "says what is expected: {msg}");
    }
    for (s, want) in [
        ("", ModeRequest::Auto),
        ("AUTO", ModeRequest::Auto),
        (" bridge ", ModeRequest::Forced(Mode::HostBridge)),
        ("HostBridge", ModeRequest::Forced(Mode::HostBridge)),
        ("sync_fd", ModeRequest::Forced(Mode::SyncFd)),
        ("Generic", ModeRequest::Forced(Mode::Generic)),
    ] {
        assert_eq!(ModeRequest::parse(s).unwrap(), want, "'{s}'");
    }
    for bad in [
        "0,",
        ",0",
        "0,,1",
        "0x0",
        "0x65",
        "0*0",
        "0*",
        "*2",
        "a*b",
        "0x-1",
        "a/b",
        "99999999999999999999999",
        "0*99999999999",
        "llvmpipe;0",
    ] {
        let e = GroupSpec::parse(bad).unwrap_err();
        assert_eq!(bad_config_name(&e), Some("CROSSGPU_DEVICES"), "'{bad}': {e:?}");
        assert!(e.to_string().contains("CROSSGPU_DEVICES"), "{e}");
    }
    // A well-formed spec naming no adapter fails when the group is opened, listing the adapters.
    let spec = GroupSpec::parse("no-such-gpu").unwrap();
    match DeviceGroup::open(&common::instance(), &spec) {
        Err(e @ Error::NoSuchAdapter { .. }) => assert!(e.to_string().contains("no-such-gpu"), "{e}"),
        r => panic!("expected NoSuchAdapter, got {r:?}"),
    }
    common::assert_no_validation_errors();
}

/// Every bad value of the all-reduce's variables is refused by `CommOptions::from_env` (so by
/// `Comm::new`), and a bad `CROSSGPU_TIMEOUT_MS`, `CROSSGPU_DEVICES` or `CROSSGPU_MAX_IN_FLIGHT`
/// by `DeviceGroup::from_env`,
/// each with an error naming the variable. Each case runs in a child process with the variable
/// set.
#[test]
fn bad_environment_values_are_errors_at_creation() {
    init();
    let bad: &[(&str, &str, &str)] = &[
        ("CROSSGPU_ALLREDUCE", "bogus", "expected auto, bridge, sync_fd, poll or generic"),
        ("CROSSGPU_ALLREDUCE_SPIN_US", "-1", "non-negative integer"),
        ("CROSSGPU_ALLREDUCE_SPIN_US", "-0.5", "non-negative integer"),
        ("CROSSGPU_ALLREDUCE_SPIN_US", "1000001", "between 0 and 1000000"),
        ("CROSSGPU_ALLREDUCE_SPIN_US", "18446744073709551616", "non-negative integer"),
        ("CROSSGPU_ALLREDUCE_SPIN_US", "1e9", "non-negative integer"),
        ("CROSSGPU_TIMEOUT_MS", "0", "between 1 and 86400000"),
        ("CROSSGPU_TIMEOUT_MS", "-5", "non-negative integer"),
        ("CROSSGPU_TIMEOUT_MS", "86400001", "between 1 and 86400000"),
        ("CROSSGPU_TIMEOUT_MS", "10s", "non-negative integer"),
        ("CROSSGPU_F16_WIRE_BYTES", "-1", "non-negative integer"),
        ("CROSSGPU_DEVICES", "0,,0", "empty item"),
        ("CROSSGPU_DEVICES", "0x0", "1 to 64"),
        ("CROSSGPU_PHASE_A_KERNEL_BYTES", "-1", "non-negative integer"),
        ("CROSSGPU_PHASE_A_KERNEL_BYTES", "1MiB", "non-negative integer"),
        ("CROSSGPU_MAX_IN_FLIGHT", "0", "between 1 and 65536"),
        ("CROSSGPU_MAX_IN_FLIGHT", "65537", "between 1 and 65536"),
        ("CROSSGPU_MAX_IN_FLIGHT", "many", "non-negative integer"),
        ("CROSSGPU_JOINT_SUBMIT", "yes", "expected 0 or 1"),
        ("CROSSGPU_JOINT_SUBMIT", "2", "expected 0 or 1"),
    ];
    for &(var, value, why) in bad {
        let (ok, out) = child("child_print_config_from_env", &[(var, value)]);
        let lines = child_lines(&out);
        assert!(ok && lines.iter().any(|l| l == "done"), "{var}={value}: child failed:\n{out}");
        let comm_line = lines
            .iter()
            .find(|l| l.starts_with("comm_options: "))
            .unwrap_or_else(|| panic!("{var}={value}: no comm_options line:\n{out}"));
        let group_line = lines
            .iter()
            .find(|l| l.starts_with("group: "))
            .unwrap_or_else(|| panic!("{var}={value}: no group line:\n{out}"));
        // The group reads CROSSGPU_DEVICES and CROSSGPU_MAX_IN_FLIGHT; the Comm the others.
        let group_var = matches!(var, "CROSSGPU_DEVICES" | "CROSSGPU_MAX_IN_FLIGHT");
        let expected_where = if group_var { group_line } else { comm_line };
        let wanted = format!("Err(bad value '{value}' for {var}: ");
        assert!(
            expected_where.contains(&wanted) && expected_where.contains(why),
            "{var}={value}: expected an error naming {var} ({why}), got: {expected_where}\n{out}"
        );
        if var == "CROSSGPU_TIMEOUT_MS" {
            // Both read it: the group (member waits) and the Comm (bridge waits).
            assert!(group_line.contains(&wanted), "{var}={value}: group: {group_line}");
        } else if !group_var {
            // The group opened; `Comm::new` on it refuses the value.
            let new_line = lines
                .iter()
                .find(|l| l.starts_with("comm_new: "))
                .unwrap_or_else(|| panic!("{var}={value}: no comm_new line:\n{out}"));
            assert!(new_line.contains(&wanted), "{var}={value}: Comm::new: {new_line}");
        }
    }
    // Values at the edges of the ranges are accepted.
    let good: &[(&str, &str, &str)] = &[
        ("CROSSGPU_ALLREDUCE_SPIN_US", "0", "spin: Some(0ns)"),
        ("CROSSGPU_ALLREDUCE_SPIN_US", "1000000", "spin: Some(1s)"),
        ("CROSSGPU_TIMEOUT_MS", "1", "timeout: 1ms"),
        ("CROSSGPU_TIMEOUT_MS", " 86400000 ", "timeout: 86400s"),
        ("CROSSGPU_ALLREDUCE", "GENERIC", "mode: Forced(Generic)"),
        ("CROSSGPU_JOINT_SUBMIT", "0", "joint_submit: false"),
        ("CROSSGPU_JOINT_SUBMIT", " true ", "joint_submit: true"),
    ];
    for &(var, value, want) in good {
        let (ok, out) = child("child_print_config_from_env", &[(var, value)]);
        let lines = child_lines(&out);
        assert!(ok && lines.iter().any(|l| l == "done"), "{var}={value}: child failed:\n{out}");
        let comm_line = lines
            .iter()
            .find(|l| l.starts_with("comm_options: "))
            .unwrap_or_else(|| panic!("{var}={value}: no comm_options line:\n{out}"));
        assert!(
            comm_line.starts_with("comm_options: Ok(") && comm_line.contains(want),
            "{var}={value}: {comm_line}"
        );
    }
    common::assert_no_validation_errors();
}

#[test]
#[ignore = "helper: run in a child process by bad_environment_values_are_errors_at_creation"]
fn child_print_config_from_env() {
    if !in_child() {
        return;
    }
    init();
    match CommOptions::from_env() {
        Ok(o) => println!("CHILD comm_options: Ok({o:?})"),
        Err(e) => println!("CHILD comm_options: Err({e})"),
    }
    match DeviceGroup::from_env(&common::instance()) {
        Ok(group) => {
            println!("CHILD group: Ok({} members)", group.len());
            match Comm::new(&group) {
                Ok(c) => println!("CHILD comm_new: Ok({})", c.mode()),
                Err(e) => println!("CHILD comm_new: Err({e})"),
            }
        }
        Err(e) => println!("CHILD group: Err({e})"),
    }
    common::assert_no_validation_errors();
    println!("CHILD done");
}

// ---------------------------------------------------------------------------------------------
// (d) Send and Sync.

/// Compile-time checks: these fail to build if the types lose `Send` (a Comm and its tensors
/// can move to a worker thread; a group can be shared).
const _: () = {
    const fn send<T: Send>() {}
    const fn sync<T: Sync>() {}
    send::<Comm>();
    send::<Tensor>();
    send::<DeviceGroup>();
    sync::<DeviceGroup>();
    send::<crossgpu::Member>();
    // `Comm::all_reduce` takes `&mut self`, so two threads can never all-reduce through one
    // Comm at once whether or not it is Sync: `&Comm` reaches only the read-only accessors.
    // Sharing one between threads needs a `Mutex<Comm>`, which serialises the calls (tested
    // below).
    sync::<Mutex<Comm>>();
};

/// Autoref specialisation: `Probe::<T>::is_sync` is the inherent method (true) when `T: Sync`,
/// else the trait's (false).
struct Probe<T>(std::marker::PhantomData<T>);
#[allow(dead_code)] // unused when `T: Sync` (the inherent method wins)
trait NotSync {
    fn is_sync(&self) -> bool {
        false
    }
}
impl<T> NotSync for Probe<T> {}
impl<T: Sync> Probe<T> {
    fn is_sync(&self) -> bool {
        true
    }
}

#[test]
fn comm_is_send_and_sync_and_all_reduces_on_another_thread() {
    let comm_sync = Probe::<Comm>(std::marker::PhantomData).is_sync();
    eprintln!("Comm: Send = true (compile-time check), Sync = {comm_sync}");
    // Sync: `&Comm` is safe to share (its `&self` methods only read); concurrent all-reduces
    // are still impossible, since `all_reduce` takes `&mut self`.
    assert!(comm_sync, "Comm stopped being Sync: update docs/RELIABILITY.md");
    let group = logical(3);
    let mut comm = Comm::with_options(&group, options(ModeRequest::Forced(Mode::HostBridge))).unwrap();
    let parts = random_parts(61, 3, 5000);
    let mut t = upload(&group, &parts);
    comm.all_reduce(&mut t, &AllReduceOptions::default()).unwrap();
    // Move the Comm and the tensors (with a round in flight) to another thread, all-reduce there
    // and read back there.
    let worker = std::thread::spawn(move || {
        comm.all_reduce(&mut t, &AllReduceOptions::default()).unwrap();
        let r = read_all(&t);
        (comm, r)
    });
    let (comm, got) = worker.join().expect("the worker thread");
    for (j, r) in got.iter().enumerate() {
        for i in 0..5000 {
            let s = parts[0][i] + parts[1][i] + parts[2][i];
            assert_eq!(r[i], s + s + s, "member {j} element {i}");
        }
    }
    // Two threads sharing one Comm through a Mutex: their calls are serialised, each correct.
    let comm = Arc::new(Mutex::new(comm));
    std::thread::scope(|s| {
        for k in 0..2u64 {
            let comm = comm.clone();
            let group = &group;
            s.spawn(move || {
                let mut rng = common::rng(70 + k);
                for round in 0..15 {
                    let n = rng.random_range(1..3000);
                    let parts = random_parts(100 * k + round, 3, n);
                    let mut t = upload(group, &parts);
                    comm.lock().unwrap().all_reduce(&mut t, &AllReduceOptions::default()).unwrap();
                    check(&format!("thread {k} round {round}"), &parts, &read_all(&t), false);
                }
            });
        }
    });
    assert_eq!(comm.lock().unwrap().all_reduce_count(), 2 + 30);
    drop(comm);
    common::assert_no_validation_errors();
}

/// The other collectives fail as the all-reduce does: a member the bridge never releases gives
/// an all-gather that grows the slots a timeout naming the round and member, every later call
/// of any collective `Error::Poisoned`, and the dropped communicator leaves the group usable.
#[test]
fn a_collective_whose_member_is_never_released_poisons_the_comm() {
    let group = logical(3);
    let opts =
        CommOptions { timeout: Duration::from_millis(300), ..options(ModeRequest::Forced(Mode::HostBridge)) };
    let mut comm = Comm::with_options(&group, opts).unwrap();
    comm.withhold_release(1);
    let parts = random_parts(31, 3, 1000);
    let send = upload(&group, &parts);
    let mut recv: Vec<_> =
        group.members().iter().map(|m| m.empty(&[3000], crossgpu::DType::F32).unwrap()).collect();
    match comm.all_gather(&send, &mut recv) {
        Ok(()) | Err(Error::Timeout { .. }) => {}
        Err(e) => panic!("first all-gather: unexpected {e:?}"),
    }
    std::thread::sleep(Duration::from_millis(600));
    let big = upload(&group, &random_parts(32, 3, 20_000));
    let mut big_recv: Vec<_> =
        group.members().iter().map(|m| m.empty(&[60_000], crossgpu::DType::F32).unwrap()).collect();
    let err = comm.all_gather(&big, &mut big_recv).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, Error::Timeout { .. } | Error::Poisoned(..)), "{err:?}");
    assert!(msg.contains("round 1") && msg.contains("member 1"), "names the round and member: {msg}");
    let mut t = upload(&group, &parts);
    match comm.broadcast(&mut t, 0) {
        Err(Error::Poisoned(what, cause)) => {
            assert_eq!(what, "the communicator");
            assert!(cause.contains("member 1"), "cause: {cause}");
        }
        r => panic!("a poisoned Comm must refuse: {r:?}"),
    }
    drop(comm);
    drop((send, recv, big, big_recv));
    let mut comm = Comm::with_options(&group, options(ModeRequest::Forced(Mode::HostBridge))).unwrap();
    let mut t = upload(&group, &parts);
    comm.broadcast(&mut t, 2).unwrap();
    for tensor in &t {
        assert_eq!(tensor.read().unwrap(), parts[2], "after recovery, the broadcast holds member 2's");
    }
    drop(comm);
    drop(t);
    drop(group);
    common::assert_no_validation_errors();
}
