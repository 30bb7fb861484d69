//! A model's tokenizer and chat template, as its GGUF file carries them: a byte-level BPE
//! vocabulary with its merges (`tokenizer.ggml.model = gpt2`), built into Hugging Face's
//! `tokenizers` with the pre-tokenizer the file names (`tokenizer.ggml.pre`), its control
//! tokens as special tokens, and the Jinja chat template rendered by `minijinja`.

use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::AddedToken;

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
    eos: Option<u32>,
    template: Option<String>,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("vocab", &self.vocab)
            .field("bos", &self.bos)
            .field("eos", &self.eos)
            .finish()
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
        let byte_level = ByteLevel::new(false, true, true);
        // llama.cpp's pre-tokenizer names (llama-vocab.cpp) as Hugging Face's tokenizer.json
        // spells the same splits.
        let pre: PreTokenizerWrapper = match file.optional_str("tokenizer.ggml.pre")?.unwrap_or("gpt2") {
            "gpt2" | "default" => byte_level.into(),
            "smollm" => Sequence::new(vec![Digits::new(true).into(), byte_level.into()]).into(),
            other => {
                return Err(bad(format!(
                    "tokenizer.ggml.pre is {other:?}: known pre-tokenizers are gpt2, default and smollm"
                )))
            }
        };
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
        Ok(Self {
            inner,
            vocab: tokens.len(),
            bos: id("tokenizer.ggml.bos_token_id")?,
            eos: id("tokenizer.ggml.eos_token_id")?,
            template: file.optional_str("tokenizer.chat_template")?.map(str::to_string),
        })
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
        self.eos
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
            eos_token => self.eos.map(|e| self.inner.id_to_token(e).unwrap_or_default()).unwrap_or_default(),
        };
        let chat = env
            .get_template("chat")
            .map_err(|e| Error::InvalidArgument(format!("the chat template: {e}")))?;
        chat.render(ctx).map_err(|e| Error::InvalidArgument(format!("rendering the chat template: {e}")))
    }
}
