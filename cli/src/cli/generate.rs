//! `crossgpu generate`: a checkpoint's text from a prompt (a GGUF file or a Hugging Face
//! safetensors directory), the model split across the group. The prompt goes through the
//! model's tokenizer (and, with `--chat`, its chat template), each prompt token is one decoder
//! step, then the sampled tokens are printed as they come until a stop token or `--tokens`.

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use clap::Args;
use crossgpu::model::{Checkpoint, Generation, Message, Sampling};
use crossgpu::tp::{Decoder, SplitSpec};
use crossgpu::{Comm, DeviceGroup, GroupSpec, Instance};

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
}

/// `crossgpu generate`.
pub fn generate(args: &GenerateArgs) -> CliResult {
    if args.tokens == 0 {
        return Err(fail("--tokens must be at least 1"));
    }
    let sampling =
        Sampling { temperature: args.temperature, top_k: args.top_k, top_p: args.top_p, seed: args.seed };
    sampling.validate().map_err(|e| fail(format!("--temperature/--top-k/--top-p: {e}")))?;
    let mut model = Checkpoint::open(&args.model)?;
    let tokenizer = model.tokenizer()?;
    let (text, prompt) = match args.chat {
        true => {
            let text =
                tokenizer.chat_prompt(&[Message { role: "user".into(), content: args.prompt.clone() }])?;
            let ids = tokenizer.encode(&text)?;
            (text, ids)
        }
        false => (args.prompt.clone(), tokenizer.encode_prompt(&args.prompt)?),
    };
    if prompt.is_empty() {
        return Err(fail("the prompt has no tokens"));
    }
    let cfg = model.config(prompt.len() + args.tokens)?;
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
    let comm = if group.len() > 1 { Some(Comm::new(&group)?) } else { None };
    let t = Instant::now();
    let loading = LoadBar::new(true, cfg.layers, Some(model.read_counter()));
    let mut decoder =
        Decoder::load_from(&group, cfg, &split, comm, &mut model, |done, _| loading.update(done))?;
    loading.finish();
    let mode = match decoder.comm() {
        Some(c) => format!("all-reduce mode {}", c.mode()),
        None => "one member, no all-reduce".into(),
    };
    println!(
        "{} ({} {}, {} layers) loaded in {:.1} s; KV heads per member {:?}; {mode}; {} prompt tokens",
        args.model.display(),
        model.format(),
        model.architecture(),
        decoder.cfg.layers,
        t.elapsed().as_secs_f64(),
        decoder.plan.kv_heads,
        prompt.len()
    );
    let t = Instant::now();
    let tokens = Generation::new(&mut decoder, &prompt, sampling, tokenizer.stops(), args.tokens)?;
    let prefill = t.elapsed().as_secs_f64();
    let mut generated = Vec::new();
    let mut shown = 0;
    let t = Instant::now();
    print!("{text}");
    for token in tokens {
        generated.push(token?);
        // Print what the tokens so far decode to beyond what was printed (a character can take
        // several tokens).
        let so_far = tokenizer.decode(&generated)?;
        if so_far.len() > shown && so_far.is_char_boundary(shown) {
            print!("{}", &so_far[shown..]);
            shown = so_far.len();
            std::io::stdout().flush()?;
        }
    }
    println!();
    let secs = t.elapsed().as_secs_f64();
    let how = match sampling.temperature {
        0.0 => "greedy".to_string(),
        t => format!("temperature {t}, top-k {}, top-p {}, seed {}", args.top_k, args.top_p, args.seed),
    };
    println!(
        "prompt: {} tokens in {prefill:.2} s ({:.1} tokens/s, one step each); generated: {} tokens in {secs:.2} s ({:.1} tokens/s); {how}",
        prompt.len(),
        prompt.len() as f64 / prefill.max(1e-9),
        generated.len(),
        generated.len() as f64 / secs.max(1e-9),
    );
    Ok(())
}
