//! Proves the validation harness can fail: a deliberate misuse must be reported by the Khronos
//! layer and collected, and a deliberate missing barrier must be reported by synchronization
//! validation. Without this, "zero validation errors" elsewhere could mean "layer not loaded".
//! Its own binary, because it produces errors on purpose.

mod common;

use vk_native::{
    Access, Buffer, BufferUsage, Device, Instance, InstanceOptions, Recorder, SubmitInfo, TimelineSemaphore,
};

#[test]
fn the_layer_reports_misuse_and_missing_barriers() {
    if !common::layer_installed() {
        common::skip(
            Some("validation"),
            "VK_LAYER_KHRONOS_validation is not installed (apt-get install vulkan-validationlayers)",
        );
        return;
    }
    common::instance(); // sets VK_LAYER_ENABLES for synchronization validation
    let _ = crossgpu::validation_messages();
    let inst = Instance::new(&InstanceOptions { validation: true }).unwrap();
    assert!(inst.validation_enabled());
    let dev = Device::open(&inst, 0, 1).unwrap();

    // Misuse: a host signal must increase the value (VUID-VkSemaphoreSignalInfo-value-03258).
    let sem = TimelineSemaphore::new(&dev, 5).unwrap();
    // The checked signal refuses it before Vulkan sees it; the canary needs the layer to.
    assert!(sem.signal(3).is_err(), "a decreasing host signal is refused");
    // SAFETY: deliberately not: the value decreases, for the layer to report (the test's point).
    let _ = unsafe { sem.signal_unchecked(3) };
    let msgs = crossgpu::validation_messages();
    assert!(
        msgs.iter().any(|m| m.id_name.contains("03258")),
        "the layer did not report a decreasing signal: {msgs:?}"
    );

    // Hazard: two copies into the same buffer with no barrier between them. (A fresh device:
    // lavapipe reports the bad signal above as a lost device.)
    let dev = Device::open(&inst, 0, 1).unwrap();
    let usage = BufferUsage { copy_src: true, copy_dst: true };
    let a = Buffer::new(&dev, 4096, usage, "a").unwrap();
    let b = Buffer::new(&dev, 4096, usage, "b").unwrap();
    let mut rec = Recorder::new(&dev, 0).unwrap();
    rec.copy(&a, 0, &b, 0, 4096).unwrap();
    rec.copy(&a, 0, &b, 0, 4096).unwrap();
    let v = rec.submit(&SubmitInfo::default()).unwrap();
    assert!(rec.wait(v, 10_000_000_000).unwrap());
    let msgs = crossgpu::validation_messages();
    assert!(
        msgs.iter().any(|m| m.id_name.contains("SYNC-HAZARD-WRITE-AFTER-WRITE")),
        "synchronization validation did not report a missing barrier: {msgs:?}"
    );

    // The same copies with a barrier between them are clean.
    rec.copy(&a, 0, &b, 0, 4096).unwrap();
    rec.barrier(Access::TRANSFER_WRITE, Access::TRANSFER_WRITE).unwrap();
    rec.copy(&a, 0, &b, 0, 4096).unwrap();
    let v = rec.submit(&SubmitInfo::default()).unwrap();
    assert!(rec.wait(v, 10_000_000_000).unwrap());
    let msgs = crossgpu::validation_messages();
    assert!(msgs.is_empty(), "{msgs:?}");
}
