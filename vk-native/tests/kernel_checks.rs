//! What safe code cannot do with vk-native's kernels and buffers: a pipeline only from WGSL that
//! naga compiled (bounds-checked), refused where it exceeds the device's limits; bindings,
//! dispatches, copies, fills and host accesses checked, offsets near `u64::MAX` included; and a
//! recording made with kernels is replayed: the same command buffer submitted again runs again.
//! Runs on the first adapter (lavapipe without a GPU), without the validation layer: nothing
//! invalid reaches Vulkan.

use vk_native::{
    Access, BindRange, Buffer, BufferUsage, CompileOptions, Device, HostAllocation, Instance,
    InstanceOptions, Kernel, MappedWords, Recorder, Shader, StagingBuffer, SubmitInfo,
};

const ADDER: &str = "
    struct Params { by: u32, _a: u32, _b: u32, _c: u32 }
    @group(0) @binding(0) var<storage, read_write> counter: array<u32>;
    var<immediate> p: Params;
    @compute @workgroup_size(1)
    fn add_to_counter() { counter[0] = counter[0] + p.by; }
";

fn shader(src: &str) -> Shader {
    Shader::compile("test", src, &CompileOptions::default()).unwrap()
}

fn device() -> Device {
    if std::env::var_os("XDG_RUNTIME_DIR").is_none() {
        std::env::set_var("XDG_RUNTIME_DIR", std::env::temp_dir());
    }
    let inst = Instance::new(&InstanceOptions { validation: false }).expect("a Vulkan driver");
    Device::open(&inst, 0, 1).unwrap()
}

fn usage() -> BufferUsage {
    BufferUsage { copy_src: true, copy_dst: true }
}

/// Submits what `rec` holds and waits for it.
fn finish(rec: &mut Recorder) {
    let v = rec.submit(&SubmitInfo::default()).unwrap();
    assert!(rec.wait(v, 60_000_000_000).unwrap());
}

#[test]
fn kernels_past_the_device_limits_are_refused() {
    let dev = device();
    let caps = dev.info().caps.clone();
    let wide = format!(
        "@group(0) @binding(0) var<storage, read_write> o: array<u32>;\n@compute @workgroup_size({}) fn f() {{ o[0] = 1u; }}",
        caps.max_compute_work_group_size[0] + 1
    );
    let e = Kernel::new(&dev, &shader(&wide)).unwrap_err().to_string();
    assert!(e.contains("maxComputeWorkGroupSize"), "{e}");
    let words = caps.max_compute_shared_memory_size / 4 + 1;
    let shared = format!(
        "var<workgroup> w: array<u32, {words}>;\n@group(0) @binding(0) var<storage, read_write> o: array<u32>;\n@compute @workgroup_size(1) fn f() {{ o[0] = w[0]; }}"
    );
    let e = Kernel::new(&dev, &shader(&shared)).unwrap_err().to_string();
    assert!(e.contains("maxComputeSharedMemorySize"), "{e}");
    if caps.max_push_constants_size < 256 {
        let big = "var<immediate> p: array<u32, 64>;\n@group(0) @binding(0) var<storage, read_write> o: array<u32>;\n@compute @workgroup_size(1) fn f() { o[0] = p[3]; }";
        let e = Kernel::new(&dev, &shader(big)).unwrap_err().to_string();
        assert!(e.contains("maxPushConstantsSize"), "{e}");
    }
    // A dispatch past maxComputeWorkGroupCount.
    let k = Kernel::new(&dev, &shader(ADDER)).unwrap();
    let counter = Buffer::new(&dev, 16, usage(), "counter").unwrap();
    let g = k.bind(&[&counter]).unwrap();
    let mut rec = Recorder::new(&dev, 0).unwrap();
    let too_many = [1, 1, caps.max_compute_work_group_count[2] + 1];
    let e = rec.dispatch(&g, &[1, 0, 0, 0], too_many).unwrap_err().to_string();
    assert!(e.contains("maxComputeWorkGroupCount"), "{e}");
    assert!(rec.dispatch(&g, &[1, 0, 0], [1, 1, 1]).is_err(), "three words of immediates for four");
}

#[test]
fn bindings_copies_fills_and_host_accesses_are_checked() {
    let dev = device();
    let k = Kernel::new(&dev, &shader(ADDER)).unwrap();
    let buf = Buffer::new(&dev, 4096, usage(), "buf").unwrap();
    let staging = StagingBuffer::new(&dev, 64, false).unwrap();
    // A staging buffer is copy-only; a range smaller than the type's fixed part plus an element,
    // past the end, or wrapping around u64 is refused.
    let e = k.bind(&[&staging]).unwrap_err().to_string();
    assert!(e.contains("cannot be bound"), "{e}");
    let range = |offset, size| BindRange { buffer: &buf, offset, size };
    for (offset, size, want) in [
        (0, 0, "needs at least 4"),
        (4096, 4, "range 4096..+4"),
        (u64::MAX - 3, 8, "range"),
        (1, 4, "not a multiple"),
    ] {
        let e = k.bind_ranges(&[range(offset, size)]).unwrap_err().to_string();
        assert!(e.contains(want), "bind {offset}..+{size}: {e}");
    }
    let mut rec = Recorder::new(&dev, 0).unwrap();
    for (offset, size) in [(u64::MAX - 3, 8), (4092, 8), (!3u64, 4)] {
        assert!(rec.fill_u32(&buf, offset, size, 7).is_err(), "fill {offset}..+{size}");
        assert!(rec.copy(&buf, offset, &buf, 0, size).is_err(), "copy from {offset}..+{size}");
        assert!(rec.copy(&buf, 0, &buf, offset, size).is_err(), "copy to {offset}..+{size}");
    }
    // Host memory: words at or past the end, and offsets that wrap, are None.
    let host = HostAllocation::new(4096, 4096).unwrap();
    assert!(host.word(4092).is_some());
    for offset in [4096, 4094, u64::MAX - 3, !3u64] {
        assert!(host.word(offset).is_none(), "word at {offset}");
    }
    assert!(MappedWords::new(&dev, usize::MAX / 2).is_err(), "a flag buffer past u32 indexing");
    // A staging buffer the GPU may still write is not read (or written) by the host.
    let mut rec = Recorder::new(&dev, 0).unwrap();
    rec.fill_u32(&buf, 0, 64, 0x0102_0304).unwrap();
    rec.barrier(Access::TRANSFER_WRITE, Access::TRANSFER_READ).unwrap();
    rec.copy(&buf, 0, &staging, 0, 64).unwrap();
    rec.barrier(Access::TRANSFER_WRITE, Access::HOST_READ).unwrap();
    let mut out = [0u8; 64];
    // Recorded, not submitted: the GPU does not write it yet, so the host may.
    staging.read(0, &mut out).unwrap();
    let v = rec.submit(&SubmitInfo::default()).unwrap();
    // Submitted: refused until it completed (lavapipe may have finished already; then it reads).
    match staging.read(0, &mut out) {
        Err(e) => assert!(e.to_string().contains("has not completed"), "{e}"),
        Ok(()) => assert!(rec.completed().unwrap() >= v, "a read while the copy was pending"),
    }
    assert!(rec.wait(v, 60_000_000_000).unwrap());
    staging.read(0, &mut out).unwrap();
    assert_eq!(&out[..4], &0x0102_0304u32.to_le_bytes());
}

/// An index past the end of a bound range never reaches past it: the bytes around the range are
/// untouched, whatever the kernel computes. With robustBufferAccess2 the device drops the
/// stores and reads zeros; without it naga's Restrict policy clamps them to the last element.
#[test]
fn out_of_range_indices_stay_inside_the_binding() {
    let dev = device();
    let src = "
        @group(0) @binding(0) var<storage, read_write> o: array<u32>;
        @compute @workgroup_size(1) fn f() {
            // o[0] holds the fill, 0xdeadbeef: every index below is far past the end.
            let far = o[0];
            o[far] = 7u;
            o[far | 0xffff0000u] = o[far + 5u] + 1u;
        }";
    let k = Kernel::new(&dev, &shader(src)).unwrap();
    let buf = Buffer::new(&dev, 1024, usage(), "buf").unwrap();
    let offset = dev.info().caps.min_storage_buffer_offset_alignment.max(16) * 2;
    let g = k.bind_ranges(&[BindRange { buffer: &buf, offset, size: 16 }]).unwrap();
    let mut rec = Recorder::new(&dev, 0).unwrap();
    rec.fill_u32(&buf, 0, 1024, 0xdead_beef).unwrap();
    rec.barrier(Access::TRANSFER_WRITE, Access::DEVICE_ALL).unwrap();
    rec.dispatch(&g, &[], [1, 1, 1]).unwrap();
    let back = StagingBuffer::new(&dev, 1024, false).unwrap();
    rec.barrier(Access::COMPUTE_WRITE, Access::TRANSFER_READ).unwrap();
    rec.copy(&buf, 0, &back, 0, 1024).unwrap();
    rec.barrier(Access::TRANSFER_WRITE, Access::HOST_READ).unwrap();
    finish(&mut rec);
    let mut bytes = vec![0u8; 1024];
    back.read(0, &mut bytes).unwrap();
    let words: Vec<u32> = bytes.chunks_exact(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect();
    let first = (offset / 4) as usize;
    for (i, w) in words.iter().enumerate() {
        if i < first || i >= first + 4 {
            assert_eq!(*w, 0xdead_beef, "word {i} outside the binding was written");
        }
    }
    if dev.info().caps.robust_buffer_access2 {
        let inside = &words[first..first + 4];
        assert!(
            inside.iter().all(|&w| w == 0xdead_beef),
            "robustBufferAccess2 drops the stores: {inside:x?}"
        );
    } else {
        assert_eq!(words[first + 3], 8, "the clamped store and load land on the last element");
    }
}

#[test]
fn a_recording_runs_again_at_every_submission() {
    let dev = device();
    let k = Kernel::new(&dev, &shader(ADDER)).unwrap();
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
