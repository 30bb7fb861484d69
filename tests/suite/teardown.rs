//! Teardown: dropping communicators with work pending, 200 create/drop cycles, and every live
//! Vulkan object accounted for. Its own test binary, because the live-object counters are
//! process-wide and other tests running in parallel would move them.

use crate::common::{self, serial};

use crossgpu::{AllReduceOptions, Comm, CommOptions, ModeRequest, Precision, Tensor};

fn options(mode: ModeRequest) -> CommOptions {
    CommOptions { mode, ..CommOptions::from_env().unwrap() }
}

#[test]
fn drop_with_work_pending_and_create_drop_cycles_leak_nothing() {
    let _s = serial();
    let mut rng = common::rng(9);
    let group = common::logical(3);
    // Warm up: pipelines and bind groups that live as long as the group.
    {
        let mut comm = Comm::with_options(&group, options(ModeRequest::Auto)).unwrap();
        let parts: Vec<Vec<f32>> = (0..3).map(|_| common::random(&mut rng, 64)).collect();
        for precision in [Precision::F32, Precision::F16] {
            let mut t: Vec<Tensor> =
                group.members().iter().zip(&parts).map(|(m, p)| m.upload_f32(p).unwrap()).collect();
            comm.all_reduce(&mut t, &AllReduceOptions { precision, ..Default::default() }).unwrap();
            t[0].read().unwrap();
        }
    }
    // Warm-up cycles first: drivers keep caches (NVIDIA's grew RSS by a few MiB over the first
    // cycles); a leak grows with every cycle, a cache does not.
    let cycle_once = |cycle: usize, rng: &mut rand::rngs::StdRng| {
        let mut comm = Comm::with_options(&group, options(ModeRequest::Auto)).unwrap();
        let n = 100 + cycle;
        let parts: Vec<Vec<f32>> = (0..3).map(|_| common::random(rng, n)).collect();
        let mut t: Vec<Tensor> =
            group.members().iter().zip(&parts).map(|(m, p)| m.upload_f32(p).unwrap()).collect();
        comm.all_reduce(&mut t, &AllReduceOptions::default()).unwrap();
        // Drop the communicator with phase B still unsubmitted, then the tensors.
        drop(comm);
        if cycle.is_multiple_of(50) {
            let r = t[2].read().unwrap();
            for i in 0..n {
                assert_eq!(r[i], parts[0][i] + parts[1][i] + parts[2][i]);
            }
        }
        drop(t);
    };
    for cycle in 0..50 {
        cycle_once(cycle, &mut rng);
    }
    group.synchronize().unwrap();
    let before = crossgpu::live_objects();
    let rss_before = rss_kib();
    for cycle in 0..200 {
        cycle_once(cycle, &mut rng);
    }
    let rss_mid = rss_kib();
    for cycle in 200..400 {
        cycle_once(cycle, &mut rng);
    }
    group.synchronize().unwrap();
    let after = crossgpu::live_objects();
    assert_eq!(before, after, "live Vulkan objects before and after 400 create/drop cycles");
    let first = rss_mid.saturating_sub(rss_before);
    let second = rss_kib().saturating_sub(rss_mid);
    eprintln!("resident memory: +{first} KiB over cycles 50..250, +{second} KiB over cycles 250..450");
    // A leak of even one host slot (32 KiB) per cycle would add 6400 KiB per 200 cycles.
    assert!(second < 4 * 1024, "resident memory grew by {second} KiB over 200 cycles after warm-up");
    common::assert_no_validation_errors();
}

fn rss_kib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    s.split_whitespace().nth(1).and_then(|p| p.parse::<u64>().ok()).unwrap_or(0) * 4
}
