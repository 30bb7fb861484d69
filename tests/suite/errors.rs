//! Bad inputs: each returns its `Error` variant, panics nowhere, records nothing, and leaves
//! every tensor as it was; the member stays usable afterwards.

use crate::common;

use crate::common::serial;
use crossgpu::{DType, DeviceGroup, Error, GroupSpec, Member, Tensor, MAX_ELEMENTS};

/// Asserts that `t` still holds `want`, bit for bit.
fn unchanged(what: &str, t: &Tensor, want: &[f32]) {
    let got = t.read().unwrap();
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(g.to_bits(), w.to_bits(), "{what}: element {i} changed: {w} -> {g}");
    }
}

fn f16s(v: &[f32]) -> Vec<f32> {
    v.iter().map(|&x| half::f16::from_f32(x).to_f32()).collect()
}

fn is_length(r: crossgpu::Result<()>, expected: usize, got: usize) -> bool {
    matches!(r, Err(Error::LengthMismatch { expected: e, got: g, .. }) if e == expected && g == got)
}

fn is_dtype(r: crossgpu::Result<()>, expected: DType, got: DType) -> bool {
    matches!(r, Err(Error::DtypeMismatch { expected: e, got: g, .. }) if e == expected && g == got)
}

/// Asserts that nothing was recorded by the calls since `before` submits: a flush submits
/// nothing.
fn nothing_recorded(m: &Member, before: u64) {
    m.flush().unwrap();
    assert_eq!(m.stats().submits, before, "a failed call recorded work into {m:?}'s stream");
}

#[test]
fn member_index_out_of_range() {
    let _s = serial();
    let group = common::logical(2);
    for i in [2, 3, 99, usize::MAX] {
        assert!(
            matches!(group.member(i), Err(Error::IndexOutOfRange { what: "member index", index, len: 2, .. }) if index == i)
        );
    }
    let e = group.member(99).unwrap_err().to_string();
    assert_eq!(e, "member index 99 out of range: there are 2 members in the group");
    // An adapter index past the end, through the resolved form.
    let inst = common::instance();
    let n = inst.adapters().len();
    let e = DeviceGroup::open_resolved(&inst, &[(n + 4, 1)]).unwrap_err();
    assert!(
        matches!(e, Error::IndexOutOfRange { what: "adapter index", index, len, .. } if index == n + 4 && len == n),
        "{e:?}"
    );
    assert!(
        e.to_string()
            .starts_with(&format!("adapter index {} out of range: there are {n} Vulkan adapters", n + 4)),
        "{e}"
    );
    // A group of no devices.
    assert!(matches!(DeviceGroup::open_resolved(&inst, &[]), Err(Error::InvalidArgument(_))));
    common::assert_no_validation_errors();
}

#[test]
fn length_mismatch() {
    let _s = serial();
    let group = common::logical(1);
    let m = group.member(0).unwrap();
    let mut rng = common::rng(1);
    let d5 = common::random(&mut rng, 5);
    let d6 = common::random(&mut rng, 6);
    let a5 = m.upload_f32(&d5).unwrap();
    let a6 = m.upload_f32(&d6).unwrap();
    let h6 = m.upload(&d6, &[6], DType::F16).unwrap();
    let h5 = m.upload(&d5, &[5], DType::F16).unwrap();
    // 2x3 weights, x of 3, y of 2, as f32 and f16; wrong ones beside them.
    let w = m.upload(&d6, &[2, 3], DType::F32).unwrap();
    let wh = m.upload(&d6, &[2, 3], DType::F16).unwrap();
    let w1 = m.upload(&d6, &[6], DType::F32).unwrap();
    let w3 = m.upload(&d6, &[1, 2, 3], DType::F32).unwrap();
    let x3 = m.upload_f32(&d6[..3]).unwrap();
    let y2 = m.upload_f32(&d6[3..5]).unwrap();
    m.synchronize().unwrap();
    let before = m.stats().submits;

    assert!(is_length(m.add(&a5, &a6), 5, 6), "add 5 += 6");
    assert!(is_length(m.add(&a6, &a5), 6, 5), "add 6 += 5");
    assert!(is_length(m.copy(&a5, &a6), 6, 5), "copy 5 -> 6");
    assert!(is_length(m.convert_f32_to_f16(&a6, &h5), 5, 6), "convert 6 -> 5");
    assert!(is_length(m.add_f16_into_f32(&a5, &h6), 5, 6), "add_f16 5 += 6");
    assert!(is_length(m.write(&a5, &d6), 5, 6), "write 6 values into 5");
    assert!(is_length(m.write(&a5, &[]), 5, 0), "write nothing into 5");
    // matvec: x must have `cols`, y `rows` elements, and w must be 2-D.
    assert!(is_length(m.matvec(&w, &a5, &y2), 3, 5), "matvec x of 5 for 3 cols");
    assert!(is_length(m.matvec(&w, &x3, &a5), 2, 5), "matvec y of 5 for 2 rows");
    assert!(is_length(m.matvec(&wh, &a6, &y2), 3, 6), "matvec f16 w, x of 6");
    assert!(is_length(m.matvec(&w1, &x3, &y2), 2, 1), "matvec 1-D w");
    assert!(is_length(m.matvec(&w3, &x3, &y2), 2, 3), "matvec 3-D w");
    nothing_recorded(m, before);

    // upload: data must match the shape's element count (the tensor is not made).
    for (data, shape) in [
        (&d5[..], &[6][..]),
        (&d6[..], &[2, 2][..]),
        (&d6[..], &[2, 3, 2][..]),
        (&d5[..], &[][..]), // a 0-D shape holds one element
        (&[][..], &[1][..]),
        (&d5[..], &[0][..]),
        (&d5[..], &[5, 0][..]),
    ] {
        let want: usize = shape.iter().product();
        for dtype in [DType::F32, DType::F16] {
            let r = m.upload(data, shape, dtype).map(|_| ());
            assert!(
                is_length(r.clone(), want, data.len()),
                "upload of {} values as {shape:?} {dtype}: {r:?}",
                data.len()
            );
        }
    }

    // Nothing changed.
    unchanged("a5", &a5, &d5);
    unchanged("a6", &a6, &d6);
    unchanged("h5", &h5, &f16s(&d5));
    unchanged("h6", &h6, &f16s(&d6));
    unchanged("y2", &y2, &d6[3..5]);
    // And the member still works.
    m.add(&a5, &a5).unwrap();
    unchanged("a5 doubled", &a5, &d5.iter().map(|v| v * 2.0).collect::<Vec<_>>());
    common::assert_no_validation_errors();
}

#[test]
fn dtype_mismatch() {
    let _s = serial();
    let group = common::logical(1);
    let m = group.member(0).unwrap();
    let mut rng = common::rng(2);
    let d = common::random(&mut rng, 4);
    let f = m.upload_f32(&d).unwrap();
    let f2 = m.upload_f32(&d).unwrap();
    let h = m.upload(&d, &[4], DType::F16).unwrap();
    let h2 = m.upload(&d, &[4], DType::F16).unwrap();
    let w = m.upload(&d, &[2, 2], DType::F32).unwrap();
    let x = m.upload_f32(&d[..2]).unwrap();
    let xh = m.upload(&d[..2], &[2], DType::F16).unwrap();
    let y = m.upload_f32(&d[2..]).unwrap();
    let yh = m.upload(&d[2..], &[2], DType::F16).unwrap();
    m.synchronize().unwrap();
    let before = m.stats().submits;
    use DType::{F16, F32};

    assert!(is_dtype(m.add(&h, &f), F32, F16), "add into f16");
    assert!(is_dtype(m.add(&f, &h), F32, F16), "add from f16");
    assert!(is_dtype(m.add(&h, &h2), F32, F16), "add f16 + f16");
    assert!(is_dtype(m.scale(&h, 2.0), F32, F16), "scale f16");
    assert!(is_dtype(m.copy(&f, &h), F32, F16), "copy f32 -> f16");
    assert!(is_dtype(m.copy(&h, &f), F16, F32), "copy f16 -> f32");
    assert!(is_dtype(m.convert_f32_to_f16(&h, &h2), F32, F16), "convert from f16");
    assert!(is_dtype(m.convert_f32_to_f16(&f, &f2), F16, F32), "convert into f32");
    assert!(is_dtype(m.convert_f32_to_f16(&h, &f), F32, F16), "convert swapped");
    assert!(is_dtype(m.add_f16_into_f32(&f, &f2), F16, F32), "add_f16 from f32");
    assert!(is_dtype(m.add_f16_into_f32(&h, &h2), F32, F16), "add_f16 into f16");
    assert!(is_dtype(m.matvec(&w, &xh, &y), F32, F16), "matvec f16 x");
    assert!(is_dtype(m.matvec(&w, &x, &yh), F32, F16), "matvec f16 y");
    nothing_recorded(m, before);

    unchanged("f", &f, &d);
    unchanged("f2", &f2, &d);
    unchanged("h", &h, &f16s(&d));
    unchanged("h2", &h2, &f16s(&d));
    unchanged("y", &y, &d[2..]);
    unchanged("yh", &yh, &f16s(&d[2..]));
    common::assert_no_validation_errors();
}

#[test]
fn tensor_of_another_member_or_group() {
    let _s = serial();
    let g1 = common::logical(2);
    let g2 = common::logical(1);
    let (m0, m1) = (g1.member(0).unwrap(), g1.member(1).unwrap());
    let other = g2.member(0).unwrap(); // index 0 too, but of another group
    let mut rng = common::rng(3);
    let d = common::random(&mut rng, 6);
    let mine = m0.upload_f32(&d).unwrap();
    let mine_h = m0.upload(&d, &[6], DType::F16).unwrap();
    let mine_w = m0.upload(&d, &[2, 3], DType::F32).unwrap();
    let mine_x = m0.upload_f32(&d[..3]).unwrap();
    let mine_y = m0.upload_f32(&d[..2]).unwrap();
    m0.synchronize().unwrap();
    let before = m0.stats().submits;
    for theirs_member in [m1, other] {
        let t = theirs_member.upload_f32(&d).unwrap();
        let th = theirs_member.upload(&d, &[6], DType::F16).unwrap();
        let tw = theirs_member.upload(&d, &[2, 3], DType::F32).unwrap();
        let tx = theirs_member.upload_f32(&d[..3]).unwrap();
        let ty = theirs_member.upload_f32(&d[..2]).unwrap();
        let wrong = |r: crossgpu::Result<()>, what: &str| {
            assert!(
                matches!(r, Err(Error::WrongOwner { .. })),
                "{what} with a tensor of {theirs_member:?}: {r:?}"
            )
        };
        wrong(m0.fill(&t, 1.0), "fill");
        wrong(m0.scale(&t, 2.0), "scale");
        wrong(m0.write(&t, &d), "write");
        wrong(m0.add(&mine, &t), "add src");
        wrong(m0.add(&t, &mine), "add dst");
        wrong(m0.copy(&t, &mine), "copy src");
        wrong(m0.copy(&mine, &t), "copy dst");
        wrong(m0.convert_f32_to_f16(&t, &mine_h), "convert src");
        wrong(m0.convert_f32_to_f16(&mine, &th), "convert dst");
        wrong(m0.add_f16_into_f32(&mine, &th), "add_f16 src");
        wrong(m0.add_f16_into_f32(&t, &mine_h), "add_f16 dst");
        wrong(m0.matvec(&tw, &mine_x, &mine_y), "matvec w");
        wrong(m0.matvec(&mine_w, &tx, &mine_y), "matvec x");
        wrong(m0.matvec(&mine_w, &mine_x, &ty), "matvec y");
        // The message names both owners.
        let msg = m0.fill(&t, 1.0).unwrap_err().to_string();
        assert!(msg.contains(m0.label()), "message {msg:?} names the expected member");
        // And the owner's copy of the data is untouched.
        unchanged("their tensor", &t, &d);
        unchanged("their f16 tensor", &th, &f16s(&d));
        unchanged("their y", &ty, &d[..2]);
    }
    nothing_recorded(m0, before);
    unchanged("mine", &mine, &d);
    unchanged("mine_h", &mine_h, &f16s(&d));
    unchanged("mine_y", &mine_y, &d[..2]);
    common::assert_no_validation_errors();
}

#[test]
fn no_such_adapter() {
    let _s = serial();
    let inst = common::instance();
    let n = inst.adapters().len();
    for (spec, selector) in [
        ("nonexistentgpu".to_string(), "nonexistentgpu".to_string()),
        ("0,NonExistentGPU".into(), "nonexistentgpu".into()),
        (format!("{}", n + 3), format!("{}", n + 3)),
        (format!("0,{n}"), format!("{n}")),
    ] {
        match DeviceGroup::open(&inst, &GroupSpec::parse(&spec).unwrap()) {
            Err(Error::NoSuchAdapter { selector: s, available }) => {
                assert_eq!(s, selector, "{spec}");
                // The message lists every adapter the instance has (it assumed lavapipe was one).
                for a in inst.adapters() {
                    assert!(available.contains(&a.name), "{spec}: available = {available}");
                }
            }
            r => panic!("{spec}: expected NoSuchAdapter, got {r:?}"),
        }
    }
    common::assert_no_validation_errors();
}

#[test]
fn malformed_device_strings() {
    let _s = serial();
    for bad in [
        "0,",
        ",0",
        "0,,0",
        ",",
        " , ",
        "0x0",
        "0x65",
        "0x4294967296",
        "0x99999999999999999999",
        "99999999999999999999999",
        "a/b",
        "0;1",
        "llvm*pipe",
        "llvmpipe (LLVM)",
        "nvidia,",
    ] {
        match GroupSpec::parse(bad) {
            Err(Error::BadConfig { name, value, why }) => {
                assert_eq!(name, "CROSSGPU_DEVICES", "{bad}");
                assert_eq!(value, bad, "the error quotes the value");
                assert!(!why.is_empty(), "{bad}");
            }
            r => panic!("{bad:?} should be BadConfig, got {r:?}"),
        }
    }
    common::assert_no_validation_errors();
}

#[test]
fn more_queues_than_the_adapter_has() {
    let _s = serial();
    let inst = common::instance();
    // On every adapter, one queue more than its compute family has is refused, naming queues
    // (lavapipe has one queue, the H200 sixteen).
    for a in inst.adapters() {
        let over = a.caps.queue_count + 1;
        if over > 64 {
            continue; // the syntax allows at most 64 queues
        }
        for spec in
            [format!("{}x{over}", a.index), format!("{}*{over}", a.index), format!("0,{}x{over}", a.index)]
        {
            match DeviceGroup::open(&inst, &GroupSpec::parse(&spec).unwrap()) {
                Err(Error::Unsupported(msg)) => {
                    assert!(msg.contains("queue"), "{spec}: message {msg:?} mentions queues");
                }
                r => panic!("{spec}: expected Unsupported, got {r:?}"),
            }
        }
    }
    common::assert_no_validation_errors();
}

#[test]
fn out_of_memory_and_oversized_shapes() {
    let _s = serial();
    let group = common::logical(1);
    let m = group.member(0).unwrap();
    // ~8 GiB, past what one binding covers on every device crossgpu runs on (maxStorageBufferRange
    // is at most 4 GiB): refused before any allocation, naming the limit (`Member::empty`).
    for (shape, dtype) in [
        (vec![MAX_ELEMENTS], DType::F32),
        (vec![MAX_ELEMENTS], DType::F16),
        (vec![MAX_ELEMENTS / 2, 2], DType::F32),
    ] {
        match m.empty(&shape, dtype) {
            Err(Error::Unsupported(msg)) => assert!(msg.contains("maxStorageBufferRange"), "{msg}"),
            r => panic!(
                "empty({shape:?}, {dtype}): expected Unsupported naming maxStorageBufferRange, got {r:?}"
            ),
        }
        assert!(matches!(m.full(&shape, dtype, 1.0), Err(Error::Unsupported(_))), "full({shape:?}, {dtype})");
    }
    // More elements than a tensor may have, or a shape whose product overflows: Unsupported
    // before any allocation.
    for shape in [
        vec![MAX_ELEMENTS + 1],
        vec![MAX_ELEMENTS, 2],
        vec![usize::MAX],
        vec![usize::MAX, 2],
        vec![1 << 40, 1 << 40, 0], // overflows before the 0
    ] {
        for dtype in [DType::F32, DType::F16] {
            assert!(
                matches!(m.empty(&shape, dtype), Err(Error::Unsupported(_))),
                "empty({shape:?}, {dtype})"
            );
        }
    }
    // The member still works.
    let t = m.upload_f32(&[1.0, 2.0]).unwrap();
    m.scale(&t, 3.0).unwrap();
    assert_eq!(t.read().unwrap(), [3.0, 6.0]);
    common::assert_no_validation_errors();
}

/// A tensor bigger than the device's `maxStorageBufferRange` (128 MiB on lavapipe), but well
/// below `MAX_ELEMENTS` and the allocation limits: no kernel could bind it whole, so creating
/// it is refused with an error that names the limit (binding it would be invalid Vulkan).
#[test]
fn tensor_larger_than_max_storage_buffer_range() {
    let _s = serial();
    let group = common::logical(1);
    let m = group.member(0).unwrap();
    let limit = m.adapter().caps.max_storage_buffer_range as usize;
    let n = limit / 4 + 1; // one f32 past the limit
    match m.empty(&[n], DType::F32) {
        Err(Error::Unsupported(msg)) => assert!(msg.contains("maxStorageBufferRange"), "{msg}"),
        other => panic!("a tensor past maxStorageBufferRange: {other:?}"),
    }
    // Just at the limit is fine, and kernels on it work.
    let t = m.empty(&[limit / 4], DType::F32).unwrap();
    m.fill(&t, 2.5).unwrap();
    let v = t.read().unwrap();
    assert!(v.iter().all(|&x| x == 2.5), "fill of a tensor at the binding limit");
    common::assert_no_validation_errors();
}

/// `y = W x` with y the same tensor as x (or as w): the kernel reads x while other workgroups
/// write y, so the result would depend on scheduling. `Member::matvec` documents the refusal:
/// an `InvalidArgument`, and nothing recorded.
#[test]
fn matvec_with_y_aliasing_x() {
    let _s = serial();
    let group = common::logical(1);
    let m = group.member(0).unwrap();
    let n = 300;
    let mut rng = common::rng(4);
    let w = common::random(&mut rng, n * n);
    let x = common::random(&mut rng, n);
    let wt = m.upload(&w, &[n, n], DType::F32).unwrap();
    let xt = m.upload_f32(&x).unwrap();
    match m.matvec(&wt, &xt, &xt) {
        Err(Error::InvalidArgument(msg)) => assert!(msg.contains("same tensor"), "{msg}"),
        r => panic!("matvec(w, x, x): expected InvalidArgument, got {r:?}"),
    }
    unchanged("x after a rejected aliasing matvec", &xt, &x);
    match m.matvec(&wt, &xt, &wt) {
        Err(Error::InvalidArgument(msg)) | Err(Error::LengthMismatch { what: msg, .. }) => {
            assert!(msg.contains("same tensor") || msg.contains("matvec y"), "{msg}")
        }
        r => panic!("matvec(w, x, w): expected a refusal, got {r:?}"),
    }
    unchanged("w after a rejected aliasing matvec", &wt, &w);
    common::assert_no_validation_errors();
}

#[test]
fn errors_display_what_to_do() {
    let _s = serial();
    // Every variant a caller can hit here formats without panicking and says something.
    let inst = common::instance();
    let too_many = format!("0x{}", inst.adapters()[0].caps.queue_count.clamp(1, 63) + 1);
    let errors = [
        GroupSpec::parse("0,").unwrap_err(),
        DeviceGroup::open(&inst, &GroupSpec::parse("nonexistentgpu").unwrap()).unwrap_err(),
        DeviceGroup::open(&inst, &GroupSpec::parse(&too_many).unwrap()).unwrap_err(),
    ];
    for e in errors {
        let s = e.to_string();
        assert!(s.len() > 10, "{e:?} displays as {s:?}");
    }
    common::assert_no_validation_errors();
}

#[test]
fn recorders_of_different_queues_cannot_submit_as_one_batch() {
    // `Recorder::submit_together` batches recorders of one queue only; anything else is an
    // error that submits nothing and leaves both recorders usable.
    let _s = serial();
    use vk_native::{Access, Buffer, BufferUsage, Device, Instance, InstanceOptions, Recorder, SubmitInfo};
    common::instance(); // sets VK_LAYER_ENABLES for synchronization validation
    let inst = Instance::new(&InstanceOptions { validation: common::layer_installed() }).unwrap();
    let (d0, d1) = (Device::open(&inst, 0, 1).unwrap(), Device::open(&inst, 0, 1).unwrap());
    let usage = BufferUsage { copy_src: true, copy_dst: true };
    let (a, b) = (Buffer::new(&d0, 256, usage, "a").unwrap(), Buffer::new(&d0, 256, usage, "b").unwrap());
    let (c, d) = (Buffer::new(&d1, 256, usage, "c").unwrap(), Buffer::new(&d1, 256, usage, "d").unwrap());
    let (mut r0, mut r1) = (Recorder::new(&d0, 0).unwrap(), Recorder::new(&d1, 0).unwrap());
    r0.copy(&a, 0, &b, 0, 256).unwrap();
    r1.copy(&c, 0, &d, 0, 256).unwrap();
    let infos = [SubmitInfo::default(), SubmitInfo::default()];
    let e = Recorder::submit_together(&mut [&mut r0, &mut r1], &infos).unwrap_err();
    assert!(e.to_string().contains("recorders of one queue only"), "{e}");
    let mut r0b = Recorder::new(&d0, 0).unwrap();
    let e = Recorder::submit_together(&mut [&mut r0, &mut r0b], &infos[..1]).unwrap_err();
    assert!(e.to_string().contains("2 recorders but 1 submit infos"), "{e}");
    assert_eq!((r0.submitted(), r1.submitted(), r0b.submitted()), (0, 0, 0), "nothing was submitted");
    assert!(Recorder::submit_together(&mut [], &[]).unwrap().is_empty());
    // Both still hold their open command buffers and submit them normally.
    r0.barrier(Access::TRANSFER_WRITE, Access::TRANSFER_READ | Access::TRANSFER_WRITE).unwrap();
    r0.copy(&b, 0, &a, 0, 256).unwrap();
    for r in [&mut r0, &mut r1] {
        let v = r.submit(&SubmitInfo::default()).unwrap();
        assert!(r.wait(v, 60_000_000_000).unwrap());
    }
    // And two recorders of one queue do batch: both progress values advance together.
    r0.copy(&a, 0, &b, 0, 256).unwrap();
    r0b.barrier(Access::TRANSFER_WRITE, Access::TRANSFER_READ | Access::TRANSFER_WRITE).unwrap();
    r0b.copy(&b, 0, &a, 0, 256).unwrap();
    let v = Recorder::submit_together(&mut [&mut r0, &mut r0b], &infos).unwrap();
    assert_eq!(v, vec![2, 1]);
    assert!(r0.wait(v[0], 60_000_000_000).unwrap() && r0b.wait(v[1], 60_000_000_000).unwrap());
    common::assert_no_validation_errors();
}
