//! A Hugging Face model's `config.json`, for the llama family: the decoder's shape, and the keys
//! whose values would change the computation in ways crossgpu does not implement, refused by name
//! rather than ignored.

use serde::Deserialize;
use serde_json::Value;

use crate::error::FormatError;

/// The `model_type`s read here, and the `architectures` entry each has.
pub const MODEL_TYPES: &[(&str, &str)] =
    &[("llama", "LlamaForCausalLM"), ("mistral", "MistralForCausalLM"), ("qwen2", "Qwen2ForCausalLM")];

/// The keys of `config.json` crossgpu reads.
#[derive(Debug, Clone, Deserialize)]
pub struct HfConfig {
    /// `llama` or `mistral`.
    pub model_type: String,
    /// Residual width.
    pub hidden_size: usize,
    /// MLP features.
    pub intermediate_size: usize,
    /// Layers.
    pub num_hidden_layers: usize,
    /// Query heads.
    pub num_attention_heads: usize,
    /// Key/value heads (absent: as many as query heads).
    pub num_key_value_heads: Option<usize>,
    /// Elements per head (absent: `hidden_size / num_attention_heads`).
    pub head_dim: Option<usize>,
    /// Tokens in the vocabulary.
    pub vocab_size: usize,
    /// The context the model was trained for.
    #[serde(default = "default_context")]
    pub max_position_embeddings: usize,
    /// RMSNorm's epsilon.
    pub rms_norm_eps: f32,
    /// RoPE base.
    #[serde(default = "default_rope_theta")]
    pub rope_theta: f32,
    /// Whether the output projection is the embedding table.
    #[serde(default)]
    pub tie_word_embeddings: bool,
    /// The MLP's activation: only `silu` is computed.
    #[serde(default = "default_act")]
    pub hidden_act: String,
    /// Biases on q/k/v/o: not computed, refused.
    #[serde(default)]
    pub attention_bias: bool,
    /// Biases on the MLP: not computed, refused.
    #[serde(default)]
    pub mlp_bias: bool,
    /// RoPE scaling (llama 3's, YaRN, ...): not computed, refused when present.
    #[serde(default)]
    pub rope_scaling: Option<Value>,
    /// Sliding-window attention's window (mistral; qwen2 only with `use_sliding_window`): a KV
    /// cache longer than the window is refused ([`HfConfig::window`]).
    #[serde(default)]
    pub sliding_window: Option<Value>,
    /// qwen2's switch for `sliding_window`.
    #[serde(default)]
    pub use_sliding_window: bool,
    /// The end-of-sequence token(s): one id or a list.
    #[serde(default)]
    pub eos_token_id: Option<Value>,
}

fn default_context() -> usize {
    2048
}
fn default_rope_theta() -> f32 {
    10_000.0
}
fn default_act() -> String {
    "silu".into()
}

impl HfConfig {
    /// Parses `json` (the contents of `file`) and refuses what the decoder cannot compute, naming
    /// the key.
    pub fn parse(json: &[u8], file: &str) -> Result<Self, FormatError> {
        let err = |what: String| FormatError::new(file, what);
        let c: HfConfig =
            serde_json::from_slice(json).map_err(|e| err(format!("not a model config: {e}")))?;
        if !MODEL_TYPES.iter().any(|(t, _)| *t == c.model_type) {
            let known: Vec<_> = MODEL_TYPES.iter().map(|(t, _)| *t).collect();
            return Err(err(format!(
                "model_type is {:?}; crossgpu reads {}",
                c.model_type,
                known.join(", ")
            )));
        }
        if c.hidden_act != "silu" {
            return Err(err(format!("hidden_act is {:?}: only silu is computed", c.hidden_act)));
        }
        if c.attention_bias || c.mlp_bias {
            return Err(err("attention_bias / mlp_bias: biases are not supported yet".into()));
        }
        if let Some(v) = c.rope_scaling.as_ref().filter(|v| !v.is_null()) {
            return Err(err(format!("rope_scaling is {v}: scaled RoPE is not supported yet")));
        }
        if let Some(v) = c.sliding_window.as_ref().filter(|v| !v.is_null() && v.as_u64().is_none()) {
            return Err(err(format!("sliding_window is {v}, not a number of tokens")));
        }
        Ok(c)
    }

    /// Whether q, k and v have biases (qwen2 always; llama with `attention_bias`, refused).
    pub fn qkv_bias(&self) -> bool {
        self.model_type == "qwen2"
    }

    /// The attention window in tokens, where the model attends to a sliding window only.
    pub fn window(&self) -> Option<u64> {
        if self.model_type == "qwen2" && !self.use_sliding_window {
            return None;
        }
        self.sliding_window.as_ref().and_then(Value::as_u64)
    }

    /// The end-of-sequence ids the config names (one or a list; none where absent).
    pub fn eos_ids(&self) -> Vec<u32> {
        match &self.eos_token_id {
            Some(Value::Number(n)) => n.as_u64().and_then(|n| u32::try_from(n).ok()).into_iter().collect(),
            Some(Value::Array(a)) => {
                a.iter().filter_map(Value::as_u64).filter_map(|n| u32::try_from(n).ok()).collect()
            }
            _ => Vec::new(),
        }
    }
}
