//! A llama-architecture GGUF checkpoint as a decoder's weights: its shape from the metadata
//! ([`LlamaGguf::config`]) and its tensors as a [`WeightSource`], each member reading only
//! the rows of its slices from the file.
//!
//! Weights are dequantized on the host and uploaded as f16 for now (the decoder's products read
//! f16); reading the quantized blocks as stored on the device is the next step. Q4_1, Q8_0 and
//! the other ggml types dequantize to values f16 holds to within its rounding (2^-11 relative).
//!
//! llama.cpp's converter permutes the rows of each query and key head of llama and mistral so
//! that ggml's RoPE rotates adjacent pairs; crossgpu's RoPE rotates the pairs `(i, i + d/2)` of
//! each head (as Hugging Face's llama does), so the rows are put back in that order here. qwen2
//! files are not permuted (ggml rotates them the NeoX way, which is crossgpu's), and carry
//! biases for q, k and v, which the decoder adds after those products.

use std::ops::Range;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::gguf::{GgufFile, TensorInfo};
use super::halves::write_f16_rows;
use super::quant::GgmlType;
use crate::error::FormatError;
use crate::error::{Error, Result};
use crate::group::Member;
use crate::tensor::{DType, Tensor};
use crate::tp::{DecoderConfig, Matrix, Norm, Weight, WeightSource};

/// The architectures read here: llama and its family with the same tensors (qwen2: with q, k
/// and v biases).
pub const ARCHITECTURES: &[&str] = &["llama", "mistral", "qwen2"];

/// The architectures whose query and key rows llama.cpp's converter permuted (ggml's "normal"
/// RoPE); the others are stored in Hugging Face's order (NeoX RoPE).
const PERMUTED_QK: &[&str] = &["llama", "mistral"];

/// A llama-family GGUF file, opened and checked.
#[derive(Debug)]
pub struct LlamaGguf {
    file: GgufFile,
    arch: String,
    hidden: usize,
    ffn: usize,
    layers: usize,
    q_heads: usize,
    kv_heads: usize,
    head_dim: usize,
    vocab: usize,
    context: usize,
    rope_base: f32,
    eps: f32,
    /// The vocabulary projection's tensor: `output.weight`, or the embedding table where the
    /// model ties them.
    output: String,
    /// Bytes of tensor data read so far ([`LlamaGguf::read_counter`]).
    read: Arc<AtomicU64>,
}

impl LlamaGguf {
    /// Opens `path` and checks that it is a llama-family model whose every tensor the decoder
    /// needs is present, of the shape the metadata says and of a type crossgpu reads; an
    /// error names the file and the key or tensor.
    pub fn open(path: &Path) -> Result<Self> {
        let file = GgufFile::open(path)?;
        let arch = file.architecture_in(ARCHITECTURES)?.to_string();
        let key = |k: &str| format!("{arch}.{k}");
        let int = |k: &str| -> Result<usize> { Ok(file.u64(&key(k))? as usize) };
        let (hidden, ffn, layers) =
            (int("embedding_length")?, int("feed_forward_length")?, int("block_count")?);
        let q_heads = int("attention.head_count")?;
        let kv_heads = file.optional_u64(&key("attention.head_count_kv"))?.map_or(q_heads, |v| v as usize);
        let bad = |what: String| Error::Model(FormatError::new(file.file_name(), what));
        if q_heads == 0 || kv_heads == 0 || hidden % q_heads != 0 || q_heads % kv_heads != 0 {
            return Err(bad(format!(
                "{hidden} features in {q_heads} query heads and {kv_heads} key/value heads do not divide evenly"
            )));
        }
        let head_dim =
            file.optional_u64(&key("attention.key_length"))?.map_or(hidden / q_heads, |v| v as usize);
        let vocab = file.str_array("tokenizer.ggml.tokens")?.len();
        let context = file.optional_u64(&key("context_length"))?.map_or(2048, |v| v as usize);
        let rope_base = file.optional_f32(&key("rope.freq_base"))?.unwrap_or(10000.0);
        let eps = file.f32(&key("attention.layer_norm_rms_epsilon"))?;
        let output = match file.tensor("output.weight") {
            Ok(_) => "output.weight",
            Err(_) => "token_embd.weight",
        }
        .to_string();
        let model = Self {
            file,
            arch,
            hidden,
            ffn,
            layers,
            q_heads,
            kv_heads,
            head_dim,
            vocab,
            context,
            rope_base,
            eps,
            output,
            read: Arc::new(AtomicU64::new(0)),
        };
        model.check_tensors()?;
        Ok(model)
    }

    /// The bytes of tensor data read so far, for a progress display while a decoder loads
    /// (the counter is shared: read it from another thread or a progress callback).
    pub fn read_counter(&self) -> Arc<AtomicU64> {
        self.read.clone()
    }

    fn count(&self, bytes: u64) {
        self.read.fetch_add(bytes, Ordering::Relaxed);
    }

    /// The file as read.
    pub fn file(&self) -> &GgufFile {
        &self.file
    }

    /// The architecture named in the file.
    pub fn architecture(&self) -> &str {
        &self.arch
    }

    /// Whether the vocabulary projection is the embedding table (tied embeddings).
    pub fn tied_embeddings(&self) -> bool {
        self.output == "token_embd.weight"
    }

    /// The decoder's shape, with a KV cache of `max_seq` tokens (at most the model's context).
    pub fn config(&self, max_seq: usize) -> Result<DecoderConfig> {
        if max_seq == 0 || max_seq > self.context {
            return Err(Error::InvalidArgument(format!(
                "a KV cache of {max_seq} tokens: {} holds 1 to {} (its context length)",
                self.file.file_name(),
                self.context
            )));
        }
        let cfg = DecoderConfig { max_seq, ..self.dims() };
        cfg.validate()?;
        Ok(cfg)
    }

    /// The model's shape from the metadata (a KV cache of one token; unchecked).
    fn dims(&self) -> DecoderConfig {
        DecoderConfig {
            hidden: self.hidden,
            ffn: self.ffn,
            layers: self.layers,
            q_heads: self.q_heads,
            kv_heads: self.kv_heads,
            head_dim: self.head_dim,
            vocab: self.vocab,
            max_seq: 1,
            seed: 0,
            rope_base: self.rope_base,
            eps: self.eps,
        }
    }

    /// The tensor behind `weight`, and its `[out, in]` shape.
    fn matrix_name(&self, weight: Weight) -> String {
        let blk = |l: usize, n: &str| format!("blk.{l}.{n}.weight");
        match weight {
            Weight::Q(l) => blk(l, "attn_q"),
            Weight::K(l) => blk(l, "attn_k"),
            Weight::V(l) => blk(l, "attn_v"),
            Weight::O(l) => blk(l, "attn_output"),
            Weight::Gate(l) => blk(l, "ffn_gate"),
            Weight::Up(l) => blk(l, "ffn_up"),
            Weight::Down(l) => blk(l, "ffn_down"),
            Weight::Output => self.output.clone(),
        }
    }

    fn norm_name(norm: Norm) -> String {
        match norm {
            Norm::Attention(l) => format!("blk.{l}.attn_norm.weight"),
            Norm::Mlp(l) => format!("blk.{l}.ffn_norm.weight"),
            Norm::Final => "output_norm.weight".into(),
        }
    }

    /// `[out, in]` of `weight` by the metadata.
    fn matrix_shape(&self, weight: Weight) -> (usize, usize) {
        weight.shape(&self.dims())
    }

    /// The tensor `name`, checked to be of a supported type and `[rows, cols]` (GGUF order:
    /// `dims == [cols, rows]`).
    fn checked(&self, name: &str, rows: usize, cols: usize) -> Result<&TensorInfo> {
        let t = self.file.tensor(name)?;
        self.file.check_supported(t)?;
        let want = [cols as u64, rows as u64];
        let ok = match t.dims.as_slice() {
            [c] => rows == 1 && *c == want[0],
            [c, r] => [*c, *r] == want,
            _ => false,
        };
        if !ok {
            return Err(Error::Model(FormatError::new(
                self.file.file_name(),
                format!("tensor {name} is {}, the metadata says [{cols}, {rows}]", t.shape()),
            )));
        }
        Ok(t)
    }

    fn check_tensors(&self) -> Result<()> {
        self.checked("token_embd.weight", self.vocab, self.hidden)?;
        for n in Norm::every(self.layers) {
            self.checked(&Self::norm_name(n), 1, self.hidden)?;
        }
        for w in Weight::every(self.layers) {
            let (rows, cols) = self.matrix_shape(w);
            self.checked(&self.matrix_name(w), rows, cols)?;
        }
        // The q/k/v biases are computed; any other bias would be silently ignored: refuse it.
        let biases = (0..self.layers)
            .flat_map(|l| [Weight::Q(l), Weight::K(l), Weight::V(l)].map(|w| self.bias_name(w)));
        let computed: std::collections::HashSet<String> = biases.collect();
        if let Some(t) =
            self.file.tensors().iter().find(|t| t.name.ends_with(".bias") && !computed.contains(&t.name))
        {
            return Err(Error::Model(FormatError::new(
                self.file.file_name(),
                format!("tensor {}: only q, k and v biases are supported", t.name),
            )));
        }
        for l in 0..self.layers {
            for w in [Weight::Q(l), Weight::K(l), Weight::V(l)] {
                if self.file.tensor(&self.bias_name(w)).is_ok() {
                    self.checked(&self.bias_name(w), 1, self.matrix_shape(w).0)?;
                }
            }
        }
        Ok(())
    }

    /// The tensor of `weight`'s bias (present or not).
    fn bias_name(&self, weight: Weight) -> String {
        self.matrix_name(weight).replace(".weight", ".bias")
    }

    /// `weight`'s bias, rows `rows` (query and key rows in crossgpu's order), where the file has
    /// one (qwen2's q, k and v).
    pub fn bias_values(&self, weight: Weight, rows: Range<usize>) -> Result<Option<Vec<f32>>> {
        let name = self.bias_name(weight);
        if self.file.tensor(&name).is_err() {
            return Ok(None);
        }
        let out = self.matrix_shape(weight).0;
        if rows.start > rows.end || rows.end > out {
            return Err(Error::InvalidArgument(format!("{weight:?}'s bias: rows {rows:?} of {out}")));
        }
        let t = self.checked(&name, 1, out)?;
        self.count(t.row_bytes());
        let all = self.file.dequantize_rows(t, 0..1)?;
        Ok(Some(rows.map(|r| all[self.file_row(weight, r)]).collect()))
    }

    /// The file's row of a query or key head's row `row` in crossgpu's order: within a head
    /// of `d` rows, crossgpu's row `half · d/2 + j` is the file's row `2j + half`.
    fn file_row(&self, weight: Weight, row: usize) -> usize {
        match weight {
            Weight::Q(_) | Weight::K(_) if PERMUTED_QK.contains(&self.arch.as_str()) => {
                let d = self.head_dim;
                let (head, i) = (row / d, row % d);
                head * d + 2 * (i % (d / 2)) + i / (d / 2)
            }
            _ => row,
        }
    }
}

impl LlamaGguf {
    /// Rows `rows` and columns `cols` of `weight` (`[out, in]`, query and key rows in
    /// crossgpu's order), dequantized: the values a member's slice holds before its f16
    /// upload (a reference computes with them).
    pub fn values(&self, weight: Weight, rows: Range<usize>, cols: Range<usize>) -> Result<Vec<f32>> {
        let (out, inp) = self.matrix_shape(weight);
        if rows.end > out || cols.end > inp || rows.start > rows.end || cols.start > cols.end {
            return Err(Error::InvalidArgument(format!(
                "{weight:?}: rows {rows:?} and columns {cols:?} of a {out} × {inp} matrix"
            )));
        }
        let t = self.checked(&self.matrix_name(weight), out, inp)?;
        // The file rows that hold these rows (a permutation within whole heads for q and k).
        let mapped: Vec<usize> = rows.clone().map(|r| self.file_row(weight, r)).collect();
        let (lo, hi) = match (mapped.iter().min(), mapped.iter().max()) {
            (Some(&lo), Some(&hi)) => (lo, hi + 1),
            _ => (0, 0),
        };
        let read = self.file.dequantize_rows(t, lo as u64..hi as u64)?;
        self.count((hi - lo) as u64 * t.row_bytes());
        let mut slice = Vec::with_capacity(rows.len() * cols.len());
        for r in mapped {
            let at = (r - lo) * inp;
            slice.extend_from_slice(&read[at + cols.start..at + cols.end]);
        }
        Ok(slice)
    }

    /// The type `weight` is stored in.
    pub fn weight_type(&self, weight: Weight) -> Result<GgmlType> {
        let (out, inp) = self.matrix_shape(weight);
        Ok(self.checked(&self.matrix_name(weight), out, inp)?.ty)
    }

    /// Whether a member's slice of rows `rows` and columns `cols` of `weight` keeps the file's
    /// blocks on the device ([`Matrix::Quant`], dequantized by the product's kernel): where the
    /// type has a kernel (`GgmlType::quant_format`: the quantized types and BF16) and the columns
    /// are whole blocks (BF16: a multiple of 8). Other slices (F32; a K-quant cut off its
    /// 256-element blocks) are dequantized and uploaded as f16; F16 is uploaded as stored.
    pub fn keeps_blocks(&self, weight: Weight, cols: Range<usize>) -> Result<bool> {
        let Some(format) = self.weight_type(weight)?.quant_format() else { return Ok(false) };
        let be = format.block_elems();
        Ok(cols.start.is_multiple_of(be) && cols.end.is_multiple_of(be))
    }

    /// Rows `rows` (query and key rows in crossgpu's order) and columns `cols` of `weight`
    /// (`t`, its tensor), read as stored into `dst`: whole blocks of its type, rows back to
    /// back (`dst` exactly that long).
    fn read_stored(
        &self,
        weight: Weight,
        t: &TensorInfo,
        rows: Range<usize>,
        cols: Range<usize>,
        dst: &mut [u8],
    ) -> Result<()> {
        let row_bytes = Self::stored_row_bytes(weight, t, &cols)?;
        if dst.len() != rows.len() * row_bytes {
            return Err(Error::LengthMismatch {
                what: format!("{weight:?}: the bytes of rows {rows:?}"),
                expected: rows.len() * row_bytes,
                got: dst.len(),
            });
        }
        let file_cols = cols.start as u64..cols.end as u64;
        // Runs of consecutive file rows in one read each (llama's q and k rows come two file
        // rows apart within a head: see `file_row`).
        let mut k = 0;
        while k < rows.len() {
            let first = self.file_row(weight, rows.start + k);
            let mut n = 1;
            while k + n < rows.len() && self.file_row(weight, rows.start + k + n) == first + n {
                n += 1;
            }
            let part = &mut dst[k * row_bytes..(k + n) * row_bytes];
            self.file.read_rows(t, first as u64..(first + n) as u64, file_cols.clone(), part)?;
            self.count(part.len() as u64);
            k += n;
        }
        Ok(())
    }

    /// Bytes of one row's columns `cols` of `t` as stored: an error unless they are whole blocks.
    fn stored_row_bytes(weight: Weight, t: &TensorInfo, cols: &Range<usize>) -> Result<usize> {
        let (be, bb) = (t.ty.block_elems() as usize, t.ty.block_bytes() as usize);
        let row_bytes = (cols.len() / be)
            .checked_mul(bb)
            .filter(|_| cols.start.is_multiple_of(be) && cols.end.is_multiple_of(be));
        row_bytes.ok_or_else(|| {
            Error::InvalidArgument(format!("{weight:?}: columns {cols:?} are not whole {} blocks", t.ty))
        })
    }

    /// The token embedding table, `[vocab, hidden]`, dequantized.
    pub fn embedding_values(&self) -> Result<Vec<f32>> {
        let t = self.checked("token_embd.weight", self.vocab, self.hidden)?;
        self.count(self.vocab as u64 * t.row_bytes());
        Ok(self.file.dequantize_rows(t, 0..self.vocab as u64)?)
    }

    /// `norm`'s weight, `[hidden]`.
    pub fn norm_values(&self, norm: Norm) -> Result<Vec<f32>> {
        let t = self.checked(&Self::norm_name(norm), 1, self.hidden)?;
        self.count(t.row_bytes());
        Ok(self.file.dequantize_rows(t, 0..1)?)
    }
}

impl WeightSource for LlamaGguf {
    fn matrix(
        &mut self,
        member: &Member,
        weight: Weight,
        rows: Range<usize>,
        cols: Range<usize>,
    ) -> Result<Matrix> {
        let (out, inp) = self.matrix_shape(weight);
        if rows.end > out || cols.end > inp || rows.start > rows.end || cols.start > cols.end {
            return Err(Error::InvalidArgument(format!(
                "{weight:?}: rows {rows:?} and columns {cols:?} of a {out} × {inp} matrix"
            )));
        }
        let t = self.checked(&self.matrix_name(weight), out, inp)?;
        let shape = [rows.len(), cols.len()];
        // Blocks (or halves) as stored, read from the file straight into staging memory.
        let mut fill = |r: Range<usize>, dst: &mut [u8]| {
            let abs = rows.start + r.start..rows.start + r.end;
            self.read_stored(weight, t, abs, cols.clone(), dst)
        };
        if self.keeps_blocks(weight, cols.clone())? {
            // Dequantized by the product's kernel.
            let format = t.ty.quant_format().expect("keeps_blocks checked it");
            Ok(Matrix::Quant(member.upload_quant_with(format, rows.len(), cols.len(), &mut fill)?))
        } else if t.ty == GgmlType::F16 {
            Ok(Matrix::F16(member.upload_f16_with(rows.len(), cols.len(), &mut fill)?))
        } else {
            Ok(Matrix::F16(member.upload(&self.values(weight, rows, cols)?, &shape, DType::F16)?))
        }
    }

    fn slice_bytes(&self, weight: Weight, rows: Range<usize>, cols: Range<usize>) -> u64 {
        let f16 = DType::F16.storage_bytes(rows.len().saturating_mul(cols.len()));
        if !self.keeps_blocks(weight, cols.clone()).unwrap_or(false) {
            return f16;
        }
        let row_bytes = self
            .weight_type(weight)
            .ok()
            .and_then(|t| t.quant_format())
            .and_then(|f| f.row_bytes(cols.len()));
        row_bytes.map_or(f16, |b| (rows.len() as u64).saturating_mul(b as u64))
    }

    fn embedding(&mut self, member: &Member) -> Result<Tensor> {
        let t = self.checked("token_embd.weight", self.vocab, self.hidden)?;
        // F16 as stored; other types dequantized on the host's cores, into staging memory.
        let (file, hidden) = (&self.file, self.hidden);
        let mut fill = |r: Range<usize>, dst: &mut [u8]| -> Result<()> {
            if t.ty == GgmlType::F16 {
                file.read_rows(t, r.start as u64..r.end as u64, 0..hidden as u64, dst)?;
            } else {
                let values =
                    |sub: Range<usize>| Ok(file.dequantize_rows(t, sub.start as u64..sub.end as u64)?);
                write_f16_rows(r.clone(), hidden, dst, &values)?;
            }
            self.count(r.len() as u64 * t.row_bytes());
            Ok(())
        };
        member.upload_f16_with(self.vocab, self.hidden, &mut fill)
    }

    fn norm(&mut self, member: &Member, norm: Norm) -> Result<Tensor> {
        member.upload(&self.norm_values(norm)?, &[self.hidden], DType::F32)
    }

    fn bias(&mut self, member: &Member, weight: Weight, rows: Range<usize>) -> Result<Option<Tensor>> {
        let n = rows.len();
        self.bias_values(weight, rows)?.map(|b| member.upload(&b, &[n], DType::F32)).transpose()
    }
}
