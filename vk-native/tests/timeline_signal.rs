//! `TimelineSemaphore::signal` checks what Vulkan requires of a host signal before the driver
//! sees it: the value must increase, and a semaphore a submission signals cannot be signalled
//! from the host at all (its pending values are unknown there). Runs on the first adapter
//! (lavapipe without a GPU), without the validation layer: nothing here reaches Vulkan invalid.

use vk_native::{Device, Instance, InstanceOptions, Recorder, SubmitInfo, TimelineSemaphore};

#[test]
fn host_signals_are_checked_before_the_driver_sees_them() {
    if std::env::var_os("XDG_RUNTIME_DIR").is_none() {
        std::env::set_var("XDG_RUNTIME_DIR", std::env::temp_dir());
    }
    let inst = Instance::new(&InstanceOptions { validation: false }).expect("a Vulkan driver");
    let dev = Device::open(&inst, 0, 1).unwrap();
    // Host-only: increasing values pass, anything else is refused and changes nothing.
    let sem = TimelineSemaphore::new(&dev, 5).unwrap();
    for bad in [0, 3, 5] {
        let e = sem.signal(bad).unwrap_err();
        assert!(e.to_string().contains("must increase"), "{e}");
    }
    sem.signal(6).unwrap();
    sem.signal(100).unwrap();
    assert_eq!(sem.value().unwrap(), 100);
    // Once a submission signals it, the host may only wait on it.
    let gpu = TimelineSemaphore::new(&dev, 0).unwrap();
    let mut rec = Recorder::new(&dev, 0).unwrap();
    let v = rec.submit(&SubmitInfo { signal_timeline: &[(&gpu, 1)], ..Default::default() }).unwrap();
    assert!(rec.wait(v, 10_000_000_000).unwrap());
    assert_eq!(gpu.value().unwrap(), 1);
    let e = gpu.signal(2).unwrap_err();
    assert!(e.to_string().contains("submissions signal"), "{e}");
    assert_eq!(gpu.value().unwrap(), 1, "a refused signal changes nothing");
}
