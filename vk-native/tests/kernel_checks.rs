//! `Kernel::new` checks the SPIR-V it is given before Vulkan sees it (naga reads and validates
//! the module, and its interface must fit the layout), and a recording made with kernels is
//! replayed: the same command buffer submitted again runs again. Runs on the first adapter
//! (lavapipe without a GPU), without the validation layer: nothing invalid reaches Vulkan.

use vk_native::{
    Access, Buffer, BufferUsage, Device, Instance, InstanceOptions, Kernel, KernelLayout, Recorder,
    StagingBuffer, SubmitInfo,
};

/// A kernel that adds `p.by` to `counter[0]`, compiled from WGSL here.
fn adder_spirv() -> Vec<u32> {
    let src = "
        struct Params { by: u32, _a: u32, _b: u32, _c: u32 }
        @group(0) @binding(0) var<storage, read_write> counter: array<u32>;
        var<immediate> p: Params;
        @compute @workgroup_size(1)
        fn add_to_counter() { counter[0] = counter[0] + p.by; }
    ";
    let module = naga::front::wgsl::parse_str(src).unwrap();
    let info = naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        naga::valid::Capabilities::IMMEDIATES,
    )
    .validate(&module)
    .unwrap();
    naga::back::spv::write_vec(&module, &info, &Default::default(), None).unwrap()
}

fn device() -> Device {
    if std::env::var_os("XDG_RUNTIME_DIR").is_none() {
        std::env::set_var("XDG_RUNTIME_DIR", std::env::temp_dir());
    }
    let inst = Instance::new(&InstanceOptions { validation: false }).expect("a Vulkan driver");
    Device::open(&inst, 0, 1).unwrap()
}

#[test]
fn kernels_refuse_spirv_that_does_not_fit_their_layout() {
    let dev = device();
    let spirv = adder_spirv();
    let layout = |read_only: Vec<bool>, immediate_bytes| KernelLayout { read_only, immediate_bytes };
    let cases: [(&[u32], &str, KernelLayout, &str); 6] = [
        (&[0x0723_0203, 1, 2, 3], "add_to_counter", layout(vec![false], 16), "not a SPIR-V module"),
        (&spirv[..spirv.len() / 2], "add_to_counter", layout(vec![false], 16), "not a SPIR-V module"),
        (&spirv, "nope", layout(vec![false], 16), "no compute entry point"),
        (&spirv, "add_to_counter", layout(vec![true], 16), "declares read-only"),
        (&spirv, "add_to_counter", layout(vec![], 16), "bindings 0..0"),
        (&spirv, "add_to_counter", layout(vec![false], 8), "16 bytes of immediates"),
    ];
    for (words, entry, l, want) in cases {
        let e = Kernel::new(&dev, "test", words, entry, &l).unwrap_err();
        assert!(e.to_string().contains(want), "{entry} {l:?}: {e}");
    }
    Kernel::new(&dev, "test", &spirv, "add_to_counter", &layout(vec![false], 16)).unwrap();
}

#[test]
fn a_recording_runs_again_at_every_submission() {
    let dev = device();
    let k = Kernel::new(
        &dev,
        "adder",
        &adder_spirv(),
        "add_to_counter",
        &KernelLayout { read_only: vec![false], immediate_bytes: 16 },
    )
    .unwrap();
    let counter = Buffer::new(&dev, 16, BufferUsage { copy_src: true, copy_dst: true }, "counter").unwrap();
    let group = k.bind(&[&counter]).unwrap();
    let mut rec = Recorder::new(&dev, 0).unwrap();
    rec.fill_u32(&counter, 0, 16, 0).unwrap();
    rec.barrier(Access::TRANSFER_WRITE, Access::DEVICE_ALL).unwrap();
    // Nothing recorded while capturing runs until a submit names the recording.
    rec.begin_capture().unwrap();
    assert!(rec.submit(&SubmitInfo::default()).is_err(), "no submit while a recording is in progress");
    rec.barrier(Access::DEVICE_ALL, Access::DEVICE_ALL).unwrap();
    rec.dispatch(&group, &[3, 0, 0, 0], [1, 1, 1]).unwrap();
    rec.dispatch(&group, &[4, 0, 0, 0], [1, 1, 1]).unwrap();
    let replay = rec.end_capture().unwrap();
    assert_eq!((replay.dispatches(), replay.commands()), (2, 2));
    assert!(rec.end_capture().is_err(), "no recording in progress");
    let back = StagingBuffer::new(&dev, 16, false).unwrap();
    let read = |rec: &mut Recorder| -> u32 {
        rec.barrier(Access::COMPUTE_WRITE, Access::TRANSFER_READ).unwrap();
        rec.copy(&counter, 0, &back, 0, 4).unwrap();
        rec.barrier(Access::TRANSFER_WRITE, Access::HOST_READ).unwrap();
        let v = rec.submit(&SubmitInfo::default()).unwrap();
        assert!(rec.wait(v, 60_000_000_000).unwrap());
        let mut b = [0u8; 4];
        back.read(0, &mut b).unwrap();
        u32::from_le_bytes(b)
    };
    // The fill, then nothing: the recording has not run.
    assert_eq!(read(&mut rec), 0);
    // Five submissions of the recording, two of them while an earlier one may still run.
    for _ in 0..5 {
        rec.submit(&SubmitInfo { replay: Some(&replay), ..Default::default() }).unwrap();
    }
    assert_eq!(read(&mut rec), 35);
    assert_eq!(rec.dispatch_count(), 10, "replayed dispatches count as dispatches");
    // A recording dropped while its submissions are pending lives until they completed.
    rec.submit(&SubmitInfo { replay: Some(&replay), ..Default::default() }).unwrap();
    drop(replay);
    assert_eq!(read(&mut rec), 42);
    // A recording cancelled after an error leaves the recorder as it was.
    rec.begin_capture().unwrap();
    rec.dispatch(&group, &[1, 0, 0, 0], [1, 1, 1]).unwrap();
    rec.cancel_capture();
    assert!(!rec.capturing());
    assert_eq!(read(&mut rec), 42);
    assert_eq!(vk_native::live_objects().recordings, 0);
}
