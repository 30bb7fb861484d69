//! `HostAllocation::shared`: two mappings of one sealed memory file — one of the file itself,
//! one of it opened again by its `/proc` path, as another process would — each imported into
//! its own VkDevice; a file that is not sealed against shrinking is refused. Values the host stores through one mapping are copied by the
//! other mapping's device and read back through the first: both the devices and the mappings
//! see one memory. Runs on the first adapter (lavapipe without a GPU; an H200 in the device
//! runs), with the validation layer when the environment turns it on.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use vk_native::{
    Access, Device, HostAllocation, ImportedBuffer, Instance, InstanceOptions, Recorder, SubmitInfo,
};

#[test]
fn two_mappings_of_one_file_are_one_memory_for_hosts_and_devices() {
    if std::env::var_os("XDG_RUNTIME_DIR").is_none() {
        std::env::set_var("XDG_RUNTIME_DIR", std::env::temp_dir());
    }
    let validation = std::env::var("VK_INSTANCE_LAYERS").is_ok_and(|l| l.contains("KHRONOS_validation"));
    let inst = Instance::new(&InstanceOptions { validation }).expect("a Vulkan driver");
    let devs = [Device::open(&inst, 0, 1).unwrap(), Device::open(&inst, 0, 1).unwrap()];
    let align = devs.iter().map(|d| d.info().caps.min_imported_host_pointer_alignment).fold(4096, u64::max);
    let len = (3 * 65_536u64).next_multiple_of(align);
    let file = HostAllocation::sealed_file(len).unwrap();
    assert!(file.set_len(4096).is_err(), "a sealed file cannot shrink");
    let path = format!("/proc/{}/fd/{}", std::process::id(), std::os::fd::AsRawFd::as_raw_fd(&file));
    let again = std::fs::OpenOptions::new().read(true).write(true).open(&path).unwrap();

    // Checked before any mapping: lengths that are not a multiple of the alignment, longer
    // than the file, or zero; and a file anyone could truncate.
    for bad in [0, len - 4, len + align] {
        assert!(HostAllocation::shared(&file, bad, align).is_err(), "{bad} bytes");
    }
    let plain = std::env::temp_dir().join(format!("crossgpu-vk-test-{}", std::process::id()));
    let unsealed =
        std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&plain).unwrap();
    unsealed.set_len(len).unwrap();
    let e = HostAllocation::shared(&unsealed, len, align).unwrap_err().to_string();
    let _ = std::fs::remove_file(&plain);
    assert!(e.contains("not sealed"), "{e}");

    let maps = [&file, &again].map(|f| Arc::new(HostAllocation::shared(f, len, align).unwrap()));
    assert!(maps[0].is_shared() && maps[0].len() == len);
    // A new file reads as zeros through both mappings.
    assert_eq!(maps[1].word(len - 4).unwrap().load(Ordering::Relaxed), 0);

    let words = (len / 4 / 3) as usize;
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    for (k, dev) in devs.iter().enumerate() {
        // Device k imports mapping k; the host writes the first third through the other one.
        let other = &maps[1 - k];
        let data: Vec<u32> = (0..words)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                (seed >> 16) as u32 | 1
            })
            .collect();
        for (i, &v) in data.iter().enumerate() {
            other.word(i as u64 * 4).unwrap().store(v, Ordering::Relaxed);
        }
        let import = ImportedBuffer::new(dev, &maps[k]).unwrap();
        let mut rec = Recorder::new(dev, 0).unwrap();
        rec.barrier(Access::HOST_WRITE, Access::TRANSFER_READ).unwrap();
        // The device copies the first third to the last (k = 0) or the middle (k = 1).
        let to = (1 + (1 - k) as u64) * words as u64 * 4;
        rec.copy(&import, 0, &import, to, words as u64 * 4).unwrap();
        rec.barrier(Access::TRANSFER_WRITE, Access::HOST_READ).unwrap();
        let v = rec.submit(&SubmitInfo::default()).unwrap();
        assert!(rec.wait(v, 60_000_000_000).unwrap(), "the copy finished");
        let got: Vec<u32> =
            (0..words).map(|i| other.word(to + i as u64 * 4).unwrap().load(Ordering::Relaxed)).collect();
        assert_eq!(got, data, "device {k}'s copy, read through the other mapping");
        drop(rec);
        drop(import);
    }
    let errors = vk_native::validation_messages();
    assert!(errors.is_empty(), "validation errors: {errors:#?}");
}
