//! The Hugging Face reader on small checkpoints written here: tensors read back exactly in
//! each type and split, shards, tied and untied outputs; and bad directories refused with the
//! file and the tensor or key named.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use safetensors::tensor::TensorView;
use safetensors::Dtype;

use super::*;
use crate::error::Error;
use crate::tp::{Norm, Weight};

const HIDDEN: usize = 64;
const FFN: usize = 128;
const LAYERS: usize = 2;
const HEADS: usize = 4;
const KV_HEADS: usize = 2;
const HEAD_DIM: usize = 16;
const VOCAB: usize = 96;

struct Scratch(PathBuf);

impl Scratch {
    fn new(test: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("crossgpu-hf-{}-{test}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create scratch dir");
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn config(tied: bool) -> serde_json::Value {
    serde_json::json!({
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": HIDDEN,
        "intermediate_size": FFN,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "vocab_size": VOCAB,
        "max_position_embeddings": 256,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "tie_word_embeddings": tied,
        "hidden_act": "silu",
        "rope_scaling": null,
        "eos_token_id": [2, 5],
        "torch_dtype": "bfloat16"
    })
}

/// Every tensor of the small model, `[rows, cols]` (vectors `[cols]`).
fn tensor_shapes(tied: bool) -> Vec<(String, Vec<usize>)> {
    let (q, kv) = (HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM);
    let mut t = vec![
        ("model.embed_tokens.weight".to_string(), vec![VOCAB, HIDDEN]),
        ("model.norm.weight".into(), vec![HIDDEN]),
    ];
    if !tied {
        t.push(("lm_head.weight".into(), vec![VOCAB, HIDDEN]));
    }
    for l in 0..LAYERS {
        let p = |n: &str| format!("model.layers.{l}.{n}");
        t.extend([
            (p("input_layernorm.weight"), vec![HIDDEN]),
            (p("post_attention_layernorm.weight"), vec![HIDDEN]),
            (p("self_attn.q_proj.weight"), vec![q, HIDDEN]),
            (p("self_attn.k_proj.weight"), vec![kv, HIDDEN]),
            (p("self_attn.v_proj.weight"), vec![kv, HIDDEN]),
            (p("self_attn.o_proj.weight"), vec![HIDDEN, q]),
            (p("mlp.gate_proj.weight"), vec![FFN, HIDDEN]),
            (p("mlp.up_proj.weight"), vec![FFN, HIDDEN]),
            (p("mlp.down_proj.weight"), vec![HIDDEN, FFN]),
        ]);
    }
    t
}

/// Random values in [-2, 2) with 24 bits of mantissa (each type stores its rounding of them).
fn random_values(n: usize, rng: &mut ChaCha8Rng) -> Vec<f32> {
    (0..n).map(|_| (rng.next_u32() >> 8) as f32 / (1u32 << 22) as f32 - 2.0).collect()
}

fn encode(v: &[f32], dtype: Dtype) -> Vec<u8> {
    match dtype {
        Dtype::F32 => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        Dtype::F16 => v.iter().flat_map(|&x| half::f16::from_f32(x).to_le_bytes()).collect(),
        Dtype::BF16 => v.iter().flat_map(|&x| half::bf16::from_f32(x).to_le_bytes()).collect(),
        other => panic!("no test encoding for {other:?}"),
    }
}

/// A checkpoint written to `dir`, with the values of every tensor as f32 (as stored).
struct Written {
    values: HashMap<String, Vec<f32>>,
}

/// Writes the small model: `dtype(name)` for each tensor, `shards` files (an index when > 1).
fn write_model(dir: &Path, tied: bool, shards: usize, dtype: impl Fn(&str) -> Dtype) -> Written {
    let mut rng = ChaCha8Rng::seed_from_u64(17);
    let shapes = tensor_shapes(tied);
    let mut values = HashMap::new();
    let mut bytes = Vec::new();
    for (name, shape) in &shapes {
        let d = dtype(name);
        let v = random_values(shape.iter().product(), &mut rng);
        // What the file stores, read back as f32.
        let stored: Vec<f32> = match d {
            Dtype::BF16 => v.iter().map(|&x| half::bf16::from_f32(x).to_f32()).collect(),
            Dtype::F16 => v.iter().map(|&x| half::f16::from_f32(x).to_f32()).collect(),
            _ => v.clone(),
        };
        values.insert(name.clone(), stored);
        bytes.push((name.clone(), d, shape.clone(), encode(&v, d)));
    }
    let mut weight_map = serde_json::Map::new();
    for s in 0..shards {
        let file = if shards == 1 {
            "model.safetensors".to_string()
        } else {
            format!("model-{:05}-of-{shards:05}.safetensors", s + 1)
        };
        let part: Vec<(String, TensorView)> = bytes
            .iter()
            .enumerate()
            .filter(|(i, _)| i % shards == s)
            .map(|(_, (n, d, shape, b))| (n.clone(), TensorView::new(*d, shape.clone(), b).unwrap()))
            .collect();
        for (n, _) in &part {
            weight_map.insert(n.clone(), serde_json::Value::String(file.clone()));
        }
        safetensors::serialize_to_file(part, None, &dir.join(&file)).unwrap();
    }
    if shards > 1 {
        let index = serde_json::json!({ "metadata": {}, "weight_map": weight_map });
        std::fs::write(dir.join("model.safetensors.index.json"), index.to_string()).unwrap();
    }
    std::fs::write(dir.join("config.json"), config(tied).to_string()).unwrap();
    Written { values }
}

fn mixed(name: &str) -> Dtype {
    if name.contains("norm") {
        Dtype::F32
    } else if name.contains("self_attn") || name.contains("embed") {
        Dtype::BF16
    } else if name.contains("down") {
        Dtype::F32
    } else {
        Dtype::F16
    }
}

fn expect_err(r: Result<LlamaSafetensors, Error>, words: &[&str]) {
    let e = match r {
        Ok(_) => panic!("opened, but should fail with {words:?}"),
        Err(e) => e.to_string(),
    };
    for w in words {
        assert!(e.contains(w), "the error {e:?} does not name {w:?}");
    }
}

#[test]
fn tensors_read_back_as_stored_in_each_type_and_shard_layout() {
    for (tied, shards) in [(true, 1), (false, 1), (false, 3)] {
        let s = Scratch::new(&format!("read-{tied}-{shards}"));
        let w = write_model(&s.0, tied, shards, mixed);
        let m = LlamaSafetensors::open(&s.0).unwrap();
        assert_eq!(m.tied_embeddings(), tied);
        let c = m.config(32).unwrap();
        assert_eq!(
            (c.hidden, c.ffn, c.layers, c.q_heads, c.kv_heads, c.head_dim, c.vocab, c.max_seq),
            (HIDDEN, FFN, LAYERS, HEADS, KV_HEADS, HEAD_DIM, VOCAB, 32)
        );
        assert!(m.config(257).is_err(), "past max_position_embeddings");
        let (q, kv) = (HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM);
        let mut checks = vec![(
            Weight::Output,
            if tied { "model.embed_tokens.weight".to_string() } else { "lm_head.weight".into() },
            VOCAB,
            HIDDEN,
        )];
        for l in 0..LAYERS {
            let p = |n: &str| format!("model.layers.{l}.{n}.weight");
            checks.extend([
                (Weight::Q(l), p("self_attn.q_proj"), q, HIDDEN),
                (Weight::K(l), p("self_attn.k_proj"), kv, HIDDEN),
                (Weight::V(l), p("self_attn.v_proj"), kv, HIDDEN),
                (Weight::O(l), p("self_attn.o_proj"), HIDDEN, q),
                (Weight::Gate(l), p("mlp.gate_proj"), FFN, HIDDEN),
                (Weight::Up(l), p("mlp.up_proj"), FFN, HIDDEN),
                (Weight::Down(l), p("mlp.down_proj"), HIDDEN, FFN),
            ]);
        }
        for (weight, name, rows, cols) in checks {
            let all = &w.values[&name];
            // Whole, and a slice with odd row and column bounds (a member's share).
            for (r, k) in [(0..rows, 0..cols), (3..rows - 5, 8..cols - 16), (1..2, 0..cols)] {
                let got = m.values(weight, r.clone(), k.clone()).unwrap();
                let want: Vec<f32> =
                    r.clone().flat_map(|i| all[i * cols + k.start..i * cols + k.end].to_vec()).collect();
                assert_eq!(got, want, "{name} rows {r:?} columns {k:?}");
            }
            let kept = m.keeps_blocks(weight, 8..cols).unwrap();
            assert_eq!(kept, mixed(&name) == Dtype::BF16, "{name}");
            assert!(
                !m.keeps_blocks(weight, 4..cols).unwrap() || mixed(&name) != Dtype::BF16,
                "{name}: 4 is off the BF16 grid"
            );
            assert!(m.values(weight, 0..rows + 1, 0..cols).is_err());
        }
        assert_eq!(m.embedding_values().unwrap(), w.values["model.embed_tokens.weight"]);
        assert_eq!(m.norm_values(Norm::Final).unwrap(), w.values["model.norm.weight"]);
        assert_eq!(
            m.norm_values(Norm::Mlp(1)).unwrap(),
            w.values["model.layers.1.post_attention_layernorm.weight"]
        );
        assert_eq!(m.hf_config().eos_ids(), vec![2, 5]);
    }
}

#[test]
fn bad_directories_are_refused_naming_the_file_and_what() {
    let s = Scratch::new("bad");
    let dir = &s.0;
    write_model(dir, true, 1, mixed);
    assert!(LlamaSafetensors::open(dir).is_ok());
    let file = dir.join("model.safetensors");
    let good = std::fs::read(&file).unwrap();
    let cfg = dir.join("config.json");
    let restore = || {
        std::fs::write(&file, &good).unwrap();
        std::fs::write(&cfg, config(true).to_string()).unwrap();
    };
    // Truncated data, a header longer than the file, a file shorter than the length field.
    std::fs::write(&file, &good[..good.len() - 3]).unwrap();
    expect_err(LlamaSafetensors::open(dir), &["model.safetensors", "truncated"]);
    let mut long = good.clone();
    long[..8].copy_from_slice(&(good.len() as u64).to_le_bytes());
    std::fs::write(&file, &long).unwrap();
    expect_err(LlamaSafetensors::open(dir), &["model.safetensors", "header"]);
    std::fs::write(&file, &good[..5]).unwrap();
    expect_err(LlamaSafetensors::open(dir), &["model.safetensors", "too short"]);
    // A header that is not JSON; one whose offsets overlap (a tensor's size disagrees with its shape).
    let n = u64::from_le_bytes(good[..8].try_into().unwrap()) as usize;
    let mut garbled = good.clone();
    garbled[8] = b'[';
    std::fs::write(&file, &garbled).unwrap();
    expect_err(LlamaSafetensors::open(dir), &["model.safetensors", "not valid"]);
    let header = std::str::from_utf8(&good[8..8 + n]).unwrap();
    let shape_lie = header.replacen(&format!("[{HIDDEN}]"), &format!("[{}]", HIDDEN + 1), 1);
    assert_eq!(shape_lie.len(), header.len(), "the edit keeps the header's length");
    let mut lie = good.clone();
    lie[8..8 + n].copy_from_slice(shape_lie.as_bytes());
    std::fs::write(&file, &lie).unwrap();
    expect_err(LlamaSafetensors::open(dir), &["model.safetensors", "not valid"]);
    restore();
    // A type crossgpu does not read, named with its tensor.
    let w = dir.join("w");
    std::fs::create_dir_all(&w).unwrap();
    write_model(
        &w,
        true,
        1,
        |n| if n == "model.layers.1.mlp.up_proj.weight" { Dtype::F32 } else { mixed(n) },
    );
    let f = w.join("model.safetensors");
    let bytes = std::fs::read(&f).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header = std::str::from_utf8(&bytes[8..8 + n]).unwrap();
    // F32 → I32: the same size, another type.
    let at = header.find("model.layers.1.mlp.up_proj.weight").unwrap();
    let retyped = format!("{}{}", &header[..at], header[at..].replacen("\"F32\"", "\"I32\"", 1));
    let mut b2 = bytes.clone();
    b2[8..8 + n].copy_from_slice(retyped.as_bytes());
    std::fs::write(&f, &b2).unwrap();
    expect_err(
        LlamaSafetensors::open(&w),
        &["model.safetensors", "model.layers.1.mlp.up_proj.weight", "I32"],
    );
    // Config keys that change the computation, and a missing or misshapen tensor.
    for (key, value, words) in [
        ("model_type", serde_json::json!("gemma"), vec!["config.json", "gemma"]),
        (
            "rope_scaling",
            serde_json::json!({"type": "linear", "factor": 2.0}),
            vec!["config.json", "rope_scaling"],
        ),
        ("hidden_act", serde_json::json!("gelu"), vec!["config.json", "gelu"]),
        ("attention_bias", serde_json::json!(true), vec!["config.json", "bias"]),
        ("sliding_window", serde_json::json!("wide"), vec!["config.json", "sliding_window"]),
        ("num_key_value_heads", serde_json::json!(3), vec!["config.json", "num_key_value_heads"]),
        (
            "intermediate_size",
            serde_json::json!(FFN + 8),
            vec!["model.safetensors", "mlp.gate_proj", "config.json says"],
        ),
        ("num_hidden_layers", serde_json::json!(LAYERS + 1), vec!["model.layers.2.", "no tensor"]),
        ("tie_word_embeddings", serde_json::json!(false), vec!["lm_head.weight"]),
    ] {
        let mut c = config(true);
        c[key] = value;
        std::fs::write(&cfg, c.to_string()).unwrap();
        expect_err(LlamaSafetensors::open(dir), &words);
    }
    std::fs::write(&cfg, "{ not json").unwrap();
    expect_err(LlamaSafetensors::open(dir), &["config.json"]);
    std::fs::remove_file(&cfg).unwrap();
    expect_err(LlamaSafetensors::open(dir), &["config.json", "cannot read"]);
    restore();
    assert!(LlamaSafetensors::open(dir).is_ok());
}

#[test]
fn bad_shard_indexes_are_refused() {
    let s = Scratch::new("shards");
    let dir = &s.0;
    write_model(dir, false, 2, mixed);
    assert!(LlamaSafetensors::open(dir).is_ok());
    let index = dir.join("model.safetensors.index.json");
    let good: serde_json::Value = serde_json::from_slice(&std::fs::read(&index).unwrap()).unwrap();
    // A shard outside the directory.
    let mut v = good.clone();
    v["weight_map"]["model.norm.weight"] = serde_json::json!("../elsewhere.safetensors");
    std::fs::write(&index, v.to_string()).unwrap();
    expect_err(
        LlamaSafetensors::open(dir),
        &["index.json", "model.norm.weight", "not a file of the directory"],
    );
    // A tensor placed in the wrong shard.
    let mut v = good.clone();
    let wrong = match v["weight_map"]["model.norm.weight"].as_str().unwrap() {
        "model-00001-of-00002.safetensors" => "model-00002-of-00002.safetensors",
        _ => "model-00001-of-00002.safetensors",
    };
    v["weight_map"]["model.norm.weight"] = serde_json::json!(wrong);
    std::fs::write(&index, v.to_string()).unwrap();
    expect_err(LlamaSafetensors::open(dir), &[wrong, "model.norm.weight"]);
    // A missing shard file, and no weight_map.
    let mut v = good.clone();
    v["weight_map"]["model.norm.weight"] = serde_json::json!("model-00009-of-00009.safetensors");
    std::fs::write(&index, v.to_string()).unwrap();
    expect_err(LlamaSafetensors::open(dir), &["model-00009-of-00009.safetensors", "cannot open"]);
    std::fs::write(&index, "{}").unwrap();
    expect_err(LlamaSafetensors::open(dir), &["index.json", "weight_map"]);
    // A tensor left out of the index.
    let mut v = good.clone();
    v["weight_map"].as_object_mut().unwrap().remove("model.layers.0.mlp.down_proj.weight");
    std::fs::write(&index, v.to_string()).unwrap();
    expect_err(LlamaSafetensors::open(dir), &["model.layers.0.mlp.down_proj.weight"]);
}

#[test]
fn a_bias_tensor_is_refused_by_name() {
    let s = Scratch::new("bias");
    let dir = &s.0;
    write_model(dir, true, 1, mixed);
    let file = dir.join("model.safetensors");
    let st = std::fs::read(&file).unwrap();
    let parsed = safetensors::SafeTensors::deserialize(&st).unwrap();
    let mut tensors: Vec<(String, TensorView)> = parsed.tensors();
    let bias = vec![0u8; 4 * HEADS * HEAD_DIM];
    tensors.push((
        "model.layers.0.self_attn.q_proj.bias".into(),
        TensorView::new(Dtype::F32, vec![HEADS * HEAD_DIM], &bias).unwrap(),
    ));
    let out = dir.join("with-bias.safetensors");
    safetensors::serialize_to_file(tensors, None, &out).unwrap();
    std::fs::rename(&out, &file).unwrap();
    expect_err(LlamaSafetensors::open(dir), &["model.layers.0.self_attn.q_proj.bias", "biases"]);
}
