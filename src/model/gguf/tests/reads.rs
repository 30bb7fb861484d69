use std::ops::Range;

use super::*;

#[test]
fn read_checks_its_arguments() {
    let dir = Scratch::new("read-args");
    let mut rng = XorShift(77);
    let ts = vec![
        tensor("a", &[64, 4], GgmlType::Q4_0, rng.bytes(4 * 36)),
        tensor("b", &[8, 2], GgmlType::F32, rng.bytes(64)),
    ];
    let path = dir.write("args.gguf", &TestFile::new(vec![], ts).encode());
    let f = GgufFile::open(&path).unwrap();
    let a = f.tensor("a").unwrap();
    let mut buf = vec![0u8; 1000];
    let cases = [
        f.read(a, 0..145, &mut buf[..145]).unwrap_err(),
        f.read(a, 0..10, &mut buf[..9]).unwrap_err(),
        f.read_rows(a, 0..5, 0..64, &mut buf[..180]).unwrap_err(),
        f.read_rows(a, Range { start: 2, end: 1 }, 0..64, &mut buf[..0]).unwrap_err(),
        f.read_rows(a, 0..1, 16..64, &mut buf[..18]).unwrap_err(),
        f.read_rows(a, 0..1, 0..96, &mut buf[..54]).unwrap_err(),
        f.read_rows(a, 0..2, 0..32, &mut buf[..37]).unwrap_err(),
    ];
    for e in cases {
        assert!(e.what.contains("'a'"), "{e}");
    }
    let e = f.read_rows(a, 0..1, 16..64, &mut buf[..18]).unwrap_err();
    assert!(e.what.contains("block"), "{e}");
    // A TensorInfo that is not the file's own is refused, not read from where it points.
    let mut forged = a.clone();
    forged.offset = 0;
    let e = f.read(&forged, 0..4, &mut buf[..4]).unwrap_err();
    assert!(e.what.contains("not one of this file's"), "{e}");
    // Row by row (narrow slices of wide rows) and gathered (wide slices) agree with read.
    let mut whole = vec![0u8; 144];
    f.read(a, 0..144, &mut whole).unwrap();
    let mut narrow = vec![0u8; 4 * 18];
    f.read_rows(a, 0..4, 32..64, &mut narrow).unwrap();
    let want: Vec<u8> = (0..4).flat_map(|r| whole[r * 36 + 18..r * 36 + 36].to_vec()).collect();
    assert_eq!(narrow, want);
    let b = f.tensor("b").unwrap();
    let mut whole = vec![0u8; 64];
    f.read(b, 0..64, &mut whole).unwrap();
    let mut first_cols = vec![0u8; 8];
    f.read_rows(b, 0..2, 0..1, &mut first_cols).unwrap();
    assert_eq!(first_cols, [&whole[0..4], &whole[32..36]].concat());
}

#[test]
fn gathering_spans_larger_than_one_read() {
    // Rows of 2 MiB: four rows per 8 MiB gather, so 9 rows take three reads.
    let dir = Scratch::new("gather");
    let row_len = 512 * 1024u64;
    let mut rng = XorShift(5);
    let data = rng.bytes((row_len * 4 * 9) as usize);
    let path = dir.write(
        "big.gguf",
        &TestFile::new(vec![], vec![tensor("w", &[row_len, 9], GgmlType::F32, data.clone())]).encode(),
    );
    let f = GgufFile::open(&path).unwrap();
    let t = f.tensor("w").unwrap();
    let cols = 1024..row_len;
    let col_bytes = ((cols.end - cols.start) * 4) as usize;
    let mut out = vec![0u8; 9 * col_bytes];
    f.read_rows(t, 0..9, cols.clone(), &mut out).unwrap();
    for (i, r) in (0..9usize).enumerate() {
        let s = r * row_len as usize * 4 + cols.start as usize * 4;
        assert!(out[i * col_bytes..(i + 1) * col_bytes] == data[s..s + col_bytes], "row {r}");
    }
}
