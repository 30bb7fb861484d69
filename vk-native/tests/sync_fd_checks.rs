//! `SyncFdSemaphore::export` and `import` check what Vulkan requires before the driver sees
//! the call: an export needs a submitted signal, an import a semaphore no pending submission
//! uses. Needs an adapter with SYNC_FD export and import (neither Debian 12's lavapipe nor
//! NVIDIA 580 has one): elsewhere it says so and checks only that such a semaphore is refused.

use vk_native::{
    Device, Instance, InstanceOptions, NativeError, Recorder, SubmitInfo, SyncFdSemaphore, TimelineSemaphore,
};

#[test]
fn export_and_import_are_checked_before_the_driver_sees_them() {
    if std::env::var_os("XDG_RUNTIME_DIR").is_none() {
        std::env::set_var("XDG_RUNTIME_DIR", std::env::temp_dir());
    }
    let inst = Instance::new(&InstanceOptions { validation: false }).expect("a Vulkan driver");
    let Some(index) = (0..inst.adapters().len()).find(|&i| {
        let c = &inst.adapters()[i].caps;
        c.external_semaphore_fd && c.sync_fd_export && c.sync_fd_import
    }) else {
        let dev = Device::open(&inst, 0, 1).unwrap();
        assert!(matches!(SyncFdSemaphore::new(&dev), Err(NativeError::MissingExtension(_))));
        eprintln!("SKIPPED: no adapter with SYNC_FD export and import; checked only that one is refused");
        return;
    };
    let dev = Device::open(&inst, index, 1).unwrap();
    let sem = SyncFdSemaphore::new(&dev).unwrap();
    // No signal submitted: the export is refused.
    let e = sem.export().unwrap_err();
    assert!(e.to_string().contains("no submitted signal"), "{e}");
    // A submission that waits for a gate the host opens later signals it: export works once.
    let gate = TimelineSemaphore::new(&dev, 0).unwrap();
    let mut rec = Recorder::new(&dev, 0).unwrap();
    let v = rec
        .submit(&SubmitInfo { wait_timeline: &[(&gate, 1)], signal_binary: &[&sem], ..Default::default() })
        .unwrap();
    let fd = sem.export().unwrap();
    assert!(sem.export().is_err(), "a second export without a new signal is refused");
    // A second semaphore waited on by a pending submission cannot take an import.
    let target = SyncFdSemaphore::new(&dev).unwrap();
    target.import(fd.try_clone().unwrap()).unwrap();
    let w = rec.submit(&SubmitInfo { wait_binary: &[&target], ..Default::default() }).unwrap();
    let e = target.import(fd.try_clone().unwrap()).unwrap_err();
    assert!(e.to_string().contains("pending submission"), "{e}");
    gate.signal(1).unwrap();
    assert!(rec.wait(v.max(w), 10_000_000_000).unwrap());
    // Once it completed, the import is accepted again.
    target.import(fd).unwrap();
}
