//! `crossgpu generate`: a GGUF model's text from a prompt, the model split across the group.
//! The prompt goes through the model's tokenizer (and, with `--chat`, its chat template), each
//! prompt token is one decoder step, then the greedy tokens are printed as they come until the
//! end-of-sequence token or `--tokens`.

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use clap::Args;
use crossgpu::model::{LlamaGguf, Message, Tokenizer};
use crossgpu::tp::{Decoder, SplitSpec};
use crossgpu::{Comm, DeviceGroup, GroupSpec, Instance};

use super::load_bar::LoadBar;
use super::{fail, print_choice, print_group, CliResult};

/// `crossgpu generate` arguments.
#[derive(Args, Debug, Clone)]
pub struct GenerateArgs {
    /// The GGUF file (llama family: llama, mistral).
    #[arg(long)]
    pub model: PathBuf,
    /// The prompt.
    #[arg(long)]
    pub prompt: String,
    /// Tokens to generate at most (generation also stops at the end-of-sequence token).
    #[arg(long, default_value_t = 64)]
    pub tokens: usize,
    /// Put the prompt through the model's chat template as a user message.
    #[arg(long)]
    pub chat: bool,
    /// How the model is split: `even`, `auto` or weights such as `2:1` (default CROSSGPU_SPLIT, else even).
    #[arg(long)]
    pub split: Option<String>,
}

/// `crossgpu generate`.
pub fn generate(args: &GenerateArgs) -> CliResult {
    if args.tokens == 0 {
        return Err(fail("--tokens must be at least 1"));
    }
    let mut model = LlamaGguf::open(&args.model)?;
    let tokenizer = Tokenizer::from_gguf(model.file())?;
    let text = match args.chat {
        true => tokenizer.chat_prompt(&[Message { role: "user".into(), content: args.prompt.clone() }])?,
        false => args.prompt.clone(),
    };
    let mut prompt = tokenizer.encode(&text)?;
    if !args.chat {
        prompt.splice(0..0, tokenizer.bos());
    }
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
    println!(
        "{} ({}, {} layers) loaded in {:.1} s; KV heads per member {:?}; {} prompt tokens",
        args.model.display(),
        model.architecture(),
        decoder.cfg.layers,
        t.elapsed().as_secs_f64(),
        decoder.plan.kv_heads,
        prompt.len()
    );
    let t = Instant::now();
    for &token in &prompt {
        decoder.set_token(token)?;
        decoder.step()?;
    }
    let prefill = t.elapsed();
    let mut generated = Vec::new();
    let mut shown = 0;
    let t = Instant::now();
    print!("{text}");
    loop {
        // The greedy token of the last step (the decoder's own choice, read back to print it).
        let logits = decoder.logits()?;
        let next = argmax(&logits);
        if Some(next) == tokenizer.eos() {
            break;
        }
        generated.push(next);
        // Print what the tokens so far decode to beyond what was printed (a character can take
        // several tokens).
        let so_far = tokenizer.decode(&generated)?;
        if so_far.len() > shown && so_far.is_char_boundary(shown) {
            print!("{}", &so_far[shown..]);
            shown = so_far.len();
            std::io::stdout().flush()?;
        }
        if generated.len() == args.tokens {
            break;
        }
        decoder.set_token(next)?;
        decoder.step()?;
    }
    println!();
    let secs = t.elapsed().as_secs_f64();
    println!(
        "{} tokens generated in {secs:.2} s ({:.1} tokens/s; the prompt's {} steps took {:.2} s); greedy",
        generated.len(),
        generated.len() as f64 / secs.max(1e-9),
        prompt.len(),
        prefill.as_secs_f64()
    );
    Ok(())
}

/// The greedy choice: largest value, lowest index among equals (as the decoder's kernels choose).
fn argmax(v: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &x) in v.iter().enumerate() {
        if x > v[best] {
            best = i;
        }
    }
    best as u32
}
