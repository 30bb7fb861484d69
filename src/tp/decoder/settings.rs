//! How a [`Decoder`] computes its steps, set before the first one: the residual norms folded
//! into the products, the products' inputs quantized to 8-bit blocks, their weights warmed
//! into L2, and attention cut over the positions.

use vk_native::DeviceType;

use super::state::Decoder;
use crate::error::{Error, Result};
use crate::ops::Q8Vector;
use crate::tp::matrix::{Matrix, Q8Slots};

/// Bytes of each product's weights [`Decoder::warm_l2_default`] warms on discrete GPUs (f16
/// weights).
pub const WARM_L2_DISCRETE: u64 = 12 << 20;

impl Decoder {
    /// Leaves each residual norm to the product that reads it (`on`) or writes it out as a
    /// dispatch of its own (the default). It applies where the residual stream stays on one
    /// member (one member, no communicator; elsewhere every norm is written): each output
    /// projection adds itself into the stream and, in the same dispatch, writes the stream
    /// times the norm's weight and one partial sum of squares per eight rows
    /// ([`crate::tp::TransformerOps::matvec_add_norm_pending`]); the next half's fused q/k/v or
    /// gate/up kernel reads those as [`crate::tp::ProductInput::PendingNorm`], sums the
    /// partials into the norm's scale once per workgroup and scales its finished sums: two
    /// dispatches fewer per layer, within rounding of the written norms but not their bits.
    /// Readers that cannot finish a pending norm (quantized or biased products, the
    /// vocabulary) get it written first. Off by default: it was slower on the 27B-class
    /// decode (docs/BENCHMARKS.md, "The norms"). Set it before the first step: an error once a
    /// step has been recorded for replay.
    pub fn set_fold_norms(&mut self, on: bool) -> Result<()> {
        if on != self.fold_norms {
            self.check_unrecorded("set_fold_norms")?;
        }
        self.fold_norms = on;
        Ok(())
    }

    /// Whether the residual norms are folded into the products ([`Decoder::set_fold_norms`]).
    pub fn folds_norms(&self) -> bool {
        self.fold_norms
    }

    /// Fetches the first `bytes` of each product's weights into the GPU's L2 cache beside the
    /// dispatch before it ([`crate::tp::TransformerOps::warm_l2`]): beside attention, `o`'s;
    /// beside each written norm, those of the q/k/v, gate/up or vocabulary product that reads
    /// it (shared between gate and up where one kernel reads both); a folded norm
    /// ([`Decoder::set_fold_norms`]) has no dispatch, so its reader's go beside the tail of the
    /// product that leaves it pending. A norm is one workgroup and
    /// attention one per head, so the rest of the GPU is idle while they run; the warm moves
    /// the start of the next weight stream into that time. It changes no value (the decode's
    /// tokens and logits are bitwise the same); 0, the default, records no warm. On a CPU
    /// device it is extra work and nothing else. Capped at
    /// [`crate::tp::WARM_MAX_BYTES`] per matrix. As for [`Decoder::set_fold_norms`], an error
    /// once a step has been recorded for replay.
    pub fn set_warm_l2(&mut self, bytes: u64) -> Result<()> {
        if bytes != self.warm_l2_bytes {
            self.check_unrecorded("set_warm_l2")?;
        }
        self.warm_l2_bytes = bytes;
        Ok(())
    }

    /// Cuts each layer's attention over the cache's positions where the cache is long enough
    /// (`on`, the default: more than two chunks of [`crate::tp::ATTENTION_CHUNK`] positions, a
    /// workgroup per query head and chunk, then a second dispatch that combines the chunks:
    /// [`crate::tp::TransformerOps::attention_split`]), or lets one workgroup per query head
    /// walk every position whatever the cache's length (`off`). Both are checked against the
    /// f64 reference; their results differ in rounding. Turning it on where the cache is short
    /// changes nothing (the decoder holds no partials for it). As for
    /// [`Decoder::set_fold_norms`], an error once a step has been recorded for replay.
    pub fn set_split_attention(&mut self, on: bool) -> Result<()> {
        if on != self.split_attention {
            self.check_unrecorded("set_split_attention")?;
        }
        self.split_attention = on;
        Ok(())
    }

    /// Whether the steps cut attention over the positions: [`Decoder::set_split_attention`] on
    /// and a cache long enough to be cut.
    pub fn splits_attention(&self) -> bool {
        self.split_attention && self.act.attention.partials.is_some()
    }

    /// An error naming `setter` once a step has been recorded for replay: the recording holds
    /// the step as it was set.
    fn check_unrecorded(&self, setter: &str) -> Result<()> {
        match self.recorded {
            Some(_) => Err(Error::InvalidArgument(format!(
                "{setter}: a step is already recorded for replay; set it before the first step"
            ))),
            None => Ok(()),
        }
    }

    /// The warm [`Decoder::set_warm_l2`] is expected to pay with here: [`WARM_L2_DISCRETE`]
    /// where every member is a discrete GPU and every layer's weights are f16, else 0. A CPU
    /// device runs the warm as extra work; an integrated GPU's cache is unmeasured; and
    /// quantized products are bound by their arithmetic, not by memory, so their weights in L2
    /// buy nothing. Measured on one H100 (2026-12-06, one call, three processes each,
    /// docs/BENCHMARKS.md, "Weights warmed into L2"): the 27B-class f16 decode at 56.98–57.03
    /// tokens/s with 12 MiB against 54.61–54.65 without (+4.3%; 16 MiB the same, 32 MiB, past
    /// what the 50 MB L2 keeps beside the product's own stream, nothing); cut to 16 layers, a
    /// Q4_1 file 394.99–396.40 against 393.52–394.74 and a Q4_K_M file 293.25–294.54 against
    /// 295.97–297.88. `crossgpu decode` and `generate` use it unless `--warm-l2` says otherwise;
    /// the library's `Decoder` warms nothing unless asked.
    pub fn warm_l2_default(&self) -> u64 {
        let discrete = self.members.iter().all(|m| m.adapter().device_type == DeviceType::Discrete);
        let f16 = (0..self.members.len())
            .all(|i| self.layer_matrices(i).all(|m| m.is_ok_and(|m| m.dense().is_some())));
        if discrete && f16 {
            WARM_L2_DISCRETE
        } else {
            0
        }
    }

    /// Bytes of each product's weights warmed into L2 ([`Decoder::set_warm_l2`]; 0: off).
    pub fn warm_l2_bytes(&self) -> u64 {
        self.warm_l2_bytes
    }

    /// Quantizes each decode step's product inputs to 8-bit blocks (`on`) where the weights are
    /// ggml blocks (Q8_0, Q4_0, Q4_1, Q4_K, Q6_K), which then multiply them with integer dot
    /// products ([`crate::Member::matvec_quant_q8`], llama.cpp's path on its GPUs); off (the
    /// default), every product reads its input in f32. Not the f32 product: each input element
    /// moves by up to half a step of 1/127 of the largest magnitude in its block of 32
    /// (`tests/suite/quant_q8.rs`: on random inputs 0.25–0.38% of `Σ|w·x|` a row at most, where
    /// the f32 kernels are within 1.4e-7; SmolLM2's next-token distribution within KL 7.1e-3
    /// nats of the f32 decoder's). One quantization per input: q, k and v share one, gate and
    /// up another, `o`, `down` and the vocabulary one each; f16 and BF16 slices read f32 as
    /// before. The prompt's batch ([`Decoder::prefill`]) multiplies in f32 (its matrix
    /// kernels have no 8-bit path): the setting applies to the steps.
    ///
    /// Off by default here, so that a decoder multiplies in f32 unless asked; where it pays
    /// ([`Decoder::q8_activations_pay`]: on GPUs) `crossgpu decode` and `generate` turn it on.
    /// An error where no layer's weights
    /// take 8-bit inputs, where a member's device has no integer dot products
    /// (`shaderIntegerDotProduct`), and, as for [`Decoder::set_fold_norms`], once a step has
    /// been recorded for replay.
    pub fn set_q8_activations(&mut self, on: bool) -> Result<()> {
        if on == self.quantizes_activations() {
            return Ok(());
        }
        self.check_unrecorded("set_q8_activations")?;
        if let Some(m) = self.members.iter().find(|m| on && !m.adapter().caps.integer_dot_product) {
            return Err(Error::Unsupported(format!(
                "set_q8_activations: {} has no integer dot products (shaderIntegerDotProduct)",
                m.label()
            )));
        }
        let q8 = if on { self.q8_vectors()? } else { Default::default() };
        for (slots, vectors) in self.act.q8_slots_mut().into_iter().zip(q8) {
            *slots = Q8Slots(vectors);
        }
        Ok(())
    }

    /// Whether [`Decoder::set_q8_activations`] is expected to make the steps faster here: some
    /// layer's weights are ggml blocks that take 8-bit inputs, and every member is a GPU (not
    /// a CPU device) with integer dot products. Measured (docs/BENCHMARKS.md, "8-bit inputs"):
    /// on one H200 the 27B-class shape cut to 16 layers decodes a Q4_1 file at 369 tokens/s
    /// against 307 in f32 and a Q4_K_M file at 273 against 85; on lavapipe (a CPU device)
    /// SmolLM2's Q4_1 file decodes at 0.45 tokens/s against 1.08.
    pub fn q8_activations_pay(&self) -> bool {
        let gpus = self.members.iter().all(|m| {
            let a = m.adapter();
            a.device_type != DeviceType::Cpu && a.caps.integer_dot_product
        });
        let takes = |i| {
            self.q8_readers(i)
                .is_ok_and(|inputs| inputs.iter().flat_map(|(readers, _)| readers).any(|m| m.takes_q8()))
        };
        gpus && (0..self.members.len()).any(takes)
    }

    /// The slices of member `i` that read each input (in the order of
    /// `Activations::q8_slots_mut`), and the input's length on that member.
    fn q8_readers(&self, i: usize) -> Result<[(Vec<&Matrix>, usize); 5]> {
        let (mut qkv, mut o, mut gate_up, mut down) = (vec![], vec![], vec![], vec![]);
        for l in &self.layers {
            let (a, f) = (&l.attention, &l.mlp);
            qkv.extend([a.q.matrix(i)?, a.k.matrix(i)?, a.v.matrix(i)?]);
            o.push(a.o.matrix(i)?);
            gate_up.extend([f.gate.matrix(i)?, f.up.matrix(i)?]);
            down.push(f.down.matrix(i)?);
        }
        let first = self.layers.first();
        let o_cols = first.map_or(0, |l| l.attention.o.ranges[i].len());
        let down_cols = first.map_or(0, |l| l.mlp.down.ranges[i].len());
        let hidden = self.cfg.hidden;
        let vocab = vec![self.vocab.matrix(i)?];
        Ok([(qkv, hidden), (o, o_cols), (gate_up, hidden), (down, down_cols), (vocab, hidden)])
    }

    /// Per input (in the order of `Activations::q8_slots_mut`) and member, a vector where some
    /// layer's reader of it takes 8-bit blocks; an error where none does.
    fn q8_vectors(&self) -> Result<[Vec<Option<Q8Vector>>; 5]> {
        let mut q8: [Vec<Option<Q8Vector>>; 5] = Default::default();
        for (i, m) in self.members.iter().enumerate() {
            let inputs = self.q8_readers(i)?;
            for (slots, (readers, cols)) in q8.iter_mut().zip(inputs) {
                let takes = readers.into_iter().any(Matrix::takes_q8);
                slots.push(takes.then(|| m.q8_vector(cols)).transpose()?);
            }
        }
        if q8.iter().flatten().all(Option::is_none) {
            return Err(Error::Unsupported(
                "set_q8_activations: no layer has Q8_0, Q4_0, Q4_1, Q4_K or Q6_K weights, the products that take 8-bit inputs".into(),
            ));
        }
        Ok(q8)
    }

    /// Whether products read their inputs as 8-bit blocks ([`Decoder::set_q8_activations`]).
    pub fn quantizes_activations(&self) -> bool {
        self.act.quantizes()
    }
}
