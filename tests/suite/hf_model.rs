//! A Hugging Face checkpoint through the decoder: SmolLM2-135M-Instruct's GGUF written out as a
//! safetensors directory here (two shards and their index, config.json, tokenizer.json,
//! tokenizer_config.json), in three types at once: attention matrices and the (tied) embedding
//! table BF16 (kept as BF16 on the members), the MLP's gate and up F16 (uploaded as stored),
//! its down projection and the norms F32 (converted to f16 on the members). Checked like the
//! GGUF: against the f64 reference over the directory's own values on 1 and 2 members, the
//! tokenizer against the GGUF's, the capital of France, and generation end to end.

use std::path::{Path, PathBuf};

use crate::common::{self, serial};
use crate::gguf_model::{check_against_reference, smollm2, Held};
use crossgpu::model::{Checkpoint, Generation, LlamaGguf, Message, Sampling, Tokenizer};
use crossgpu::tp::{Decoder, Norm, SplitSpec, Weight};
use safetensors::tensor::TensorView;
use safetensors::Dtype;

struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The variant written: SmolLM2 as it is (llama), or as a qwen2 model with q/k/v biases.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Variant {
    Llama,
    Qwen2,
}

fn dtype_of(name: &str, variant: Variant) -> Dtype {
    if name.ends_with(".bias") {
        Dtype::F32
    } else if variant == Variant::Qwen2 && (name.contains("self_attn") || name.contains("embed_tokens")) {
        // F16 q/k/v, which without biases would take the fused q/k/v+RoPE kernel; an F16
        // embedding table (uploaded as stored, and the tied output an f16 matrix).
        Dtype::F16
    } else if name.contains("self_attn") || name.contains("embed_tokens") {
        Dtype::BF16
    } else if name.contains("gate_proj") || name.contains("up_proj") {
        Dtype::F16
    } else {
        Dtype::F32
    }
}

fn encode(v: &[f32], d: Dtype) -> Vec<u8> {
    match d {
        Dtype::BF16 => v.iter().flat_map(|&x| half::bf16::from_f32(x).to_le_bytes()).collect(),
        Dtype::F16 => v.iter().flat_map(|&x| half::f16::from_f32(x).to_le_bytes()).collect(),
        _ => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
    }
}

/// SmolLM2's GGUF as a Hugging Face directory (the GGUF's q/k rows are put back in Hugging
/// Face's order by `values`, which is crossgpu's); as qwen2, with random q/k/v biases of the
/// activations' size (uniform in ±0.5, never zero).
fn write_hf(gguf: &LlamaGguf, dir: &Path, variant: Variant) {
    let c = gguf.config(16).unwrap();
    let (h, q, kv, f) = (c.hidden, c.q_heads * c.head_dim, c.kv_heads * c.head_dim, c.ffn);
    let mut tensors: Vec<(String, Vec<usize>, Vec<f32>)> = vec![
        ("model.embed_tokens.weight".into(), vec![c.vocab, h], gguf.embedding_values().unwrap()),
        ("model.norm.weight".into(), vec![h], gguf.norm_values(Norm::Final).unwrap()),
    ];
    for l in 0..c.layers {
        let p = |n: &str| format!("model.layers.{l}.{n}.weight");
        let m = |w, rows, cols| gguf.values(w, 0..rows, 0..cols).unwrap();
        tensors.extend([
            (p("input_layernorm"), vec![h], gguf.norm_values(Norm::Attention(l)).unwrap()),
            (p("post_attention_layernorm"), vec![h], gguf.norm_values(Norm::Mlp(l)).unwrap()),
            (p("self_attn.q_proj"), vec![q, h], m(Weight::Q(l), q, h)),
            (p("self_attn.k_proj"), vec![kv, h], m(Weight::K(l), kv, h)),
            (p("self_attn.v_proj"), vec![kv, h], m(Weight::V(l), kv, h)),
            (p("self_attn.o_proj"), vec![h, q], m(Weight::O(l), h, q)),
            (p("mlp.gate_proj"), vec![f, h], m(Weight::Gate(l), f, h)),
            (p("mlp.up_proj"), vec![f, h], m(Weight::Up(l), f, h)),
            (p("mlp.down_proj"), vec![h, f], m(Weight::Down(l), h, f)),
        ]);
        if variant == Variant::Qwen2 {
            let bias = |n: usize, salt: usize| -> Vec<f32> {
                (0..n)
                    .map(|i| (((i * 7919 + salt * 104_729 + l * 31) % 1000) as f32 - 499.5) / 999.0)
                    .collect()
            };
            tensors.extend([
                (p("self_attn.q_proj").replace(".weight", ".bias"), vec![q], bias(q, 1)),
                (p("self_attn.k_proj").replace(".weight", ".bias"), vec![kv], bias(kv, 2)),
                (p("self_attn.v_proj").replace(".weight", ".bias"), vec![kv], bias(kv, 3)),
            ]);
        }
    }
    let encoded: Vec<(String, Dtype, Vec<usize>, Vec<u8>)> = tensors
        .into_iter()
        .map(|(n, shape, v)| {
            let d = dtype_of(&n, variant);
            let b = encode(&v, d);
            (n, d, shape, b)
        })
        .collect();
    let mut weight_map = serde_json::Map::new();
    for shard in 0..2 {
        let file = format!("model-{:05}-of-00002.safetensors", shard + 1);
        let part: Vec<(String, TensorView)> = encoded
            .iter()
            .enumerate()
            .filter(|(i, _)| i % 2 == shard)
            .map(|(_, (n, d, s, b))| (n.clone(), TensorView::new(*d, s.clone(), b).unwrap()))
            .collect();
        for (n, _) in &part {
            weight_map.insert(n.clone(), file.clone().into());
        }
        safetensors::serialize_to_file(part, None, &dir.join(&file)).unwrap();
    }
    let index = serde_json::json!({ "metadata": {}, "weight_map": weight_map });
    std::fs::write(dir.join("model.safetensors.index.json"), index.to_string()).unwrap();
    let file = gguf.file();
    let (arch, model_type) = match variant {
        Variant::Llama => ("LlamaForCausalLM", "llama"),
        Variant::Qwen2 => ("Qwen2ForCausalLM", "qwen2"),
    };
    let config = serde_json::json!({
        "architectures": [arch],
        "model_type": model_type,
        // qwen2's configs carry a window that is off unless use_sliding_window says so.
        "sliding_window": 64,
        "use_sliding_window": false,
        "hidden_size": h,
        "intermediate_size": f,
        "num_hidden_layers": c.layers,
        "num_attention_heads": c.q_heads,
        "num_key_value_heads": c.kv_heads,
        "vocab_size": c.vocab,
        "max_position_embeddings": file.u64("llama.context_length").unwrap(),
        "rms_norm_eps": c.eps,
        "rope_theta": c.rope_base,
        "tie_word_embeddings": true,
        "hidden_act": "silu",
        "bos_token_id": 1,
        "eos_token_id": 2,
        "torch_dtype": "bfloat16",
    });
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    let tokenizer = Tokenizer::from_gguf(file).unwrap();
    std::fs::write(dir.join("tokenizer.json"), tokenizer.to_hf_json().unwrap()).unwrap();
    let vocab = file.str_array("tokenizer.ggml.tokens").unwrap();
    let tokenizer_config = serde_json::json!({
        "bos_token": vocab[tokenizer.bos().unwrap() as usize],
        "eos_token": vocab[tokenizer.eos().unwrap() as usize],
        "add_bos_token": file.optional_bool("tokenizer.ggml.add_bos_token").unwrap().unwrap_or(true),
        "chat_template": file.str("tokenizer.chat_template").unwrap(),
    });
    std::fs::write(dir.join("tokenizer_config.json"), tokenizer_config.to_string()).unwrap();
}

/// SmolLM2 as a Hugging Face directory, written once per test.
fn smollm2_hf(test: &str) -> Option<(Scratch, LlamaGguf)> {
    smollm2_hf_as(test, Variant::Llama)
}

fn smollm2_hf_as(test: &str, variant: Variant) -> Option<(Scratch, LlamaGguf)> {
    let path = smollm2()?;
    let gguf = LlamaGguf::open(&path).unwrap();
    let dir = std::env::temp_dir().join(format!("crossgpu-smollm2-hf-{}-{test}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    write_hf(&gguf, &dir, variant);
    Some((Scratch(dir), gguf))
}

#[test]
fn smollm2_safetensors_decodes_like_the_f64_reference_on_every_split() {
    let _s = serial();
    let Some((dir, _gguf)) = smollm2_hf("reference") else { return };
    let mut model = Checkpoint::open(&dir.0).unwrap();
    assert_eq!((model.format(), model.architecture()), ("safetensors", "llama"));
    assert!(model.tied_embeddings());
    // The three types as the members hold them: BF16 kept, F16 and F32 as f16.
    if let Checkpoint::Safetensors(m) = &model {
        assert!(
            m.keeps_blocks(Weight::Q(0), 0..576).unwrap() && m.keeps_blocks(Weight::Output, 0..576).unwrap()
        );
        assert!(
            !m.keeps_blocks(Weight::Up(3), 0..576).unwrap()
                && !m.keeps_blocks(Weight::Down(3), 0..1536).unwrap()
        );
    } else {
        panic!("a directory opens as safetensors");
    }
    check_against_reference(&mut model, 1, Held::Halves);
}

/// qwen2's q/k/v biases: added after each product (the F16 q/k/v then skip the fused kernel),
/// against the reference that adds them, on 1 and 2 members; a window past its switch is
/// ignored, and one that is on refuses a longer KV cache.
#[test]
fn smollm2_as_qwen2_with_biases_decodes_like_the_f64_reference() {
    let _s = serial();
    let Some((dir, _gguf)) = smollm2_hf_as("qwen2", Variant::Qwen2) else { return };
    let mut model = Checkpoint::open(&dir.0).unwrap();
    assert_eq!(model.architecture(), "qwen2");
    let b = model.bias_values(Weight::K(4), 0..192).unwrap().expect("qwen2's k has a bias");
    assert!(b.iter().all(|&x| x != 0.0 && x.abs() <= 0.5));
    assert!(model.bias_values(Weight::Up(4), 0..1536).unwrap().is_none());
    check_against_reference(&mut model, 1, Held::Halves);
    let config_path = dir.0.join("config.json");
    let mut config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&config_path).unwrap()).unwrap();
    config["use_sliding_window"] = true.into();
    std::fs::write(&config_path, config.to_string()).unwrap();
    let model = Checkpoint::open(&dir.0).unwrap();
    assert!(model.config(64).is_ok());
    let e = model.config(65).unwrap_err().to_string();
    assert!(e.contains("sliding_window") && e.contains("64"), "{e}");
}

/// The directory's tokenizer is the GGUF's: the same ids, stops, chat prompt; and the model
/// completes the fact through it, on two members.
#[test]
fn smollm2_safetensors_tokenizer_and_the_capital_of_france() {
    let _s = serial();
    let Some((dir, gguf)) = smollm2_hf("tokenizer") else { return };
    let mut model = Checkpoint::open(&dir.0).unwrap();
    let tok = model.tokenizer().unwrap();
    let want = Tokenizer::from_gguf(gguf.file()).unwrap();
    for text in ["The capital of France is", "2025 héllo wörld 😀", "<|im_start|>user\nHi<|im_end|>\n"] {
        assert_eq!(tok.encode(text).unwrap(), want.encode(text).unwrap(), "{text:?}");
        assert_eq!(tok.encode_prompt(text).unwrap(), want.encode_prompt(text).unwrap(), "{text:?}");
        assert_eq!(tok.decode(&tok.encode(text).unwrap()).unwrap(), text);
    }
    assert_eq!((tok.bos(), tok.stops()), (want.bos(), want.stops()));
    let chat = [Message { role: "user".into(), content: "Hi".into() }];
    assert_eq!(tok.chat_prompt(&chat).unwrap(), want.chat_prompt(&chat).unwrap());
    let prompt = tok.encode("The capital of France is").unwrap();
    let cfg = model.config(16).unwrap();
    let group = common::logical(2);
    let comm = Some(crossgpu::Comm::new(&group).unwrap());
    let mut d = Decoder::load_from(&group, cfg, &SplitSpec::Even, comm, &mut model, |_, _| {}).unwrap();
    let first: Vec<u32> = Generation::new(&mut d, &prompt, Sampling::greedy(), tok.stops(), 1)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(tok.decode(&first).unwrap(), " Paris");
    common::assert_no_validation_errors();
}

/// `Generation` end to end on the GGUF: greedy tokens on one member equal two members' (a
/// sampled run repeats with its seed and stays within top-k), the budget and the KV cache's
/// room are checked before any step.
#[test]
fn smollm2_generation_greedy_and_sampled() {
    let _s = serial();
    let Some(path) = smollm2() else { return };
    let mut model = Checkpoint::open(&path).unwrap();
    let tok = model.tokenizer().unwrap();
    let chat = tok.chat_prompt(&[Message { role: "user".into(), content: "What is 2+2?".into() }]).unwrap();
    let prompt = tok.encode(&chat).unwrap();
    let max = 8;
    let cfg = model.config(prompt.len() + max).unwrap();
    let mut runs = Vec::new();
    for n in [1, 2] {
        let group = common::logical(n);
        let comm = (n > 1).then(|| crossgpu::Comm::new(&group)).transpose().unwrap();
        let mut d =
            Decoder::load_from(&group, cfg.clone(), &SplitSpec::Even, comm, &mut model, |_, _| {}).unwrap();
        // Too long for the cache: refused before any step.
        assert!(Generation::new(&mut d, &prompt, Sampling::greedy(), tok.stops(), max + 2).is_err());
        assert_eq!(d.position(), 0);
        let greedy: Vec<u32> = Generation::new(&mut d, &prompt, Sampling::greedy(), tok.stops(), max)
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert!(!greedy.is_empty() && greedy.len() <= max);
        eprintln!("{n} member(s): {:?}", tok.decode(&greedy).unwrap());
        runs.push(greedy);
        common::assert_no_validation_errors();
    }
    assert_eq!(runs[0], runs[1], "one member and two generate the same greedy tokens");
    // Sampled: the same seed gives the same tokens (two loads of one member).
    let sampling = Sampling { temperature: 0.8, top_k: 20, top_p: 0.95, seed: 7 };
    let sampled: Vec<Vec<u32>> = (0..2)
        .map(|_| {
            let group = common::logical(1);
            let mut d =
                Decoder::load_from(&group, cfg.clone(), &SplitSpec::Even, None, &mut model, |_, _| {})
                    .unwrap();
            Generation::new(&mut d, &prompt, sampling, tok.stops(), max)
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap()
        })
        .collect();
    assert_eq!(sampled[0], sampled[1]);
    assert!(tok.decode(&sampled[0]).is_ok());
    common::assert_no_validation_errors();
}
