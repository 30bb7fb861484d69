use super::*;

// ---- the round trip ----

/// Metadata with a value of every GGUF type, arrays of each, and nested arrays.
fn every_value_type() -> Vec<(&'static str, MetaValue)> {
    vec![
        ("general.architecture", MetaValue::Str("llama".into())),
        ("t.u8", MetaValue::U8(200)),
        ("t.i8", MetaValue::I8(-100)),
        ("t.u16", MetaValue::U16(60000)),
        ("t.i16", MetaValue::I16(-30000)),
        ("t.u32", MetaValue::U32(4_000_000_000)),
        ("t.i32", MetaValue::I32(-2_000_000_000)),
        ("t.f32", MetaValue::F32(100000.0)),
        ("t.bool", MetaValue::Bool(true)),
        ("t.str", MetaValue::Str("héllo, ☃".into())),
        ("t.u64", MetaValue::U64(u64::MAX)),
        ("t.i64", MetaValue::I64(i64::MIN)),
        ("t.f64", MetaValue::F64(-1.0e300)),
        ("a.u8", MetaValue::Array(MetaArray::U8(vec![0, 1, 255]))),
        ("a.i8", MetaValue::Array(MetaArray::I8(vec![-128, 127]))),
        ("a.u16", MetaValue::Array(MetaArray::U16(vec![1, 65535]))),
        ("a.i16", MetaValue::Array(MetaArray::I16(vec![-32768, 5]))),
        ("a.u32", MetaValue::Array(MetaArray::U32(vec![7, u32::MAX]))),
        ("a.i32", MetaValue::Array(MetaArray::I32(vec![-1, 1, 2]))),
        ("a.f32", MetaValue::Array(MetaArray::F32(vec![0.5, -0.25, f32::INFINITY]))),
        ("a.bool", MetaValue::Array(MetaArray::Bool(vec![true, false, true]))),
        ("a.str", MetaValue::Array(MetaArray::Str(vec!["a".into(), "".into(), "Ġthe".into()]))),
        ("a.u64", MetaValue::Array(MetaArray::U64(vec![u64::MAX, 0]))),
        ("a.i64", MetaValue::Array(MetaArray::I64(vec![i64::MIN, i64::MAX]))),
        ("a.f64", MetaValue::Array(MetaArray::F64(vec![1.0e-300]))),
        ("a.empty", MetaValue::Array(MetaArray::U32(vec![]))),
        (
            "a.nested",
            MetaValue::Array(MetaArray::Array(vec![
                MetaArray::U32(vec![1, 2]),
                MetaArray::Str(vec!["x".into()]),
                MetaArray::Array(vec![MetaArray::F64(vec![2.5]), MetaArray::Array(vec![])]),
            ])),
        ),
        (KEY_ALIGNMENT, MetaValue::U32(64)),
    ]
}

/// One tensor of each supported type (and one unsupported), with random data.
fn every_tensor_type(rng: &mut XorShift) -> Vec<TestTensor> {
    let mut ts = Vec::new();
    let shapes: [(GgmlType, &[u64]); 9] = [
        (GgmlType::F32, &[8, 3]),
        (GgmlType::F16, &[16, 5]),
        (GgmlType::BF16, &[4, 2, 3]),
        (GgmlType::Q8_0, &[96, 4]),
        (GgmlType::Q4_0, &[64, 3]),
        (GgmlType::Q4_1, &[128, 7]),
        (GgmlType::Q4_K, &[512, 3]),
        (GgmlType::Q6_K, &[256, 2, 2]),
        (GgmlType::Q5_K, &[256]),
    ];
    for (i, (ty, dims)) in shapes.into_iter().enumerate() {
        let n = dims.iter().skip(1).product::<u64>() * ty.row_bytes(dims[0]).unwrap();
        ts.push(tensor(&format!("blk.{i}.{}.weight", ty.name()), dims, ty, rng.bytes(n as usize)));
    }
    ts
}

#[test]
fn round_trip_of_every_value_and_tensor_type() {
    let dir = Scratch::new("round-trip");
    let mut rng = XorShift(0x1234_5678_9ABC_DEF1);
    let spec = TestFile::new(every_value_type(), every_tensor_type(&mut rng));
    let path = dir.write("all.gguf", &spec.encode());
    let f = GgufFile::open(&path).expect("open");
    assert_eq!((f.version(), f.alignment()), (3, 64));
    assert!(f.data_start().is_multiple_of(64));

    // Metadata: every entry, in order, equal.
    let want: Vec<(String, MetaValue)> = every_value_type().into_iter().map(|(k, v)| (k.into(), v)).collect();
    assert_eq!(f.metadata(), &want[..]);
    assert_eq!(f.architecture().unwrap(), "llama");
    assert_eq!(f.architecture_in(&["llama", "mistral", "qwen2"]).unwrap(), "llama");
    let e = f.architecture_in(&["qwen2", "mistral"]).unwrap_err();
    assert!(e.what.contains("'llama'") && e.what.contains("qwen2, mistral"), "{e}");
    assert_eq!(f.u32("t.u32").unwrap(), 4_000_000_000);
    assert_eq!(f.u32("t.u8").unwrap(), 200, "a narrower integer widens");
    assert_eq!(f.u64("t.u64").unwrap(), u64::MAX);
    assert_eq!(f.f32("t.f32").unwrap(), 100000.0);
    assert_eq!(f.f32("t.f64").unwrap(), -1.0e300f64 as f32);
    assert!(f.bool("t.bool").unwrap());
    assert_eq!(f.str("t.str").unwrap(), "héllo, ☃");
    assert_eq!(f.str_array("a.str").unwrap(), ["a", "", "Ġthe"]);
    assert_eq!(f.f32_array("a.f32").unwrap(), [0.5, -0.25, f32::INFINITY]);
    assert_eq!(f.i32_array("a.i32").unwrap(), [-1, 1, 2]);
    assert_eq!(f.u32_array("a.u32").unwrap(), [7, u32::MAX]);
    assert_eq!(f.optional_u32("absent").unwrap(), None);
    assert_eq!(f.optional_str_array("absent").unwrap(), None);
    // Wrong types and values: errors naming the key and the file.
    for (e, key) in [
        (f.u32("t.str").unwrap_err(), "t.str"),
        (f.u32("t.u64").unwrap_err(), "t.u64"),
        (f.u64("t.i8").unwrap_err(), "t.i8"),
        (f.str("t.u8").unwrap_err(), "t.u8"),
        (f.bool("t.u8").unwrap_err(), "t.u8"),
        (f.f32("t.i32").unwrap_err(), "t.i32"),
        (f.str_array("a.u32").unwrap_err(), "a.u32"),
        (f.f32_array("t.f32").unwrap_err(), "t.f32"),
        (f.i32_array("a.u32").unwrap_err(), "a.u32"),
        (f.u32_array("a.i32").unwrap_err(), "a.i32"),
        (f.optional_str("t.bool").unwrap_err(), "t.bool"),
        (f.u32("llama.block_count").unwrap_err(), "llama.block_count"),
    ] {
        assert!(e.what.contains(key), "{e}");
        assert_eq!(e.file, path.display().to_string());
    }

    // Tensors: directory and data, bitwise.
    assert_eq!(f.tensors().len(), spec.tensors.len());
    for (t, want) in f.tensors().iter().zip(&spec.tensors) {
        assert_eq!((&t.name, &t.dims, t.ty.id()), (&want.name, &want.dims, want.type_id));
        assert_eq!(t.bytes, want.data.len() as u64);
        assert!(t.offset >= f.data_start() && (t.offset - f.data_start()).is_multiple_of(64));
        assert_eq!(f.tensor(&t.name).unwrap(), t);
        let mut all = vec![0u8; t.bytes as usize];
        f.read(t, 0..t.bytes, &mut all).unwrap();
        assert_eq!(all, want.data, "{}", t.name);
        let mut part = vec![0u8; 5];
        f.read(t, 3..8, &mut part).unwrap();
        assert_eq!(part, want.data[3..8]);

        // Every block-aligned column range of every row range.
        let (be, bb, rb) = (t.ty.block_elems(), t.ty.block_bytes() as usize, t.row_bytes() as usize);
        let blocks = t.row_len() / be;
        for r0 in 0..t.rows() {
            for r1 in r0..=t.rows() {
                for c0 in 0..=blocks {
                    for c1 in c0..=blocks {
                        let mut out = vec![0u8; (r1 - r0) as usize * (c1 - c0) as usize * bb];
                        f.read_rows(t, r0..r1, c0 * be..c1 * be, &mut out).unwrap();
                        let expect: Vec<u8> = (r0..r1)
                            .flat_map(|r| {
                                let s = r as usize * rb;
                                want.data[s + c0 as usize * bb..s + c1 as usize * bb].to_vec()
                            })
                            .collect();
                        assert_eq!(out, expect, "{} rows {r0}..{r1} blocks {c0}..{c1}", t.name);
                    }
                }
            }
        }
        if t.ty.supported() {
            let y = f.dequantize_rows(t, 0..t.rows()).unwrap();
            assert_eq!(y.len() as u64, t.elements());
            f.check_supported(t).unwrap();
        } else {
            let e = f.check_supported(t).unwrap_err();
            assert!(e.what.contains(&t.name) && e.what.contains("Q5_K"), "{e}");
        }
    }
    assert_eq!(f.tensor("blk.0.F32.weight").unwrap().rows(), 3);
    assert_eq!(f.tensor("blk.2.BF16.weight").unwrap().rows(), 6);
    let e = f.tensor("output.weight").unwrap_err();
    assert!(e.what.contains("output.weight"), "{e}");
}

#[test]
fn quantized_values_read_back_through_the_file() {
    let dir = Scratch::new("values");
    let values: Vec<f32> = (0..64 * 4).map(|i| ((i * 37) % 101) as f32 / 10.0 - 5.0).collect();
    let mut ts = Vec::new();
    for ty in [GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1] {
        let data = quant::quantize_reference(ty, &values).unwrap();
        ts.push(tensor(ty.name(), &[64, 4], ty, data));
    }
    let path = dir.write("values.gguf", &TestFile::new(vec![], ts).encode());
    let f = GgufFile::open(&path).unwrap();
    for t in f.tensors() {
        let y = f.dequantize_rows(t, 1..3).unwrap();
        let bound = match t.ty {
            GgmlType::F32 => 0.0,
            GgmlType::F16 => 0.005,
            GgmlType::BF16 => 0.02,
            GgmlType::Q8_0 => 0.025,
            _ => 0.7,
        };
        for (a, b) in values[64..192].iter().zip(&y) {
            assert!((a - b).abs() <= bound, "{}: {a} -> {b}", t.name);
        }
    }
    let t = f.tensor("Q8_0").unwrap();
    let e = f.dequantize_rows(t, 3..5).unwrap_err();
    assert!(e.what.contains("Q8_0") && e.what.contains("3..5"), "{e}");
}
