//! [`Checkpoint`]: a model file or directory of either format crossgpu reads, opened by its
//! path, with its tokenizer: what `crossgpu generate` and `decode --model` load.

use std::ops::Range;
use std::path::Path;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use super::hf::LlamaSafetensors;
use super::llama::LlamaGguf;
use super::tokenizer::Tokenizer;
use crate::error::Result;
use crate::group::Member;
use crate::tensor::Tensor;
use crate::tp::{DecoderConfig, Matrix, Norm, Weight, WeightSource};

/// A llama-family checkpoint: a GGUF file or a Hugging Face safetensors directory.
#[derive(Debug)]
pub enum Checkpoint {
    /// A GGUF file.
    Gguf(LlamaGguf),
    /// A Hugging Face directory (`config.json`, safetensors, `tokenizer.json`).
    Safetensors(LlamaSafetensors),
}

impl Checkpoint {
    /// Opens `path`: a directory (or a `.safetensors`/`.json` file in one) as a Hugging Face
    /// checkpoint, anything else as a GGUF file.
    pub fn open(path: &Path) -> Result<Self> {
        let hf_file = matches!(path.extension().and_then(|e| e.to_str()), Some("safetensors" | "json"));
        if path.is_dir() || hf_file {
            Ok(Checkpoint::Safetensors(LlamaSafetensors::open(path)?))
        } else {
            Ok(Checkpoint::Gguf(LlamaGguf::open(path)?))
        }
    }

    /// The format, for messages: `GGUF` or `safetensors`.
    pub fn format(&self) -> &'static str {
        match self {
            Checkpoint::Gguf(_) => "GGUF",
            Checkpoint::Safetensors(_) => "safetensors",
        }
    }

    /// The architecture the checkpoint names (`llama`, `mistral`, `qwen2`).
    pub fn architecture(&self) -> &str {
        match self {
            Checkpoint::Gguf(m) => m.architecture(),
            Checkpoint::Safetensors(m) => m.architecture(),
        }
    }

    /// The model's tokenizer and chat template.
    pub fn tokenizer(&self) -> Result<Tokenizer> {
        match self {
            Checkpoint::Gguf(m) => Tokenizer::from_gguf(m.file()),
            Checkpoint::Safetensors(m) => m.tokenizer(),
        }
    }

    /// The decoder's shape with a KV cache of `max_seq` tokens.
    pub fn config(&self, max_seq: usize) -> Result<DecoderConfig> {
        match self {
            Checkpoint::Gguf(m) => m.config(max_seq),
            Checkpoint::Safetensors(m) => m.config(max_seq),
        }
    }

    /// Whether the output projection is the embedding table.
    pub fn tied_embeddings(&self) -> bool {
        match self {
            Checkpoint::Gguf(m) => m.tied_embeddings(),
            Checkpoint::Safetensors(m) => m.tied_embeddings(),
        }
    }

    /// Bytes of tensor data read so far (shared counter, for a progress display).
    pub fn read_counter(&self) -> Arc<AtomicU64> {
        match self {
            Checkpoint::Gguf(m) => m.read_counter(),
            Checkpoint::Safetensors(m) => m.read_counter(),
        }
    }

    /// Rows `rows` and columns `cols` of `weight` as the checkpoint stores them, in f32
    /// (quantized blocks dequantized; query and key rows in crossgpu's RoPE order).
    pub fn values(&self, weight: Weight, rows: Range<usize>, cols: Range<usize>) -> Result<Vec<f32>> {
        match self {
            Checkpoint::Gguf(m) => m.values(weight, rows, cols),
            Checkpoint::Safetensors(m) => m.values(weight, rows, cols),
        }
    }

    /// Whether a member's slice of columns `cols` of `weight` keeps the stored form on the
    /// device (quantized blocks or BF16); else the member holds it as f16.
    pub fn keeps_blocks(&self, weight: Weight, cols: Range<usize>) -> Result<bool> {
        match self {
            Checkpoint::Gguf(m) => m.keeps_blocks(weight, cols),
            Checkpoint::Safetensors(m) => m.keeps_blocks(weight, cols),
        }
    }

    /// The token embedding table, `[vocab, hidden]`, in f32.
    pub fn embedding_values(&self) -> Result<Vec<f32>> {
        match self {
            Checkpoint::Gguf(m) => m.embedding_values(),
            Checkpoint::Safetensors(m) => m.embedding_values(),
        }
    }

    /// `weight`'s bias, rows `rows`, where the model has one (qwen2's q, k and v).
    pub fn bias_values(&self, weight: Weight, rows: Range<usize>) -> Result<Option<Vec<f32>>> {
        match self {
            Checkpoint::Gguf(m) => m.bias_values(weight, rows),
            Checkpoint::Safetensors(m) => m.bias_values(weight, rows),
        }
    }

    /// `norm`'s weight, `[hidden]`.
    pub fn norm_values(&self, norm: Norm) -> Result<Vec<f32>> {
        match self {
            Checkpoint::Gguf(m) => m.norm_values(norm),
            Checkpoint::Safetensors(m) => m.norm_values(norm),
        }
    }

    fn source(&mut self) -> &mut dyn WeightSource {
        match self {
            Checkpoint::Gguf(m) => m,
            Checkpoint::Safetensors(m) => m,
        }
    }

    fn source_ref(&self) -> &dyn WeightSource {
        match self {
            Checkpoint::Gguf(m) => m,
            Checkpoint::Safetensors(m) => m,
        }
    }
}

impl WeightSource for Checkpoint {
    fn matrix(
        &mut self,
        member: &Member,
        weight: Weight,
        rows: Range<usize>,
        cols: Range<usize>,
    ) -> Result<Matrix> {
        self.source().matrix(member, weight, rows, cols)
    }

    fn embedding(&mut self, member: &Member) -> Result<Tensor> {
        self.source().embedding(member)
    }

    fn slice_bytes(&self, weight: Weight, rows: Range<usize>, cols: Range<usize>) -> u64 {
        self.source_ref().slice_bytes(weight, rows, cols)
    }

    fn norm(&mut self, member: &Member, norm: Norm) -> Result<Tensor> {
        self.source().norm(member, norm)
    }

    fn bias(&mut self, member: &Member, weight: Weight, rows: Range<usize>) -> Result<Option<Tensor>> {
        self.source().bias(member, weight, rows)
    }
}
