//! `crossgpu generate`: a checkpoint's text from a prompt (a GGUF file or a Hugging Face
//! safetensors directory), the model split across the group. The prompt goes through the
//! model's tokenizer (and, with `--chat`, its chat template), all but its last token go
//! through the model as a batch (`Decoder::prefill`) and the last one as a decode step, then
//! the sampled tokens are printed as they come until a stop token or `--tokens`.

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use clap::Args;
use crossgpu::model::{Checkpoint, Message, Model, Sampling};
use crossgpu::tp::SplitSpec;
use crossgpu::{DeviceGroup, GroupSpec, Instance};

use super::load_bar::LoadBar;
use super::{fail, print_choice, print_group, CliResult};

/// `crossgpu generate` arguments.
#[derive(Args, Debug, Clone)]
pub struct GenerateArgs {
    /// The checkpoint: a GGUF file, or a Hugging Face directory (config.json, safetensors,
    /// tokenizer.json); llama family (llama, mistral).
    #[arg(long)]
    pub model: PathBuf,
    /// The prompt.
    #[arg(long)]
    pub prompt: String,
    /// Tokens to generate at most (generation also stops at the model's stop tokens).
    #[arg(long, visible_alias = "max-tokens", default_value_t = 64)]
    pub tokens: usize,
    /// Put the prompt through the model's chat template as a user message.
    #[arg(long)]
    pub chat: bool,
    /// 0 (the default): greedy; above 0, sample from the softmax of logits / temperature.
    #[arg(long, default_value_t = 0.0)]
    pub temperature: f32,
    /// Sample among the k most likely tokens only (0: all).
    #[arg(long, default_value_t = 0)]
    pub top_k: usize,
    /// Sample among the most likely tokens whose probabilities reach p (1: all).
    #[arg(long, default_value_t = 1.0)]
    pub top_p: f32,
    /// The sampler's seed (the same seed, prompt and settings give the same text).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// How the model is split: `even`, `auto` or weights such as `2:1` (default CROSSGPU_SPLIT, else even).
    #[arg(long)]
    pub split: Option<String>,
    #[command(flatten)]
    pub steps: super::StepSettings,
}

/// `crossgpu generate`.
pub fn generate(args: &GenerateArgs) -> CliResult {
    if args.tokens == 0 {
        return Err(fail("--tokens must be at least 1"));
    }
    let sampling =
        Sampling { temperature: args.temperature, top_k: args.top_k, top_p: args.top_p, seed: args.seed };
    sampling.validate().map_err(|e| fail(format!("--temperature/--top-k/--top-p: {e}")))?;
    let checkpoint = Checkpoint::open(&args.model)?;
    let split = match &args.split {
        Some(s) => SplitSpec::parse(s).map_err(|e| e.for_setting("--split"))?,
        None => SplitSpec::from_env()?,
    };
    let instance = Instance::new()?;
    let group = DeviceGroup::from_env_or(&instance, &GroupSpec::Gpus)?;
    print_choice(
        &group,
        "one member per GPU (CPU devices only where there is no GPU; set CROSSGPU_DEVICES to choose)",
    );
    print_group(&group);
    // The prompt's length sizes the KV cache: tokenized before the load (the tokenizer is the
    // checkpoint's, read without its weights).
    let tokenizer = checkpoint.tokenizer()?;
    let text = match args.chat {
        true => tokenizer.chat_prompt(&[Message { role: "user".into(), content: args.prompt.clone() }])?,
        false => args.prompt.clone(),
    };
    let prompt = match args.chat {
        true => tokenizer.encode(&text)?,
        false => tokenizer.encode_prompt(&text)?,
    };
    if prompt.is_empty() {
        return Err(fail("the prompt has no tokens"));
    }
    let layers = checkpoint.config(1)?.layers;
    let t = Instant::now();
    let loading = LoadBar::new(true, layers, Some(checkpoint.read_counter()));
    let mut model =
        Model::from_checkpoint(&group, checkpoint, &split, prompt.len() + args.tokens, |done, _| {
            loading.update(done)
        })?;
    loading.finish();
    args.steps.apply(&mut model.decoder)?;
    let mut mode = match model.decoder.comm() {
        Some(c) => format!("all-reduce mode {}", c.mode()),
        None => "one member, no all-reduce".into(),
    };
    for said in args.steps.describe(&model.decoder) {
        mode.push_str("; ");
        mode.push_str(&said);
    }
    println!(
        "{} ({} {}, {} layers) loaded in {:.1} s; KV heads per member {:?}; {mode}; {} prompt tokens",
        args.model.display(),
        model.format,
        model.architecture,
        model.decoder.cfg.layers,
        t.elapsed().as_secs_f64(),
        model.decoder.plan.kv_heads,
        prompt.len()
    );
    let prompt_path = match model.decoder.prefill_unsupported() {
        None => "as a batch".to_string(),
        Some(why) => format!("one step each: {why}"),
    };
    let drawn = match model.decoder.device_sampling_unsupported(&sampling) {
        None => "drawn on the devices".to_string(),
        Some(why) => format!("drawn on the host: {why}"),
    };
    let t = Instant::now();
    // The prompt's steps are submitted by `generate` and finish by the first token's read-back:
    // the prompt's time is the time to the first token; the decode rate is over the tokens after it.
    let mut pieces = model.generate(&prompt, sampling, args.tokens)?;
    print!("{text}");
    let mut first = None;
    for piece in pieces.by_ref() {
        print!("{}", piece?);
        std::io::stdout().flush()?;
        first.get_or_insert_with(Instant::now);
    }
    let prefill = first.map_or(t.elapsed(), |f| f - t).as_secs_f64();
    let generated = pieces.ids().len();
    let t = first.unwrap_or_else(Instant::now);
    println!();
    let secs = t.elapsed().as_secs_f64();
    let how = match sampling.temperature {
        0.0 => "greedy".to_string(),
        t => format!("temperature {t}, top-k {}, top-p {}, seed {}", args.top_k, args.top_p, args.seed),
    };
    println!(
        "prompt: {} tokens, the first token after {prefill:.2} s ({:.1} prompt tokens/s, {prompt_path}); generated: {} tokens, {:.1} tokens/s after the first ({secs:.2} s); {how}, {drawn}",
        prompt.len(),
        prompt.len() as f64 / prefill.max(1e-9),
        generated,
        generated.saturating_sub(1) as f64 / secs.max(1e-9),
    );
    Ok(())
}
