//! A prompt through a [`Decoder`] as a batch: every layer runs over a chunk of the prompt's
//! positions at once — tiled products that read each weight once per chunk
//! ([`crate::tp::Matrix::matmul`]), causal attention, one all-reduce of the whole chunk per
//! half-layer — instead of one decode step per token. Over f16 weights, a member whose device
//! has matrix units (cooperative matrices) runs the products' whole tiles on them, with the
//! inputs rounded to f16 (`CROSSGPU_MATRIX_UNITS=0`: the tiled kernels everywhere). It fills the KV caches; the prompt's
//! last token then goes through an ordinary step, whose logits choose the first new token.

use super::state::{reducer, Decoder};
use crate::comm::{AllReduceOptions, Precision};
use crate::error::{Error, Result};
use crate::group::Member;
use crate::tensor::DType;
use crate::tp::ops::{PromptShape, PROMPT_MAX_HEAD_DIM};
use crate::tp::sharded::Sharded;

/// Prompt positions one pass through the layers takes on the tiled kernels: the weights are
/// read once per chunk (from memory; the products' workgroups each take 32 positions of it);
/// the activations of a chunk are `128 × (hidden, q/k/v, MLP features)` f32 per member.
pub const PROMPT_CHUNK: usize = 128;
/// Prompt positions one pass takes where every member runs the products on matrix units: they
/// need the longer chunk to fill the GPU (a subgroup takes 32 positions × 32 rows) and read the
/// weights a quarter as often. `CROSSGPU_PROMPT_CHUNK` overrides either.
pub const PROMPT_CHUNK_ON_UNITS: usize = 512;

/// The activations of a chunk of `positions` prompt rows, each across the members.
struct Rows {
    positions: usize,
    /// Token ids (u32).
    ids: Sharded,
    /// The residual stream and the normed input of the next half (replicated), and the
    /// row-parallel products' partials, all-reduced in place.
    x: Sharded,
    h: Sharded,
    partial: Sharded,
    q: Sharded,
    k: Sharded,
    v: Sharded,
    attn: Sharded,
    g: Sharded,
    u: Sharded,
    a: Sharded,
    /// The products' inputs rounded to f16 (h, attn, a), on the members whose products run on
    /// their matrix units ([`Rows::half`]); others hold empty tensors.
    half: Option<[Sharded; 3]>,
    on_units: Vec<bool>,
}

/// Which of a chunk's product inputs (`Rows::half`).
#[derive(Clone, Copy)]
enum Input {
    H = 0,
    Attn = 1,
    A = 2,
}

impl Rows {
    /// `on_units[i]`: member i runs the products on its matrix units.
    fn new(d: &Decoder, positions: usize, on_units: &[bool]) -> Result<Self> {
        let members = &d.members;
        let first = &d.layers[0];
        let (att, mlp) = (&first.attention, &first.mlp);
        let rows = |len: &dyn Fn(usize) -> usize| Sharded::full(members, |i| positions * len(i), 0.0);
        let hidden = d.cfg.hidden;
        let ids = members.iter().map(|m| m.empty(&[positions], DType::U32)).collect::<Result<Vec<_>>>()?;
        let half = if on_units.contains(&true) {
            let halves = |len: &dyn Fn(usize) -> usize| -> Result<Sharded> {
                let parts = members
                    .iter()
                    .enumerate()
                    .map(|(i, m)| m.empty(&[if on_units[i] { positions * len(i) } else { 0 }], DType::F16));
                Ok(Sharded::new(parts.collect::<Result<Vec<_>>>()?))
            };
            Some([
                halves(&|_| hidden)?,
                halves(&|i| att.q.ranges[i].len())?,
                halves(&|i| mlp.gate.ranges[i].len())?,
            ])
        } else {
            None
        };
        Ok(Self {
            positions,
            ids: Sharded::new(ids),
            x: rows(&|_| hidden)?,
            h: rows(&|_| hidden)?,
            partial: rows(&|_| hidden)?,
            q: rows(&|i| att.q.ranges[i].len())?,
            k: rows(&|i| att.k.ranges[i].len())?,
            v: rows(&|i| att.v.ranges[i].len())?,
            attn: rows(&|i| att.q.ranges[i].len())?,
            g: rows(&|i| mlp.gate.ranges[i].len())?,
            u: rows(&|i| mlp.up.ranges[i].len())?,
            a: rows(&|i| mlp.gate.ranges[i].len())?,
            half,
            on_units: on_units.to_vec(),
        })
    }

    /// Member i's f16 copy of `which` ([`Sharded`] `h`, `attn` or `a`), refreshed from the f32
    /// one, where its products run on the matrix units; `None` elsewhere.
    fn half(&self, m: &Member, i: usize, which: Input) -> Result<Option<&crate::tensor::Tensor>> {
        let (Some(half), true) = (&self.half, self.on_units[i]) else { return Ok(None) };
        let src = match which {
            Input::H => &self.h,
            Input::Attn => &self.attn,
            Input::A => &self.a,
        };
        let dst = half[which as usize].part(i)?;
        m.convert_f32_to_f16(src.part(i)?, dst)?;
        Ok(Some(dst))
    }
}

impl Decoder {
    /// Which members run the prompt's products on their matrix units (f16 slices on a device
    /// with cooperative matrices, unless `CROSSGPU_MATRIX_UNITS=0`; quantized slices stay on the
    /// tiled kernels), and the positions one pass takes ([`PROMPT_CHUNK_ON_UNITS`] where all
    /// do, else [`PROMPT_CHUNK`]; `CROSSGPU_PROMPT_CHUNK` overrides).
    pub fn prompt_plan(&self) -> Result<(Vec<bool>, usize)> {
        let units = crate::config::matrix_units()?;
        let first = self.layers.first().map(|l| &l.attention.q);
        let on_units = (0..self.members.len())
            .map(|i| {
                let dense = match first {
                    Some(q) => q.matrix(i)?.dense().is_some(),
                    None => false,
                };
                Ok(units && dense && self.members[i].cooperative_matrix())
            })
            .collect::<Result<Vec<bool>>>()?;
        let chunk = match crate::config::prompt_chunk()? {
            Some(n) => n as usize,
            None if !on_units.is_empty() && on_units.iter().all(|&u| u) => PROMPT_CHUNK_ON_UNITS,
            None => PROMPT_CHUNK,
        };
        Ok((on_units, chunk))
    }

    /// Why the decoder cannot take a prompt as a batch ([`Decoder::prefill`]), if it cannot:
    /// heads longer than the prompt's attention takes, or no layers.
    pub fn prefill_unsupported(&self) -> Option<String> {
        if self.cfg.head_dim > PROMPT_MAX_HEAD_DIM {
            return Some(format!(
                "heads of {} elements (the prompt's attention takes at most {PROMPT_MAX_HEAD_DIM})",
                self.cfg.head_dim
            ));
        }
        if self.layers.is_empty() {
            return Some("a model of no layers".into());
        }
        None
    }

    /// Runs `tokens` through every layer at positions `position() ..`, a chunk
    /// ([`Decoder::prompt_plan`]) at a time, filling the KV caches, and advances the position past them (on the host and the
    /// devices). It computes no logits: the caller then sets the prompt's last token
    /// ([`Decoder::set_token`]) and [steps](Decoder::step). The ids and the room in the cache
    /// are checked first; an error after work was recorded breaks the decoder, as a failed
    /// step does. At most two chunks are in flight; the call returns when the last one has
    /// finished.
    pub fn prefill(&mut self, tokens: &[u32]) -> Result<()> {
        self.check_usable()?;
        self.check_tokens("prompt token", tokens)?;
        let room = self.cfg.max_seq - self.pos;
        if tokens.len() > room {
            return Err(Error::InvalidArgument(format!(
                "{} prompt tokens from position {}: the KV cache holds {}",
                tokens.len(),
                self.pos,
                self.cfg.max_seq
            )));
        }
        if let Some(why) = self.prefill_unsupported() {
            return Err(Error::Unsupported(format!("a prompt as a batch on {why}")));
        }
        if tokens.is_empty() {
            return Ok(());
        }
        let (on_units, chunk) = self.prompt_plan()?;
        // Every chunk's activations, made before any work is recorded (at most two sizes).
        let mut sizes: Vec<usize> = vec![tokens.len().min(chunk)];
        if tokens.len() > chunk && !tokens.len().is_multiple_of(chunk) {
            sizes.push(tokens.len() % chunk);
        }
        let scratch = sizes.iter().map(|&n| Rows::new(self, n, &on_units)).collect::<Result<Vec<_>>>()?;
        let t0 = std::time::Instant::now();
        let r = self.prefill_chunks(tokens, chunk, &scratch).map_err(|e| self.broken(e));
        self.step_host_time += t0.elapsed();
        r
    }

    /// Moves the position back to `position` (at most the current one): the next step or
    /// prompt writes the KV caches from there, as if what came after it had never been decoded
    /// (a conversation cut back, a benchmark run again).
    pub fn rewind(&mut self, position: usize) -> Result<()> {
        self.check_usable()?;
        if position > self.pos {
            return Err(Error::InvalidArgument(format!(
                "rewind to position {position}: the decoder is at {}",
                self.pos
            )));
        }
        self.write_position(position)?;
        self.pos = position;
        Ok(())
    }

    fn prefill_chunks(&mut self, tokens: &[u32], size: usize, scratch: &[Rows]) -> Result<()> {
        let mut previous = None;
        for (c, chunk) in tokens.chunks(size).enumerate() {
            let rows =
                scratch.iter().find(|r| r.positions == chunk.len()).expect("made for every chunk size");
            self.prefill_chunk(chunk, self.pos + c * size, rows)?;
            self.wait_previous(&mut previous, "the previous prompt chunk")?;
        }
        let end = self.pos + tokens.len();
        self.write_position(end)?;
        for m in &self.members {
            m.synchronize()?;
        }
        self.pos = end;
        Ok(())
    }

    fn prefill_chunk(&mut self, tokens: &[u32], first: usize, s: &Rows) -> Result<()> {
        let (cfg, members) = (&self.cfg, &self.members);
        let n = tokens.len();
        let shape = PromptShape { positions: n, first, max_seq: cfg.max_seq };
        let (d, group, eps) = (cfg.head_dim, cfg.q_heads / cfg.kv_heads, cfg.eps);
        for (i, m) in members.iter().enumerate() {
            let ops = m.transformer();
            ops.embed_rows(&self.embed[i], tokens, s.ids.part(i)?, s.x.part(i)?)?;
            let norm = self.layers[0].attention_norm.part(i)?;
            ops.rmsnorm_rows(s.x.part(i)?, None, norm, s.h.part(i)?, n, eps)?;
        }
        let sum = AllReduceOptions { precision: Precision::F32, ..Default::default() };
        for (l, layer) in self.layers.iter().enumerate() {
            let att = &layer.attention;
            for (i, m) in members.iter().enumerate() {
                let ops = m.transformer();
                let (h, q, k, v) = (s.h.part(i)?, s.q.part(i)?, s.k.part(i)?, s.v.part(i)?);
                let h16 = s.half(m, i, Input::H)?;
                att.q.matrix(i)?.matmul_prompt(m, h, h16, q, n)?;
                att.k.matrix(i)?.matmul_prompt(m, h, h16, k, n)?;
                att.v.matrix(i)?.matmul_prompt(m, h, h16, v, n)?;
                for (bias, y) in [(&att.bias.q, q), (&att.bias.k, k), (&att.bias.v, v)] {
                    if let Some(b) = bias {
                        ops.add_rows(y, b.part(i)?, n)?;
                    }
                }
                let kv_heads = att.k.ranges[i].len() / d;
                let caches = (att.k_cache.part(i)?, att.v_cache.part(i)?);
                ops.rope_rows(q, kv_heads * group, d, shape, cfg.rope_base)?;
                ops.rope_rows(k, kv_heads, d, shape, cfg.rope_base)?;
                ops.kv_store_rows((k, v), caches, kv_heads, d, shape)?;
                ops.attention_prompt(q, caches, s.attn.part(i)?, kv_heads * group, group, d, shape)?;
                let attn16 = s.half(m, i, Input::Attn)?;
                att.o.matrix(i)?.matmul_prompt(m, s.attn.part(i)?, attn16, s.partial.part(i)?, n)?;
            }
            let next = reducer(&mut self.comm, &mut self.remote);
            add_norm(members, next, s, &layer.mlp_norm, eps, &sum)?;
            // The last layer's MLP feeds only the logits, which the prompt's last token gets
            // from its own step.
            let Some(next_layer) = self.layers.get(l + 1) else { break };
            let mlp = &layer.mlp;
            for (i, m) in members.iter().enumerate() {
                let (h, g, u, a) = (s.h.part(i)?, s.g.part(i)?, s.u.part(i)?, s.a.part(i)?);
                let h16 = s.half(m, i, Input::H)?;
                mlp.gate.matrix(i)?.matmul_prompt(m, h, h16, g, n)?;
                mlp.up.matrix(i)?.matmul_prompt(m, h, h16, u, n)?;
                m.transformer().silu_mul(g, u, a)?;
                let a16 = s.half(m, i, Input::A)?;
                mlp.down.matrix(i)?.matmul_prompt(m, a, a16, s.partial.part(i)?, n)?;
            }
            let next = reducer(&mut self.comm, &mut self.remote);
            add_norm(members, next, s, &next_layer.attention_norm, eps, &sum)?;
        }
        Ok(())
    }
}

/// Sums the members' partials (f32 on the wire: a chunk's are past the f16 threshold, which
/// a decode step's never are), adds them to the residual stream and norms it into `h`.
fn add_norm(
    members: &[Member],
    reducer: Option<&mut dyn crate::tp::Reducer>,
    s: &Rows,
    weight: &Sharded,
    eps: f32,
    sum: &AllReduceOptions,
) -> Result<()> {
    if let Some(r) = reducer {
        r.all_reduce(&mut s.partial.refs(), sum)?;
    }
    for (i, m) in members.iter().enumerate() {
        let (x, p, h) = (s.x.part(i)?, s.partial.part(i)?, s.h.part(i)?);
        m.transformer().rmsnorm_rows(x, Some(p), weight.part(i)?, h, s.positions, eps)?;
    }
    Ok(())
}
