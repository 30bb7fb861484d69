//! [`Model`]: a checkpoint loaded onto a group, its tokenizer beside its decoder: text in, text
//! out, the weights split across the members.

use std::path::Path;

use super::checkpoint::Checkpoint;
use super::generation::Generation;
use super::tokenizer::{Message, Tokenizer};
use crate::comm::Comm;
use crate::error::Result;
use crate::group::DeviceGroup;
use crate::sample::Sampling;
use crate::tp::{Decoder, SplitSpec};

/// A model on a group: its tokenizer and its [`Decoder`] (each member holding its share).
///
/// ```no_run
/// # fn main() -> crossgpu::Result<()> {
/// use crossgpu::model::{Model, Sampling};
/// use crossgpu::tp::SplitSpec;
/// let instance = crossgpu::Instance::new()?;
/// let group = crossgpu::DeviceGroup::from_env(&instance)?;
/// let mut model = Model::load(&group, "SmolLM2-135M-Instruct.Q4_1.gguf".as_ref(), &SplitSpec::Even, 512)?;
/// let prompt = model.prompt("The capital of France is", false)?;
/// for piece in model.generate(&prompt, Sampling::greedy(), 32)? {
///     print!("{}", piece?);
/// }
/// # Ok(())
/// # }
/// ```
pub struct Model {
    /// The model's tokenizer and chat template.
    pub tokenizer: Tokenizer,
    /// The decoder, each member holding its share of the weights.
    pub decoder: Decoder,
    /// `GGUF` or `safetensors`.
    pub format: &'static str,
    /// The architecture the checkpoint names.
    pub architecture: String,
}

impl Model {
    /// Opens the checkpoint at `path` ([`Checkpoint::open`]) and loads it onto `group`, split
    /// as `split` says, with a KV cache of `context` tokens (prompts and generated tokens of
    /// every [`Model::generate`] together); a communicator is made for two members or more.
    pub fn load(group: &DeviceGroup, path: &Path, split: &SplitSpec, context: usize) -> Result<Self> {
        Self::from_checkpoint(group, Checkpoint::open(path)?, split, context, |_, _| {})
    }

    /// Like [`Model::load`] with a checkpoint already open (its
    /// [`Checkpoint::read_counter`] can show the load's bytes), calling `progress(layers_loaded,
    /// layers)` as the layers arrive.
    pub fn from_checkpoint(
        group: &DeviceGroup,
        mut checkpoint: Checkpoint,
        split: &SplitSpec,
        context: usize,
        progress: impl FnMut(usize, usize),
    ) -> Result<Self> {
        let tokenizer = checkpoint.tokenizer()?;
        let cfg = checkpoint.config(context)?;
        let comm = if group.len() > 1 { Some(Comm::new(group)?) } else { None };
        let decoder = Decoder::load_from(group, cfg, split, comm, &mut checkpoint, progress)?;
        let (format, architecture) = (checkpoint.format(), checkpoint.architecture().to_string());
        Ok(Self { tokenizer, decoder, format, architecture })
    }

    /// The token ids of a prompt: `text` with the special tokens the model adds to a prompt,
    /// or, with `chat`, `text` as a user message through the model's chat template.
    pub fn prompt(&self, text: &str, chat: bool) -> Result<Vec<u32>> {
        match chat {
            true => {
                let messages = [Message { role: "user".into(), content: text.into() }];
                self.tokenizer.encode(&self.tokenizer.chat_prompt(&messages)?)
            }
            false => self.tokenizer.encode_prompt(text),
        }
    }

    /// Runs `prompt` (token ids) from the decoder's current position, then yields the text of
    /// each generated token as it is decoded (a piece may be empty where a character takes
    /// several tokens), until a stop token or `max_tokens`. Checked first as
    /// [`Generation::new`] checks.
    pub fn generate(
        &mut self,
        prompt: &[u32],
        sampling: Sampling,
        max_tokens: usize,
    ) -> Result<TextStream<'_>> {
        let tokens =
            Generation::new(&mut self.decoder, prompt, sampling, self.tokenizer.stops(), max_tokens)?;
        Ok(TextStream { tokens, tokenizer: &self.tokenizer, ids: Vec::new(), shown: 0 })
    }
}

/// The text of generated tokens, piece by piece ([`Model::generate`]).
pub struct TextStream<'a> {
    tokens: Generation<'a>,
    tokenizer: &'a Tokenizer,
    ids: Vec<u32>,
    /// Bytes of the decoded text already yielded.
    shown: usize,
}

impl TextStream<'_> {
    /// The token ids generated so far.
    pub fn ids(&self) -> &[u32] {
        &self.ids
    }
}

impl Iterator for TextStream<'_> {
    type Item = Result<String>;

    fn next(&mut self) -> Option<Result<String>> {
        let id = match self.tokens.next() {
            Some(Ok(id)) => id,
            Some(Err(e)) => return Some(Err(e)),
            // The end: whatever was held back (a character cut off by the budget), once.
            None => {
                let text = self.tokenizer.decode(&self.ids).ok()?;
                let rest = text.get(self.shown..).filter(|r| !r.is_empty())?.to_string();
                self.shown = text.len();
                return Some(Ok(rest));
            }
        };
        self.ids.push(id);
        // What the tokens so far decode to beyond what was yielded (held back while it ends
        // inside a character).
        let text = match self.tokenizer.decode(&self.ids) {
            Ok(t) => t,
            Err(e) => return Some(Err(e)),
        };
        if text.len() > self.shown && text.is_char_boundary(self.shown) && !text.ends_with('\u{FFFD}') {
            let piece = text[self.shown..].to_string();
            self.shown = text.len();
            Some(Ok(piece))
        } else {
            Some(Ok(String::new()))
        }
    }
}
