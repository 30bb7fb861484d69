//! The llama family read from GGUF: llama's query and key rows come back in crossgpu's RoPE
//! order (the converter's permutation undone), qwen2's as stored (NeoX RoPE) with their biases;
//! any other bias is refused by name.

use super::*;
use crate::model::LlamaGguf;
use crate::tp::Weight;

const HIDDEN: u64 = 8;
const HEADS: u64 = 2;
const KV: u64 = 1;
const D: u64 = HIDDEN / HEADS;
const FFN: u64 = 8;
const VOCAB: u64 = 4;

/// F32 `[rows, cols]` (GGUF dims `[cols, rows]`) whose element (r, c) is `r · 1000 + c`.
fn numbered(name: &str, rows: u64, cols: u64) -> TestTensor {
    let data = (0..rows * cols).flat_map(|i| ((i / cols * 1000 + i % cols) as f32).to_le_bytes()).collect();
    if rows == 1 {
        tensor(name, &[cols], GgmlType::F32, data)
    } else {
        tensor(name, &[cols, rows], GgmlType::F32, data)
    }
}

/// A one-layer model of `arch`, with `biases` (tensor names within the layer, e.g. `attn_q`).
fn model(arch: &str, biases: &[&str]) -> TestFile {
    let key = |k: &str| format!("{arch}.{k}");
    let kv: Vec<(String, MetaValue)> = vec![
        ("general.architecture".into(), MetaValue::Str(arch.into())),
        (key("embedding_length"), MetaValue::U32(HIDDEN as u32)),
        (key("feed_forward_length"), MetaValue::U32(FFN as u32)),
        (key("block_count"), MetaValue::U32(1)),
        (key("attention.head_count"), MetaValue::U32(HEADS as u32)),
        (key("attention.head_count_kv"), MetaValue::U32(KV as u32)),
        (key("attention.layer_norm_rms_epsilon"), MetaValue::F32(1e-6)),
        (
            "tokenizer.ggml.tokens".into(),
            MetaValue::Array(MetaArray::Str((0..VOCAB).map(|i| format!("t{i}")).collect())),
        ),
    ];
    let (q, k) = (HEADS * D, KV * D);
    let mut ts = vec![
        numbered("token_embd.weight", VOCAB, HIDDEN),
        numbered("output_norm.weight", 1, HIDDEN),
        numbered("blk.0.attn_norm.weight", 1, HIDDEN),
        numbered("blk.0.ffn_norm.weight", 1, HIDDEN),
        numbered("blk.0.attn_q.weight", q, HIDDEN),
        numbered("blk.0.attn_k.weight", k, HIDDEN),
        numbered("blk.0.attn_v.weight", k, HIDDEN),
        numbered("blk.0.attn_output.weight", HIDDEN, q),
        numbered("blk.0.ffn_gate.weight", FFN, HIDDEN),
        numbered("blk.0.ffn_up.weight", FFN, HIDDEN),
        numbered("blk.0.ffn_down.weight", HIDDEN, FFN),
    ];
    for b in biases {
        let rows = match *b {
            "attn_q" => q,
            "attn_k" | "attn_v" => k,
            _ => HIDDEN,
        };
        // A bias numbered by row: element r is r · 1000 (its "row" in the numbering above).
        let data = (0..rows).flat_map(|r| ((r * 1000) as f32).to_le_bytes()).collect();
        ts.push(tensor(&format!("blk.0.{b}.bias"), &[rows], GgmlType::F32, data));
    }
    let mut f = TestFile::new(vec![], ts);
    f.kv = kv;
    f
}

/// The file row behind each of a head's rows, for `rows` query rows (`d` per head).
fn rows_of(m: &LlamaGguf, w: Weight, rows: u64) -> Vec<u64> {
    let v = m.values(w, 0..rows as usize, 0..1).unwrap();
    v.into_iter().map(|x| x as u64 / 1000).collect()
}

#[test]
fn llama_rows_are_unpermuted_and_qwen2_rows_kept_with_their_biases() {
    let dir = Scratch::new("llama-family");
    // llama: crossgpu's row `half · d/2 + j` of a head is the file's row `2j + half`.
    let llama = LlamaGguf::open(&dir.write("llama.gguf", &model("llama", &[]).encode())).unwrap();
    assert_eq!(rows_of(&llama, Weight::Q(0), HEADS * D), [0, 2, 1, 3, 4, 6, 5, 7]);
    assert_eq!(rows_of(&llama, Weight::K(0), KV * D), [0, 2, 1, 3]);
    assert_eq!(rows_of(&llama, Weight::V(0), KV * D), [0, 1, 2, 3]);
    assert_eq!(llama.bias_values(Weight::Q(0), 0..8).unwrap(), None);
    // qwen2: rows as stored; biases read in the same order as their rows, any slice of them.
    let f = model("qwen2", &["attn_q", "attn_k", "attn_v"]);
    let qwen = LlamaGguf::open(&dir.write("qwen2.gguf", &f.encode())).unwrap();
    assert_eq!(qwen.architecture(), "qwen2");
    assert_eq!(rows_of(&qwen, Weight::Q(0), HEADS * D), [0, 1, 2, 3, 4, 5, 6, 7]);
    assert_eq!(rows_of(&qwen, Weight::K(0), KV * D), [0, 1, 2, 3]);
    assert_eq!(
        qwen.bias_values(Weight::Q(0), 2..7).unwrap(),
        Some(vec![2000.0, 3000.0, 4000.0, 5000.0, 6000.0])
    );
    assert_eq!(qwen.bias_values(Weight::V(0), 0..4).unwrap(), Some(vec![0.0, 1000.0, 2000.0, 3000.0]));
    assert_eq!(qwen.bias_values(Weight::O(0), 0..8).unwrap(), None);
    assert!(qwen.bias_values(Weight::Q(0), 0..9).is_err());
    // A llama file with biases: permuted like their rows.
    let lb = LlamaGguf::open(&dir.write("llama-bias.gguf", &model("llama", &["attn_q"]).encode())).unwrap();
    let want: Vec<f32> = [0, 2, 1, 3, 4, 6, 5, 7].iter().map(|&r| (r * 1000) as f32).collect();
    assert_eq!(lb.bias_values(Weight::Q(0), 0..8).unwrap(), Some(want));
    // Biases the decoder does not add are refused by name, and so is a misshapen one.
    for (bias, words) in [("attn_output", "blk.0.attn_output.bias"), ("ffn_down", "blk.0.ffn_down.bias")] {
        let e =
            LlamaGguf::open(&dir.write("other-bias.gguf", &model("qwen2", &[bias]).encode())).unwrap_err();
        assert!(e.to_string().contains(words), "{e}");
    }
    let mut f = model("qwen2", &["attn_k"]);
    let k = f.tensors.iter_mut().find(|t| t.name == "blk.0.attn_k.bias").unwrap();
    k.dims = vec![3];
    k.data.truncate(12);
    let e = LlamaGguf::open(&dir.write("short-bias.gguf", &f.encode())).unwrap_err();
    assert!(e.to_string().contains("blk.0.attn_k.bias"), "{e}");
}
