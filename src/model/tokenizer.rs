//! A model's tokenizer and chat template, as its GGUF file or its Hugging Face directory
//! carries them. From GGUF: a byte-level BPE vocabulary with its merges
//! (`tokenizer.ggml.model = gpt2`), built into Hugging Face's `tokenizers` with the
//! pre-tokenizer the file names (`tokenizer.ggml.pre`) and its control tokens as special
//! tokens. From a directory: `tokenizer.json` as `tokenizers` reads it, `tokenizer_config.json`
//! (BOS/EOS tokens, the chat template) and the config's end-of-sequence ids. The Jinja chat
//! template is rendered by `minijinja`.

use std::path::Path;

use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::{AddedToken, SplitDelimiterBehavior};

use super::gguf::GgufFile;
use crate::error::FormatError;
use crate::error::{Error, Result};

/// ggml's token type of a control token (`<|im_start|>` and the like).
const CONTROL: i32 = 3;

/// One message of a chat: its role (`system`, `user`, `assistant`) and text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// `system`, `user` or `assistant`.
    pub role: String,
    /// The text.
    pub content: String,
}

/// Text to token ids and back, and chats to prompts.
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    vocab: usize,
    bos: Option<u32>,
    /// The tokens generation stops at: the end-of-sequence token first, then any others the
    /// model names (a Hugging Face config may list several).
    stops: Vec<u32>,
    /// How a prompt gets its special tokens: prepend BOS (GGUF's `add_bos_token`), or through
    /// `tokenizer.json`'s own post-processor (Hugging Face).
    prompt_specials: PromptSpecials,
    template: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PromptSpecials {
    /// Prepend the BOS token (if any).
    Bos,
    /// None.
    Nothing,
    /// What `tokenizer.json`'s post-processor adds.
    PostProcessor,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("vocab", &self.vocab)
            .field("bos", &self.bos)
            .field("stops", &self.stops)
            .finish()
    }
}

/// The pre-tokenizer llama.cpp calls `name` (llama-vocab.cpp), as Hugging Face's tokenizer.json
/// spells the same splits: GPT-2's byte-level split, SmolLM's (digits one by one first), and
/// the regex splits of llama 3 (`llama-bpe`: digits in threes) and qwen2 (digits one by one),
/// each followed by the byte-level mapping.
fn pre_tokenizer(name: &str) -> std::result::Result<PreTokenizerWrapper, String> {
    /// llama 3's and qwen2's split, `DIGITS` standing for how digits group.
    const SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|DIGITS| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
    let byte_level = ByteLevel::new(false, true, true);
    let regex = |digits: &str| -> std::result::Result<PreTokenizerWrapper, String> {
        let pattern = SplitPattern::Regex(SPLIT.replace("DIGITS", digits));
        let split =
            Split::new(pattern, SplitDelimiterBehavior::Isolated, false).map_err(|e| e.to_string())?;
        Ok(Sequence::new(vec![split.into(), ByteLevel::new(false, true, false).into()]).into())
    };
    match name {
        "gpt2" | "default" => Ok(byte_level.into()),
        "smollm" => Ok(Sequence::new(vec![Digits::new(true).into(), byte_level.into()]).into()),
        "llama-bpe" | "llama3" => regex(r"\p{N}{1,3}"),
        "qwen2" => regex(r"\p{N}"),
        other => Err(format!(
            "{other:?} is not a pre-tokenizer crossgpu knows (gpt2, default, smollm, llama-bpe, qwen2)"
        )),
    }
}

impl Tokenizer {
    /// The tokenizer `file` describes; an error names the key that is missing or not understood.
    pub fn from_gguf(file: &GgufFile) -> Result<Self> {
        let bad = |what: String| Error::Model(FormatError::new(file.file_name(), what));
        let model = file.str("tokenizer.ggml.model")?;
        if model != "gpt2" {
            return Err(bad(format!(
                "tokenizer.ggml.model is {model:?}: only byte-level BPE (\"gpt2\") vocabularies are read so far"
            )));
        }
        let tokens = file.str_array("tokenizer.ggml.tokens")?;
        let merges = file.str_array("tokenizer.ggml.merges")?;
        let vocab: Vocab = tokens.iter().enumerate().map(|(i, t)| (t.clone(), i as u32)).collect();
        let merges = merges
            .iter()
            .map(|m| match m.split_once(' ') {
                Some((a, b)) => Ok((a.to_string(), b.to_string())),
                None => Err(bad(format!("tokenizer.ggml.merges holds {m:?}, not two tokens"))),
            })
            .collect::<Result<Vec<_>>>()?;
        let bpe = BPE::builder()
            .vocab_and_merges(vocab, merges)
            .build()
            .map_err(|e| bad(format!("tokenizer.ggml.merges: {e}")))?;
        let mut inner = tokenizers::Tokenizer::new(bpe);
        let pre = pre_tokenizer(file.optional_str("tokenizer.ggml.pre")?.unwrap_or("gpt2"))
            .map_err(|e| bad(format!("tokenizer.ggml.pre: {e}")))?;
        inner.with_pre_tokenizer(Some(pre));
        inner.with_decoder(Some(ByteLevel::default()));
        if let Some(types) = file.optional_i32_array("tokenizer.ggml.token_type")? {
            let special: Vec<AddedToken> = tokens
                .iter()
                .zip(types)
                .filter(|(_, &t)| t == CONTROL)
                .map(|(s, _)| AddedToken::from(s.clone(), true))
                .collect();
            inner.add_special_tokens(&special);
        }
        let id = |key: &str| -> Result<Option<u32>> {
            match file.optional_u32(key)? {
                Some(i) if i as usize >= tokens.len() => {
                    Err(bad(format!("{key} is {i}, past the vocabulary of {}", tokens.len())))
                }
                other => Ok(other),
            }
        };
        // llama.cpp prepends BOS unless the file says not to.
        let add_bos = file.optional_bool("tokenizer.ggml.add_bos_token")?.unwrap_or(true);
        let stops = [id("tokenizer.ggml.eos_token_id")?, id("tokenizer.ggml.eot_token_id")?];
        let mut stop_ids: Vec<u32> = Vec::new();
        for s in stops.into_iter().flatten() {
            if !stop_ids.contains(&s) {
                stop_ids.push(s);
            }
        }
        Ok(Self {
            inner,
            vocab: tokens.len(),
            bos: id("tokenizer.ggml.bos_token_id")?,
            stops: stop_ids,
            prompt_specials: if add_bos { PromptSpecials::Bos } else { PromptSpecials::Nothing },
            template: file.optional_str("tokenizer.chat_template")?.map(str::to_string),
        })
    }

    /// The tokenizer of a Hugging Face model directory: `tokenizer.json` (required), the BOS and
    /// EOS tokens and chat template of `tokenizer_config.json` (or `chat_template.jinja`) where
    /// present, and `extra_stops` (the end-of-sequence ids of the model's config) as further
    /// stop tokens. An error names the file and what in it is wrong.
    pub fn from_hf_dir(dir: &Path, extra_stops: &[u32]) -> Result<Self> {
        let path = dir.join("tokenizer.json");
        let name = path.display().to_string();
        let inner = tokenizers::Tokenizer::from_file(&path)
            .map_err(|e| Error::Model(FormatError::new(&name, format!("not a tokenizer: {e}"))))?;
        let vocab = inner.get_vocab_size(true);
        let config_path = dir.join("tokenizer_config.json");
        let config_name = config_path.display().to_string();
        let config: serde_json::Value = match std::fs::read(&config_path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map_err(|e| Error::Model(FormatError::new(&config_name, format!("not JSON: {e}"))))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => serde_json::Value::Null,
            Err(e) => return Err(Error::Model(FormatError::new(&config_name, format!("cannot read: {e}")))),
        };
        let bad = |what: String| Error::Model(FormatError::new(&config_name, what));
        // A special token is written as its text or as an added token's object.
        let token_id = |key: &str| -> Result<Option<u32>> {
            let text = match &config[key] {
                serde_json::Value::String(s) => s.as_str(),
                serde_json::Value::Object(o) => match o.get("content").and_then(|c| c.as_str()) {
                    Some(s) => s,
                    None => return Err(bad(format!("{key} has no \"content\""))),
                },
                serde_json::Value::Null => return Ok(None),
                other => return Err(bad(format!("{key} is {other}, not a token"))),
            };
            match inner.token_to_id(text) {
                Some(id) => Ok(Some(id)),
                None => Err(bad(format!("{key} is {text:?}, which tokenizer.json does not hold"))),
            }
        };
        let bos = token_id("bos_token")?;
        let mut stops: Vec<u32> = token_id("eos_token")?.into_iter().collect();
        for &s in extra_stops {
            if s as usize >= vocab {
                return Err(Error::Model(FormatError::new(
                    dir.join("config.json").display().to_string(),
                    format!("eos_token_id {s} is past the vocabulary of {vocab}"),
                )));
            }
            if !stops.contains(&s) {
                stops.push(s);
            }
        }
        let template = match std::fs::read_to_string(dir.join("chat_template.jinja")) {
            Ok(t) => Some(t),
            Err(_) => match &config["chat_template"] {
                serde_json::Value::String(s) => Some(s.clone()),
                // Several named templates: the default one.
                serde_json::Value::Array(named) => named
                    .iter()
                    .find(|t| t["name"] == "default")
                    .and_then(|t| t["template"].as_str())
                    .map(str::to_string),
                _ => None,
            },
        };
        let prompt_specials = match config["add_bos_token"].as_bool() {
            Some(true) => PromptSpecials::Bos,
            Some(false) | None => PromptSpecials::PostProcessor,
        };
        Ok(Self { inner, vocab, bos, stops, prompt_specials, template })
    }

    /// The tokenizer as a Hugging Face `tokenizer.json` (what `tokenizers` reads back, and what
    /// [`Tokenizer::from_hf_dir`] loads).
    pub fn to_hf_json(&self) -> Result<String> {
        self.inner.to_string(true).map_err(|e| Error::InvalidArgument(format!("writing tokenizer.json: {e}")))
    }

    /// The ids of a prompt `text`, with the special tokens the model's tokenizer adds to one
    /// (BOS for most GGUF files; whatever `tokenizer.json`'s post-processor adds, or BOS where
    /// `tokenizer_config.json` says `add_bos_token`). A chat template's output already holds
    /// its special tokens: encode it with [`Tokenizer::encode`].
    pub fn encode_prompt(&self, text: &str) -> Result<Vec<u32>> {
        match self.prompt_specials {
            PromptSpecials::Bos => {
                let mut ids = self.encode(text)?;
                if ids.first() != self.bos.as_ref() {
                    ids.splice(0..0, self.bos);
                }
                Ok(ids)
            }
            PromptSpecials::Nothing => self.encode(text),
            PromptSpecials::PostProcessor => {
                let e = self
                    .inner
                    .encode(text, true)
                    .map_err(|e| Error::InvalidArgument(format!("tokenizing: {e}")))?;
                Ok(e.get_ids().to_vec())
            }
        }
    }

    /// Tokens in the vocabulary.
    pub fn vocab(&self) -> usize {
        self.vocab
    }

    /// The beginning-of-sequence token, if the model has one.
    pub fn bos(&self) -> Option<u32> {
        self.bos
    }

    /// The end-of-sequence token: generation stops there.
    pub fn eos(&self) -> Option<u32> {
        self.stops.first().copied()
    }

    /// Every token generation stops at (the end-of-sequence token first).
    pub fn stops(&self) -> &[u32] {
        &self.stops
    }

    /// Whether generation stops at `id`.
    pub fn is_stop(&self, id: u32) -> bool {
        self.stops.contains(&id)
    }

    /// The ids of `text` (control tokens written in it, such as `<|im_start|>`, are one id each).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let e =
            self.inner.encode(text, false).map_err(|e| Error::InvalidArgument(format!("tokenizing: {e}")))?;
        Ok(e.get_ids().to_vec())
    }

    /// The text of `ids` (control tokens included). Ids past the vocabulary are an error.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        if let Some(&bad) = ids.iter().find(|&&i| i as usize >= self.vocab) {
            return Err(Error::IndexOutOfRange {
                what: "token id",
                index: bad as usize,
                len: self.vocab,
                of: "tokens in the vocabulary",
            });
        }
        self.inner.decode(ids, false).map_err(|e| Error::InvalidArgument(format!("detokenizing: {e}")))
    }

    /// The prompt the model's chat template makes of `messages`, ending where the assistant's
    /// answer begins (`add_generation_prompt`); an error where the file has no template.
    pub fn chat_prompt(&self, messages: &[Message]) -> Result<String> {
        let template = self.template.as_deref().ok_or_else(|| {
            Error::Unsupported("the model file has no chat template (tokenizer.chat_template)".into())
        })?;
        let mut env = minijinja::Environment::new();
        env.add_template("chat", template)
            .map_err(|e| Error::InvalidArgument(format!("the chat template: {e}")))?;
        let messages: Vec<_> =
            messages.iter().map(|m| serde_json::json!({ "role": m.role, "content": m.content })).collect();
        let ctx = minijinja::context! {
            messages => messages,
            add_generation_prompt => true,
            bos_token => self.bos.map(|b| self.inner.id_to_token(b).unwrap_or_default()).unwrap_or_default(),
            eos_token => self.eos().map(|e| self.inner.id_to_token(e).unwrap_or_default()).unwrap_or_default(),
        };
        let chat = env
            .get_template("chat")
            .map_err(|e| Error::InvalidArgument(format!("the chat template: {e}")))?;
        chat.render(ctx).map_err(|e| Error::InvalidArgument(format!("rendering the chat template: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokenizers::{OffsetReferential, OffsetType, PreTokenizedString, PreTokenizer};

    fn pieces(pre: &str, text: &str) -> Vec<String> {
        let p = pre_tokenizer(pre).unwrap();
        let mut s = PreTokenizedString::from(text);
        p.pre_tokenize(&mut s).unwrap();
        s.get_splits(OffsetReferential::Original, OffsetType::Byte)
            .into_iter()
            .map(|(w, _, _)| w.to_string())
            .collect()
    }

    /// How each named pre-tokenizer splits digits, words, spaces and newlines (byte-level: 'Ġ'
    /// is a space, 'Ċ' a newline), as llama.cpp's regexes for the same names do.
    #[test]
    fn pre_tokenizers_split_as_their_models_do() {
        assert_eq!(pieces("llama-bpe", "in 12345 ways"), ["in", "Ġ", "123", "45", "Ġways"]);
        assert_eq!(pieces("qwen2", "in 12345 ways"), ["in", "Ġ", "1", "2", "3", "4", "5", "Ġways"]);
        assert_eq!(pieces("qwen2", "I'M here\n\nok"), ["I", "'M", "Ġhere", "ĊĊ", "ok"]);
        assert_eq!(pieces("smollm", "a 2025"), ["a", "Ġ", "2", "0", "2", "5"]);
        assert_eq!(pieces("gpt2", "a 2025"), ["a", "Ġ2025"]);
        assert!(pre_tokenizer("tekken").unwrap_err().contains("tekken"));
    }
}
