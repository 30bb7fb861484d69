use super::*;

// ---- bad files ----

/// A small valid file for the bad-file tests: a string, an array, and three tensors.
fn small_valid() -> TestFile {
    let mut rng = XorShift(99);
    TestFile::new(
        vec![
            ("general.name", MetaValue::Str("tiny".into())),
            ("tokenizer.ggml.tokens", MetaValue::Array(MetaArray::Str(vec!["<s>".into(), "a".into()]))),
            ("llama.block_count", MetaValue::U32(1)),
            ("tokenizer.ggml.scores", MetaValue::Array(MetaArray::F32(vec![0.0, -1.0]))),
        ],
        vec![
            tensor("token_embd.weight", &[32, 2], GgmlType::Q8_0, rng.bytes(68)),
            tensor("blk.0.attn_norm.weight", &[32], GgmlType::F32, rng.bytes(128)),
            tensor("output.weight", &[64, 2], GgmlType::Q4_1, rng.bytes(80)),
        ],
    )
}

/// Where the value of the first metadata entry starts: after the 24-byte header, the key and
/// the value type.
fn first_value_at(f: &TestFile) -> usize {
    24 + 8 + f.kv[0].0.len() + 4
}

#[test]
fn truncated_files_are_refused_at_40_points() {
    let dir = Scratch::new("truncated");
    let good = small_valid().encode();
    GgufFile::open(&dir.write("good.gguf", &good)).expect("the untruncated file opens");
    let n = good.len();
    let mut cuts: Vec<usize> = (0..40).map(|i| i * (n - 1) / 39).collect();
    cuts.dedup();
    assert_eq!(cuts.len(), 40);
    for cut in cuts {
        let e = expect_err(&dir, &good[..cut], &[]);
        assert!(!e.what.is_empty());
        if cut >= n - 80 {
            // Inside the last tensor's data: the error names it.
            assert!(e.what.contains("output.weight") && e.what.contains("truncated"), "cut {cut}: {e}");
        }
    }
    // Cut inside a tensor info: the error names the tensor.
    let header_end = good.windows(13).position(|w| w == b"output.weight").unwrap() + 13;
    expect_err(&dir, &good[..header_end + 2], &["output.weight", "truncated"]);
    // Cut inside a metadata string: the error names the key.
    let at = first_value_at(&small_valid());
    let array_at = at + 8 + "tiny".len() + 8 + "tokenizer.ggml.tokens".len() + 4;
    expect_err(&dir, &good[..array_at + 30], &["tokenizer.ggml.tokens", "element 1", "truncated"]);
}

#[test]
fn wrong_magic_version_and_endianness() {
    let dir = Scratch::new("magic");
    let mut f = small_valid();
    f.magic = *b"GGML";
    expect_err(&dir, &f.encode(), &["not a GGUF file", "GGML"]);
    expect_err(&dir, b"GG", &["not a GGUF file"]);
    expect_err(&dir, b"", &["0 bytes"]);
    let mut f = small_valid();
    f.version = 1;
    expect_err(&dir, &f.encode(), &["version 1"]);
    f.version = 4;
    expect_err(&dir, &f.encode(), &["version 4"]);
    f.version = 3u32.swap_bytes();
    expect_err(&dir, &f.encode(), &["big-endian"]);
    f.version = 2;
    let path = dir.write("v2.gguf", &f.encode());
    assert_eq!(GgufFile::open(&path).unwrap().version(), 2);
}

#[test]
fn bad_tensor_infos_are_refused_naming_the_tensor() {
    let dir = Scratch::new("tensors");
    // Unknown type.
    let mut f = small_valid();
    f.tensors[1].type_id = 99;
    expect_err(&dir, &f.encode(), &["blk.0.attn_norm.weight", "unknown type id 99"]);
    // A removed type id.
    f.tensors[1].type_id = 4;
    expect_err(&dir, &f.encode(), &["blk.0.attn_norm.weight", "4"]);
    // Shape larger than the data: overlaps the next tensor.
    let mut f = small_valid();
    f.tensors[0].dims = vec![32, 4];
    expect_err(&dir, &f.encode(), &["token_embd.weight", "blk.0.attn_norm.weight", "overlaps"]);
    // Shape smaller than the data: a gap before the next tensor.
    let mut f = small_valid();
    f.tensors[1].dims = vec![8];
    expect_err(&dir, &f.encode(), &["blk.0.attn_norm.weight", "output.weight", "gap"]);
    // Shape larger than the data of the last tensor: past the end of the file.
    let mut f = small_valid();
    f.tensors[2].dims = vec![64, 3];
    expect_err(&dir, &f.encode(), &["output.weight", "end of the file"]);
    // Element count overflowing u64.
    let mut f = small_valid();
    f.tensors[1].dims = vec![1 << 32, 1 << 32, 1 << 32];
    expect_err(&dir, &f.encode(), &["blk.0.attn_norm.weight", "overflows"]);
    // Byte size overflowing u64 (elements fit, bytes do not).
    f.tensors[1].dims = vec![1 << 62];
    expect_err(&dir, &f.encode(), &["blk.0.attn_norm.weight", "overflows"]);
    // A dimension above i64::MAX.
    f.tensors[1].dims = vec![u64::MAX];
    expect_err(&dir, &f.encode(), &["blk.0.attn_norm.weight", "i64::MAX"]);
    // Too many dimensions.
    f.tensors[1].dims = vec![32, 1, 1, 1, 1];
    expect_err(&dir, &f.encode(), &["blk.0.attn_norm.weight", "5 dimensions"]);
    // A row that is not a whole number of blocks.
    let mut f = small_valid();
    f.tensors[0].dims = vec![33, 2];
    expect_err(&dir, &f.encode(), &["token_embd.weight", "block"]);
    // Offset not aligned.
    let mut f = small_valid();
    f.tensors[1].offset = Some(96 + 8);
    expect_err(&dir, &f.encode(), &["blk.0.attn_norm.weight", "alignment"]);
    // Data past the end of the file.
    let mut f = small_valid();
    f.tensors[2].offset = Some(1 << 20);
    expect_err(&dir, &f.encode(), &["output.weight"]);
    f.tensors[2].offset = Some(u64::MAX - 31);
    expect_err(&dir, &f.encode(), &["output.weight"]);
    // The first tensor not at 0.
    let mut f = small_valid();
    for (t, off) in f.tensors.iter_mut().zip([32, 128, 256]) {
        t.offset = Some(off);
    }
    expect_err(&dir, &f.encode(), &["token_embd.weight", "not 0"]);
    // Duplicate names.
    let mut f = small_valid();
    f.tensors[2].name = "token_embd.weight".into();
    expect_err(&dir, &f.encode(), &["token_embd.weight", "twice"]);
    // Tensors out of order on disk but laid out contiguously are accepted.
    let mut f = small_valid();
    f.tensors.swap(0, 1);
    f.tensors[0].offset = Some(96);
    f.tensors[1].offset = Some(0);
    GgufFile::open(&dir.write("swapped.gguf", &f.encode())).expect("out-of-order offsets are fine");
}

#[test]
fn bad_metadata_is_refused_naming_the_key() {
    let dir = Scratch::new("metadata");
    let f = small_valid();
    let at = first_value_at(&f);
    // A string length of u64::MAX.
    let mut b = f.encode();
    b[at..at + 8].copy_from_slice(&u64::MAX.to_le_bytes());
    expect_err(&dir, &b, &["general.name", "18446744073709551615"]);
    // A key length of u64::MAX.
    let mut b = f.encode();
    b[24..32].copy_from_slice(&u64::MAX.to_le_bytes());
    expect_err(&dir, &b, &["metadata entry #0"]);
    // An array count of u64::MAX (and one that only just does not fit).
    let array_at = at + 8 + "tiny".len() + 8 + "tokenizer.ggml.tokens".len() + 4;
    for count in [u64::MAX, u64::MAX / 8 + 1, 1 << 40] {
        let mut b = f.encode();
        b[array_at + 4..array_at + 12].copy_from_slice(&count.to_le_bytes());
        expect_err(&dir, &b, &["tokenizer.ggml.tokens", "cannot fit"]);
    }
    // An unknown array element type and value type.
    let mut b = f.encode();
    b[array_at..array_at + 4].copy_from_slice(&13u32.to_le_bytes());
    expect_err(&dir, &b, &["tokenizer.ggml.tokens", "unknown value type 13"]);
    let mut b = f.encode();
    b[at - 4..at].copy_from_slice(&77u32.to_le_bytes());
    expect_err(&dir, &b, &["general.name", "unknown value type 77"]);
    // Counts of entries and tensors beyond what the file can hold.
    let mut b = f.encode();
    b[16..24].copy_from_slice(&u64::MAX.to_le_bytes());
    expect_err(&dir, &b, &["metadata entry count"]);
    let mut b = f.encode();
    b[8..16].copy_from_slice(&(1u64 << 50).to_le_bytes());
    expect_err(&dir, &b, &["tensor count"]);
    // Strings that are not UTF-8: a value, a key, an array element, a tensor name.
    let mut b = f.encode();
    b[at + 8] = 0xFF;
    expect_err(&dir, &b, &["general.name", "UTF-8"]);
    let mut b = f.encode();
    b[32] = 0xC3;
    expect_err(&dir, &b, &["metadata entry #0", "UTF-8"]);
    let mut b = f.encode();
    b[array_at + 12 + 8] = 0x80;
    expect_err(&dir, &b, &["element 0", "tokenizer.ggml.tokens", "UTF-8"]);
    let mut b = f.encode();
    let name_at = b.windows(13).position(|w| w == b"output.weight").unwrap();
    b[name_at] = 0xFE;
    expect_err(&dir, &b, &["tensor #2", "UTF-8"]);
    // Duplicate keys.
    let mut f2 = small_valid();
    f2.kv[2].0 = "general.name".into();
    expect_err(&dir, &f2.encode(), &["general.name", "twice"]);
    // A bool that is neither 0 nor 1.
    let f3 = TestFile::new(vec![("flag", MetaValue::Bool(true))], vec![]);
    let mut b = f3.encode();
    b[first_value_at(&f3)] = 2;
    expect_err(&dir, &b, &["flag", "neither 0 nor 1"]);
    // Alignment: zero, not a power of two, the wrong type.
    for (v, needle) in [
        (MetaValue::U32(0), "power of two"),
        (MetaValue::U32(48), "power of two"),
        (MetaValue::U64(32), "u32"),
    ] {
        let f4 = TestFile::new(vec![(KEY_ALIGNMENT, v)], vec![]);
        expect_err(&dir, &f4.encode(), &[KEY_ALIGNMENT, needle]);
    }
    // Arrays nested too deep.
    let mut deep = MetaArray::U8(vec![1]);
    for _ in 0..MAX_ARRAY_NESTING {
        deep = MetaArray::Array(vec![deep]);
    }
    let f5 = TestFile::new(vec![("deep", MetaValue::Array(deep.clone()))], vec![]);
    expect_err(&dir, &f5.encode(), &["deep", "nested"]);
    let MetaArray::Array(inner) = deep else { unreachable!() };
    let f6 = TestFile::new(vec![("deep", MetaValue::Array(inner[0].clone()))], vec![]);
    GgufFile::open(&dir.write("deep-ok.gguf", &f6.encode())).expect("nesting at the limit is fine");
}

#[test]
fn random_mutations_never_panic() {
    let dir = Scratch::new("mutations");
    let good = small_valid().encode();
    let path = dir.0.join("mutant.gguf");
    let mut rng = XorShift(0xDEAD_BEEF_CAFE_F00D);
    let (mut opened, mut refused) = (0, 0);
    for iteration in 0..2000 {
        let mut b = good.clone();
        for _ in 0..1 + rng.below(3) {
            if b.is_empty() {
                break;
            }
            let at = rng.below(b.len() as u64) as usize;
            match rng.below(6) {
                0 => b[at] = rng.next() as u8,
                1 => b[at] ^= 1 << rng.below(8),
                2 => b[at] = 0xFF,
                3 => b[at] = 0,
                4 => {
                    // A plausible-looking length or count.
                    let v = [rng.next(), rng.below(64), u64::MAX, 1 << rng.below(64)][rng.below(4) as usize];
                    let end = (at + 8).min(b.len());
                    b[at..end].copy_from_slice(&v.to_le_bytes()[..end - at]);
                }
                _ => b.truncate(at),
            }
        }
        std::fs::write(&path, &b).unwrap();
        let result = std::panic::catch_unwind(|| exercise(&path));
        match result {
            Ok(true) => opened += 1,
            Ok(false) => refused += 1,
            Err(_) => panic!("iteration {iteration} panicked on {} bytes: {:02x?}", b.len(), b),
        }
    }
    eprintln!("random mutations: {opened} files opened, {refused} refused, none panicked");
    // Both outcomes happen: the mutations hit both data and structure.
    assert!(opened > 50 && refused > 500, "opened {opened}, refused {refused}");
}

/// Opens `path` and, if it opens, uses everything: metadata getters, every read.
fn exercise(path: &Path) -> bool {
    let Ok(f) = GgufFile::open(path) else { return false };
    for (k, v) in f.metadata() {
        let _ = (f.u32(k), f.u64(k), f.f32(k), f.str(k), f.bool(k), f.str_array(k), f.f32_array(k));
        let _ = (f.i32_array(k), f.u32_array(k), v.to_string());
    }
    let _ = f.architecture();
    for t in f.tensors() {
        let mut buf = vec![0u8; t.bytes as usize];
        f.read(t, 0..t.bytes, &mut buf).expect("a tensor of an open file reads");
        if t.rows() > 0 {
            let mut row = vec![0u8; t.row_bytes() as usize];
            f.read_rows(t, 0..1, 0..t.row_len(), &mut row).expect("its first row reads");
        }
        let _ = f.dequantize_rows(t, 0..t.rows());
    }
    true
}
