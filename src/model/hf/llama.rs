//! A llama-family Hugging Face checkpoint as a decoder's weights: `config.json` gives the
//! shape, `model.safetensors` (or the shards `model.safetensors.index.json` lists) the tensors,
//! each member reading only the rows and columns of its slices.
//!
//! Hugging Face's llama keeps each query and key head's rows in the order its RoPE rotates
//! (`rotate_half`: pairs `(i, i + d/2)`), which is crossgpu's: no permutation, unlike GGUF.
//! BF16 matrices whose member slices are whole groups of 8 columns stay BF16 on the devices
//! (read as stored by the BF16 kernel); F16 matrices are uploaded as stored; F32 ones (and BF16
//! slices off the 8-column grid) are converted to f16, saturating.

use std::collections::{BTreeSet, HashMap};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::config::HfConfig;
use super::file::{SafetensorsFile, StDtype, StTensor};
use crate::error::{Error, FormatError, Result};
use crate::group::Member;
use crate::model::halves::write_f16_rows;
use crate::model::tokenizer::Tokenizer;
use crate::ops::QuantFormat;
use crate::tensor::{DType, Tensor};
use crate::tp::{DecoderConfig, Matrix, Norm, Weight, WeightSource};

/// The single-file checkpoint's name.
const SINGLE: &str = "model.safetensors";
/// The shard index's name.
const INDEX: &str = "model.safetensors.index.json";

/// A llama-family Hugging Face checkpoint directory, opened and checked.
#[derive(Debug)]
pub struct LlamaSafetensors {
    dir: PathBuf,
    config: HfConfig,
    files: Vec<SafetensorsFile>,
    /// Each tensor's file (an index into `files`).
    location: HashMap<String, usize>,
    kv_heads: usize,
    head_dim: usize,
    /// The vocabulary projection: `lm_head.weight`, or the embedding table where tied.
    output: String,
    read: Arc<AtomicU64>,
}

impl LlamaSafetensors {
    /// Opens the checkpoint directory `path` (or the directory holding `path`, a file of it)
    /// and checks that every tensor the decoder needs is present, of the config's shape and of
    /// a type crossgpu reads; an error names the file and the key or tensor.
    pub fn open(path: &Path) -> Result<Self> {
        let dir = if path.is_dir() {
            path.to_path_buf()
        } else {
            path.parent().unwrap_or(Path::new(".")).to_path_buf()
        };
        let config_path = dir.join("config.json");
        let config_name = config_path.display().to_string();
        let json = std::fs::read(&config_path)
            .map_err(|e| Error::Model(FormatError::new(&config_name, format!("cannot read: {e}"))))?;
        let config = HfConfig::parse(&json, &config_name)?;
        let (files, location) = Self::open_shards(&dir)?;
        let q_heads = config.num_attention_heads;
        let kv_heads = config.num_key_value_heads.unwrap_or(q_heads);
        let bad = |what: String| Error::Model(FormatError::new(&config_name, what));
        if q_heads == 0 || kv_heads == 0 || q_heads % kv_heads != 0 {
            return Err(bad(format!(
                "num_attention_heads {q_heads} is not a positive multiple of num_key_value_heads {kv_heads}"
            )));
        }
        let head_dim = match config.head_dim {
            Some(d) => d,
            None if config.hidden_size % q_heads == 0 => config.hidden_size / q_heads,
            None => {
                return Err(bad(format!(
                    "hidden_size {} is not a multiple of num_attention_heads {q_heads} (and there is no head_dim)",
                    config.hidden_size
                )))
            }
        };
        let output = match (config.tie_word_embeddings, location.contains_key("lm_head.weight")) {
            (false, true) => "lm_head.weight",
            (true, _) => "model.embed_tokens.weight",
            (false, false) => return Err(Error::Model(FormatError::new(
                dir.display().to_string(),
                "no tensor lm_head.weight, and config.json does not tie the embeddings (tie_word_embeddings)",
            ))),
        }
        .to_string();
        let model = Self {
            dir,
            config,
            files,
            location,
            kv_heads,
            head_dim,
            output,
            read: Arc::new(AtomicU64::new(0)),
        };
        model.check_tensors()?;
        Ok(model)
    }

    /// The checkpoint's safetensors files, and each tensor's file: `model.safetensors`, or the
    /// shards the index maps tensors to (each tensor checked to be in the shard it names).
    fn open_shards(dir: &Path) -> Result<(Vec<SafetensorsFile>, HashMap<String, usize>)> {
        let index_path = dir.join(INDEX);
        if !index_path.exists() {
            let file = SafetensorsFile::open(&dir.join(SINGLE))?;
            let location = file.names().map(|n| (n.to_string(), 0)).collect();
            return Ok((vec![file], location));
        }
        let index_name = index_path.display().to_string();
        let bad = |what: String| Error::Model(FormatError::new(&index_name, what));
        let json = std::fs::read(&index_path).map_err(|e| bad(format!("cannot read: {e}")))?;
        let index: serde_json::Value =
            serde_json::from_slice(&json).map_err(|e| bad(format!("not JSON: {e}")))?;
        let map = index["weight_map"].as_object().ok_or_else(|| bad("no weight_map object".into()))?;
        let mut shard_names = BTreeSet::new();
        for (tensor, shard) in map {
            let shard =
                shard.as_str().ok_or_else(|| bad(format!("weight_map[{tensor:?}] is not a file name")))?;
            // A shard is a file beside the index, never a path elsewhere.
            if shard.contains('/') || shard.contains('\\') || shard == ".." {
                return Err(bad(format!(
                    "weight_map[{tensor:?}] names {shard:?}, not a file of the directory"
                )));
            }
            shard_names.insert(shard.to_string());
        }
        let shard_names: Vec<String> = shard_names.into_iter().collect();
        let files =
            shard_names.iter().map(|s| SafetensorsFile::open(&dir.join(s))).collect::<Result<Vec<_>, _>>()?;
        let mut location = HashMap::new();
        for (tensor, shard) in map {
            let i = shard_names.iter().position(|s| Some(s.as_str()) == shard.as_str()).unwrap_or(0);
            if files[i].get(tensor).is_none() {
                return Err(Error::Model(FormatError::new(
                    files[i].file_name(),
                    format!("no tensor named '{tensor}', which {INDEX} places here"),
                )));
            }
            location.insert(tensor.clone(), i);
        }
        Ok((files, location))
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The parsed `config.json`.
    pub fn hf_config(&self) -> &HfConfig {
        &self.config
    }

    /// The architecture (`model_type`).
    pub fn architecture(&self) -> &str {
        &self.config.model_type
    }

    /// Whether the vocabulary projection is the embedding table.
    pub fn tied_embeddings(&self) -> bool {
        self.output == "model.embed_tokens.weight"
    }

    /// The bytes of tensor data read so far (see [`crate::model::LlamaGguf::read_counter`]).
    pub fn read_counter(&self) -> Arc<AtomicU64> {
        self.read.clone()
    }

    /// The directory's tokenizer ([`Tokenizer::from_hf_dir`]), stopping also at the config's
    /// end-of-sequence ids.
    pub fn tokenizer(&self) -> Result<Tokenizer> {
        Tokenizer::from_hf_dir(&self.dir, &self.config.eos_ids())
    }

    /// The decoder's shape, with a KV cache of `max_seq` tokens (at most the model's context).
    pub fn config(&self, max_seq: usize) -> Result<DecoderConfig> {
        let c = &self.config;
        if max_seq == 0 || max_seq > c.max_position_embeddings {
            return Err(Error::InvalidArgument(format!(
                "a KV cache of {max_seq} tokens: {} holds 1 to {} (max_position_embeddings)",
                self.dir.display(),
                c.max_position_embeddings
            )));
        }
        if let Some(w) = c.window().filter(|&w| (max_seq as u64) > w) {
            return Err(Error::Unsupported(format!(
                "a KV cache of {max_seq} tokens: {} attends to a sliding window of {w} (sliding_window), which crossgpu does not compute; use at most {w} tokens",
                self.dir.display()
            )));
        }
        let cfg = DecoderConfig { max_seq, ..self.dims() };
        cfg.validate()?;
        Ok(cfg)
    }

    /// The model's shape from config.json (a KV cache of one token; unchecked).
    fn dims(&self) -> DecoderConfig {
        let c = &self.config;
        DecoderConfig {
            hidden: c.hidden_size,
            ffn: c.intermediate_size,
            layers: c.num_hidden_layers,
            q_heads: c.num_attention_heads,
            kv_heads: self.kv_heads,
            head_dim: self.head_dim,
            vocab: c.vocab_size,
            max_seq: 1,
            seed: 0,
            rope_base: c.rope_theta,
            eps: c.rms_norm_eps,
        }
    }

    fn matrix_name(&self, weight: Weight) -> String {
        let layer = |l: usize, n: &str| format!("model.layers.{l}.{n}.weight");
        match weight {
            Weight::Q(l) => layer(l, "self_attn.q_proj"),
            Weight::K(l) => layer(l, "self_attn.k_proj"),
            Weight::V(l) => layer(l, "self_attn.v_proj"),
            Weight::O(l) => layer(l, "self_attn.o_proj"),
            Weight::Gate(l) => layer(l, "mlp.gate_proj"),
            Weight::Up(l) => layer(l, "mlp.up_proj"),
            Weight::Down(l) => layer(l, "mlp.down_proj"),
            Weight::Output => self.output.clone(),
        }
    }

    fn norm_name(norm: Norm) -> String {
        match norm {
            Norm::Attention(l) => format!("model.layers.{l}.input_layernorm.weight"),
            Norm::Mlp(l) => format!("model.layers.{l}.post_attention_layernorm.weight"),
            Norm::Final => "model.norm.weight".into(),
        }
    }

    /// `[out, in]` of `weight` by the config.
    fn matrix_shape(&self, weight: Weight) -> (usize, usize) {
        weight.shape(&self.dims())
    }

    /// The tensor `name` and its file, checked to be `[rows, cols]` (a vector `[cols]` where
    /// `rows` is 1) and of a type crossgpu reads.
    fn checked(
        &self,
        name: &str,
        rows: usize,
        cols: usize,
    ) -> Result<(&SafetensorsFile, &StTensor, StDtype)> {
        let Some(&i) = self.location.get(name) else {
            return Err(Error::Model(FormatError::new(
                self.dir.display().to_string(),
                format!("no tensor named '{name}' in the checkpoint"),
            )));
        };
        let file = &self.files[i];
        let t = file
            .get(name)
            .ok_or_else(|| FormatError::new(file.file_name(), format!("no tensor named '{name}'")))?;
        let dtype = file.dtype(t)?;
        let ok = match t.shape.as_slice() {
            [c] => rows == 1 && *c == cols,
            [r, c] => (*r, *c) == (rows, cols),
            _ => false,
        };
        if !ok {
            return Err(Error::Model(FormatError::new(
                file.file_name(),
                format!("tensor {name} is {:?}, config.json says [{rows}, {cols}]", t.shape),
            )));
        }
        Ok((file, t, dtype))
    }

    fn check_tensors(&self) -> Result<()> {
        let (h, v) = (self.config.hidden_size, self.config.vocab_size);
        self.checked("model.embed_tokens.weight", v, h)?;
        for n in Norm::every(self.config.num_hidden_layers) {
            self.checked(&Self::norm_name(n), 1, h)?;
        }
        for w in Weight::every(self.config.num_hidden_layers) {
            let (rows, cols) = self.matrix_shape(w);
            self.checked(&self.matrix_name(w), rows, cols)?;
        }
        // The q/k/v biases of a model that has them; any other bias would be silently ignored.
        let mut names: Vec<&String> = self.location.keys().collect();
        names.sort();
        let computed = |n: &str| {
            self.config.qkv_bias()
                && ["q_proj.bias", "k_proj.bias", "v_proj.bias"].iter().any(|b| n.ends_with(b))
        };
        if let Some(b) = names.iter().find(|n| n.ends_with(".bias") && !computed(n)) {
            return Err(Error::Model(FormatError::new(
                self.dir.display().to_string(),
                format!("tensor {b}: only qwen2's q, k and v biases are supported"),
            )));
        }
        if self.config.qkv_bias() {
            for l in 0..self.config.num_hidden_layers {
                for w in [Weight::Q(l), Weight::K(l), Weight::V(l)] {
                    self.checked(&self.bias_name(w), 1, self.matrix_shape(w).0)?;
                }
            }
        }
        Ok(())
    }

    fn bias_name(&self, weight: Weight) -> String {
        self.matrix_name(weight).replace(".weight", ".bias")
    }

    /// `weight`'s bias, rows `rows`, where the model has one (qwen2's q, k and v).
    pub fn bias_values(&self, weight: Weight, rows: Range<usize>) -> Result<Option<Vec<f32>>> {
        if !self.config.qkv_bias() || !matches!(weight, Weight::Q(_) | Weight::K(_) | Weight::V(_)) {
            return Ok(None);
        }
        let out = self.matrix_shape(weight).0;
        if rows.start > rows.end || rows.end > out {
            return Err(Error::InvalidArgument(format!("{weight:?}'s bias: rows {rows:?} of {out}")));
        }
        let all = self.vector(&self.bias_name(weight), 1, out)?;
        Ok(Some(all[rows].to_vec()))
    }

    fn count(&self, bytes: u64) {
        self.read.fetch_add(bytes, Ordering::Relaxed);
    }

    fn check_range(
        &self,
        weight: Weight,
        rows: &Range<usize>,
        cols: &Range<usize>,
    ) -> Result<(usize, usize)> {
        let (out, inp) = self.matrix_shape(weight);
        if rows.end > out || cols.end > inp || rows.start > rows.end || cols.start > cols.end {
            return Err(Error::InvalidArgument(format!(
                "{weight:?}: rows {rows:?} and columns {cols:?} of a {out} × {inp} matrix"
            )));
        }
        Ok((out, inp))
    }

    /// The type `weight` is stored in.
    pub fn weight_type(&self, weight: Weight) -> Result<StDtype> {
        let (out, inp) = self.matrix_shape(weight);
        Ok(self.checked(&self.matrix_name(weight), out, inp)?.2)
    }

    /// Whether a member's slice with columns `cols` of `weight` stays BF16 on the device (a BF16
    /// matrix cut at a multiple of 8 columns); else it is f16 there.
    pub fn keeps_blocks(&self, weight: Weight, cols: Range<usize>) -> Result<bool> {
        let be = QuantFormat::BF16.block_elems();
        Ok(self.weight_type(weight)? == StDtype::BF16
            && cols.start.is_multiple_of(be)
            && cols.end.is_multiple_of(be))
    }

    /// Rows `rows` and columns `cols` of `weight` (`[out, in]`), as the file stores them, in f32
    /// (exact: a reference computes with them).
    pub fn values(&self, weight: Weight, rows: Range<usize>, cols: Range<usize>) -> Result<Vec<f32>> {
        let (bytes, dtype) = self.stored(weight, rows, cols)?;
        Ok(dtype.to_f32(&bytes))
    }

    /// Rows `rows` and columns `cols` of `weight` in the file's type, rows back to back.
    fn stored(&self, weight: Weight, rows: Range<usize>, cols: Range<usize>) -> Result<(Vec<u8>, StDtype)> {
        let (out, inp) = self.check_range(weight, &rows, &cols)?;
        let name = self.matrix_name(weight);
        let (file, _, dtype) = self.checked(&name, out, inp)?;
        let mut bytes = vec![0u8; rows.len() * cols.len() * dtype.bytes() as usize];
        file.read_rows(
            &name,
            rows.start as u64..rows.end as u64,
            cols.start as u64..cols.end as u64,
            &mut bytes,
        )?;
        self.count(bytes.len() as u64);
        Ok((bytes, dtype))
    }

    fn vector(&self, name: &str, rows: usize, cols: usize) -> Result<Vec<f32>> {
        let (file, _, dtype) = self.checked(name, rows, cols)?;
        self.count(rows as u64 * cols as u64 * dtype.bytes());
        Ok(file.values(name, 0..rows as u64)?)
    }

    /// The token embedding table, `[vocab, hidden]`, in f32.
    pub fn embedding_values(&self) -> Result<Vec<f32>> {
        self.vector("model.embed_tokens.weight", self.config.vocab_size, self.config.hidden_size)
    }

    /// `norm`'s weight, `[hidden]`.
    pub fn norm_values(&self, norm: Norm) -> Result<Vec<f32>> {
        self.vector(&Self::norm_name(norm), 1, self.config.hidden_size)
    }
}

impl WeightSource for LlamaSafetensors {
    fn matrix(
        &mut self,
        member: &Member,
        weight: Weight,
        rows: Range<usize>,
        cols: Range<usize>,
    ) -> Result<Matrix> {
        let (out, inp) = self.check_range(weight, &rows, &cols)?;
        let shape = [rows.len(), cols.len()];
        let keep = self.keeps_blocks(weight, cols.clone())?;
        let name = self.matrix_name(weight);
        let (file, _, dtype) = self.checked(&name, out, inp)?;
        // BF16 and F16 as stored, read from the file straight into staging memory.
        let mut fill = |r: Range<usize>, dst: &mut [u8]| -> Result<()> {
            let abs = (rows.start + r.start) as u64..(rows.start + r.end) as u64;
            file.read_rows(&name, abs, cols.start as u64..cols.end as u64, dst)?;
            self.count(dst.len() as u64);
            Ok(())
        };
        match dtype {
            StDtype::BF16 if keep => Ok(Matrix::Quant(member.upload_quant_with(
                QuantFormat::BF16,
                rows.len(),
                cols.len(),
                &mut fill,
            )?)),
            StDtype::F16 => Ok(Matrix::F16(member.upload_f16_with(rows.len(), cols.len(), &mut fill)?)),
            _ => {
                let (bytes, dtype) = self.stored(weight, rows, cols)?;
                Ok(Matrix::F16(member.upload(&dtype.to_f32(&bytes), &shape, DType::F16)?))
            }
        }
    }

    fn embedding(&mut self, member: &Member) -> Result<Tensor> {
        let (vocab, hidden) = (self.config.vocab_size, self.config.hidden_size);
        let name = "model.embed_tokens.weight";
        let (file, _, dtype) = self.checked(name, vocab, hidden)?;
        // F16 as stored; BF16 and F32 converted on the host's cores, into staging memory.
        let mut fill = |r: Range<usize>, dst: &mut [u8]| -> Result<()> {
            let rows = r.start as u64..r.end as u64;
            if dtype == StDtype::F16 {
                file.read_rows(name, rows, 0..hidden as u64, dst)?;
            } else {
                let values = |sub: Range<usize>| -> Result<Vec<f32>> {
                    let mut raw = vec![0u8; sub.len() * hidden * dtype.bytes() as usize];
                    file.read_rows(name, sub.start as u64..sub.end as u64, 0..hidden as u64, &mut raw)?;
                    Ok(dtype.to_f32(&raw))
                };
                write_f16_rows(r.clone(), hidden, dst, &values)?;
            }
            self.count(r.len() as u64 * hidden as u64 * dtype.bytes());
            Ok(())
        };
        member.upload_f16_with(vocab, hidden, &mut fill)
    }

    fn norm(&mut self, member: &Member, norm: Norm) -> Result<Tensor> {
        member.upload(&self.norm_values(norm)?, &[self.config.hidden_size], DType::F32)
    }

    fn bias(&mut self, member: &Member, weight: Weight, rows: Range<usize>) -> Result<Option<Tensor>> {
        let n = rows.len();
        self.bias_values(weight, rows)?.map(|b| member.upload(&b, &[n], DType::F32)).transpose()
    }
}
