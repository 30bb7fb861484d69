//! How `crossgpu decode` and `generate` compute a decode step: the flags they share and what
//! each sets on the [`Decoder`].

use crossgpu::tp::{Decoder, ATTENTION_CHUNK};

use super::{fail, CliResult};

/// The step settings of `decode` and `generate`.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct StepSettings {
    /// Leave each residual norm to the fused product that reads it (one member, f16 weights:
    /// two dispatches fewer per layer; `Decoder::set_fold_norms`). Off by default: on one H100
    /// it made the 27B-class decode slower (54.7 against 55.5 tokens/s, docs/BENCHMARKS.md
    /// "The norms").
    #[arg(long)]
    pub fold_norms: bool,
    /// Quantize each product's input to 8-bit blocks where its weights are ggml blocks (Q8_0,
    /// Q4_0, Q4_1, Q4_K, Q6_K): integer dot products, llama.cpp's path
    /// (`Decoder::set_q8_activations`); not the f32 product; the decode steps only (a prompt's
    /// batch multiplies in f32). The default where every member is a GPU with integer dot
    /// products (`Decoder::q8_activations_pay`); this flag asks for it anywhere, and fails
    /// where it cannot be had.
    #[arg(long, conflicts_with = "f32_activations")]
    pub q8_activations: bool,
    /// Multiply every product's input in f32, also where 8-bit inputs would be the default.
    #[arg(long)]
    pub f32_activations: bool,
    /// MiB of each product's first weights fetched into the GPU's L2 cache beside the norm or
    /// attention dispatch before it (`Decoder::set_warm_l2`; the same tokens either way); 0:
    /// none. Default: 12 where every member is a discrete GPU and the weights are f16
    /// (`Decoder::warm_l2_default`: +4.3% on an H100's 27B-class decode), else 0.
    #[arg(long, value_name = "MIB")]
    pub warm_l2: Option<u64>,
    /// One workgroup per query head walks every position of the cache, also where the cache
    /// is long enough to be cut over the positions (more than 256: the default there is the
    /// split, flash-decoding; `Decoder::set_split_attention`).
    #[arg(long)]
    pub whole_attention: bool,
}

impl StepSettings {
    /// Sets these on `dec`, before its first step.
    pub fn apply(&self, dec: &mut Decoder) -> CliResult {
        dec.set_fold_norms(self.fold_norms)?;
        let warm = self.warm_l2.map_or_else(|| dec.warm_l2_default(), |mib| mib << 20);
        dec.set_warm_l2(warm)?;
        dec.set_split_attention(!self.whole_attention)?;
        let q8 = self.q8_activations || (!self.f32_activations && dec.q8_activations_pay());
        if q8 {
            dec.set_q8_activations(true).map_err(|e| fail(format!("--q8-activations: {e}")))?;
        }
        Ok(())
    }

    /// What [`StepSettings::apply`] set on `dec`, one phrase each, and why.
    pub fn describe(&self, dec: &Decoder) -> Vec<String> {
        let mut said = Vec::new();
        if dec.folds_norms() {
            said.push("residual norms folded into the products that read them (--fold-norms)".to_string());
        }
        if dec.warm_l2_bytes() > 0 {
            said.push(format!(
                "{} MiB of each product's weights warmed into L2 (--warm-l2)",
                dec.warm_l2_bytes() >> 20
            ));
        }
        if dec.splits_attention() {
            said.push(format!(
                "attention cut over the positions, {ATTENTION_CHUNK} a workgroup (--whole-attention turns it off)"
            ));
        } else if self.whole_attention {
            said.push(
                "attention over the whole cache, one workgroup per query head (--whole-attention)"
                    .to_string(),
            );
        }
        if dec.quantizes_activations() {
            let why = if self.q8_activations {
                "--q8-activations"
            } else {
                "the default on GPUs; --f32-activations for f32"
            };
            said.push(format!("inputs of the products over ggml blocks quantized to 8-bit blocks ({why})"));
        }
        said
    }
}
