//! Tokenizers: Hugging Face `tokenizer.json` as is, and llama2.c `tokenizer.bin` turned into the same
//! kind of `tokenizers::Tokenizer` (BPE, byte fallback, SentencePiece `▁` prefix), so both encode exactly
//! like llama2.c. A GGUF's own vocabulary becomes one too: SentencePiece (`llama`) like tokenizer.bin,
//! and byte-level BPE (`gpt2`: GPT-2, StarCoder, SmolLM2) from its tokens and merges.
//!
//! Decoding for streaming is ours: each id maps to its raw bytes (`<0xHH>` pieces, or GPT-2's
//! byte-to-character table undone), and text is released only in whole UTF-8 characters.
//!
//! Each tokenizer also says which ids start and end a text ([`Specials`]) and, for chat models
//! whose GGUF carries a ChatML template, how to wrap a prompt as a user's turn ([`ChatTemplate`]).

use serde_json::json;

use crate::error::{Error, Result, contain_panic};
pub use crate::loading::chat::ChatTemplate;
use crate::loading::chat::{END_MARKERS, stop_ids};
use crate::loading::gguf::{Gguf, Value};
use crate::loading::spm::{self, token_types};
use crate::loading::tokenizer_json::{
    GGUF_BYTE_LEVEL, GGUF_BYTES_ONLY, GGUF_DIGITS, GGUF_QWEN_LLAMA3_SPLIT, GGUF_TOKENIZER_JSON,
    LLAMA2C_TOKENIZER_JSON,
};
use crate::model::config::MAX_VOCAB;

/// SentencePiece's (llama2.c's) begin- and end-of-sequence ids.
pub const BOS: u32 = 1;
pub const EOS: u32 = 2;

/// A tokenizer plus the byte table that streaming decoding needs.
#[derive(Clone)]
pub struct Tokenizer {
    inner: Inner,
    /// The raw bytes each id stands for (`▁` as a space, `<0xHH>` as that byte, specials empty).
    piece_bytes: Vec<Vec<u8>>,
    pub specials: Specials,
}

/// What encodes: the tokenizers crate, or llama.cpp's SentencePiece algorithm for a GGUF's
/// SentencePiece vocabulary ([`spm`]).
#[derive(Clone)]
enum Inner {
    Hf(Box<tokenizers::Tokenizer>),
    Spm(spm::Spm),
}

/// The ids with a meaning beyond their text.
#[derive(Debug, Clone, PartialEq)]
pub struct Specials {
    /// The id that starts a text, if the vocabulary has one.
    pub bos: Option<u32>,
    /// Whether every prompt starts with `bos` (SentencePiece models: yes; GPT-2-style: no).
    pub add_bos: bool,
    /// Ids that end a generation when the model picks them.
    pub stops: Vec<u32>,
    /// llama2.c prints the first piece after BOS without its leading space (SentencePiece only).
    pub strip_space_after_bos: bool,
    /// How a chat model wants a user's message wrapped, if its file says (or `--chat-template`).
    pub chat: Option<ChatTemplate>,
    /// The file's chat template, described, when it is not one we follow (prompts then go as
    /// they are).
    pub unrecognized_chat: Option<String>,
}

impl Specials {
    /// SentencePiece / llama2.c: BOS 1 starts every prompt; EOS 2 ends, and so does BOS (llama2.c
    /// treats a new BOS as the end of a story).
    fn sentencepiece() -> Self {
        Self {
            bos: Some(BOS),
            add_bos: true,
            stops: vec![EOS, BOS],
            strip_space_after_bos: true,
            chat: None,
            unrecognized_chat: None,
        }
    }
}

impl Tokenizer {
    /// Load either form, telling them apart by their first byte (`{` for JSON).
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        match bytes.iter().find(|b| !b.is_ascii_whitespace()) {
            Some(b'{') => Self::from_json(bytes),
            _ => Self::from_llama2c(bytes),
        }
    }

    /// A Hugging Face `tokenizer.json`.
    pub fn from_json(bytes: &[u8]) -> Result<Self> {
        // Syntax first, strings decoded: the tokenizers crate panics (rather than erring) on broken
        // JSON inside a decoder, a bad escape included (found by fuzzing; `tokenizers` 0.22.2,
        // decoders/mod.rs:90). Parsing into a `Value` checks every escape, which skipping does not.
        serde_json::from_slice::<serde_json::Value>(bytes)
            .map_err(|e| Error::BadTokenizer(format!("tokenizer.json is not valid JSON: {e}")))?;
        let inner = library("tokenizer.json does not load", || {
            tokenizers::Tokenizer::from_bytes(bytes)
        })?;
        // The vocabulary's size is one past its largest id, not its number of entries: a file with
        // 512 entries whose ids skip to 100000 can produce id 100000.
        let max_id = inner.get_vocab(true).into_values().max().unwrap_or(0);
        if max_id as usize >= MAX_VOCAB {
            return Err(Error::BadTokenizer(format!(
                "tokenizer.json has a token with id {max_id}; no vocabulary this engine runs \
                 goes past {MAX_VOCAB}"
            )));
        }
        // A byte-level decoder (GPT-2, SmolLM2, Llama 3) marks a byte-level vocabulary: its pieces
        // spell bytes through GPT-2's table, and it has no SentencePiece BOS/EOS convention.
        let byte_level = matches!(
            inner.get_decoder(),
            Some(tokenizers::DecoderWrapper::ByteLevel(_))
        );
        let added = inner.get_added_tokens_decoder();
        let special = |id: u32| added.get(&id).is_some_and(|t| t.special);
        let piece_bytes = (0..=max_id)
            .map(|id| match inner.id_to_token(id) {
                Some(_) if byte_level && special(id) => Vec::new(),
                Some(p) if byte_level => byte_level_bytes(&p),
                Some(p) => piece_to_bytes(&p, id),
                None => Vec::new(),
            })
            .collect();
        let specials = if byte_level {
            let id = |name: &str| inner.token_to_id(name).filter(|&id| special(id));
            Specials {
                bos: None,
                add_bos: false,
                stops: END_MARKERS.iter().filter_map(|m| id(m)).collect(),
                strip_space_after_bos: false,
                chat: None,
                unrecognized_chat: None,
            }
        } else {
            Specials::sentencepiece()
        };
        Ok(Self {
            inner: Inner::Hf(Box::new(inner)),
            piece_bytes,
            specials,
        })
    }

    /// A llama2.c `tokenizer.bin`: `i32 max_token_length`, then per id `f32 score, i32 len, bytes`.
    pub fn from_llama2c(bytes: &[u8]) -> Result<Self> {
        Self::from_pieces(parse_llama2c(bytes)?, "tokenizer.bin")
    }

    /// The tokenizer inside a GGUF file (`tokenizer.ggml.*`): a `llama` (SentencePiece) vocabulary
    /// with scores, converted like a llama2.c `tokenizer.bin`.
    pub fn from_gguf(gguf: &Gguf) -> Result<Self> {
        let bad = |m: String| Error::BadTokenizer(format!("the GGUF file's tokenizer {m}"));
        let model = gguf
            .get("tokenizer.ggml.model")
            .and_then(Value::as_str)
            .ok_or_else(|| {
                bad("is missing (no tokenizer.ggml.model); give a tokenizer file".into())
            })?;
        match model {
            "llama" => {}
            "gpt2" => return Self::from_gguf_byte_level(gguf),
            _ => {
                return Err(bad(format!(
                    "is {model:?}; this engine reads GGUF vocabularies of SentencePiece kind \
                     (\"llama\") and byte-level BPE (\"gpt2\"); give the model's tokenizer.json \
                     instead"
                )));
            }
        }
        let list = |key: &str| {
            gguf.get(key)
                .and_then(Value::as_array)
                .ok_or_else(|| bad(format!("has no {key} list")))
        };
        let tokens = list("tokenizer.ggml.tokens")?
            .iter()
            .map(|t| {
                t.as_str()
                    .ok_or_else(|| bad("has a token that is not text".into()))
            })
            .collect::<Result<Vec<&str>>>()?;
        let scores = list("tokenizer.ggml.scores")?
            .iter()
            .map(|s| match s {
                Value::Float(s) => Ok(*s as f32),
                _ => Err(bad("has a score that is not a number".into())),
            })
            .collect::<Result<Vec<f32>>>()?;
        if tokens.len() != scores.len() || tokens.len() > MAX_VOCAB {
            return Err(bad(format!(
                "has {} tokens and {} scores",
                tokens.len(),
                scores.len()
            )));
        }
        let types = token_types(gguf, tokens.len())?;
        let bytes = tokens
            .iter()
            .zip(&types)
            .filter(|(t, k)| **k == spm::BYTE && spm::byte_token(t).is_some())
            .count();
        if bytes < 256 {
            return Err(bad(format!(
                "has {bytes} byte tokens; a SentencePiece vocabulary falls back to all 256"
            )));
        }
        let id_of = |key: &str| token_id(gguf, key, tokens.len());
        let bos = id_of("tokenizer.ggml.bos_token_id")?.or(Some(BOS));
        let stops = stop_ids(
            &[
                id_of("tokenizer.ggml.eos_token_id")?.or(Some(EOS)),
                id_of("tokenizer.ggml.eot_token_id")?,
            ],
            &tokens,
            &types,
        );
        // llama.cpp adds the space prefix and BOS to SentencePiece vocabularies unless told not to.
        let flag = |key: &str| !matches!(gguf.get(key), Some(Value::Bool(false)));
        let add_space_prefix = flag("tokenizer.ggml.add_space_prefix");
        let piece_bytes = tokens
            .iter()
            .zip(&types)
            .map(|(t, kind)| match *kind {
                spm::CONTROL | spm::UNKNOWN => Vec::new(),
                spm::BYTE => spm::byte_token(t).map_or_else(Vec::new, |b| vec![b]),
                spm::USER_DEFINED => t.as_bytes().to_vec(),
                _ => t.replace('▁', " ").into_bytes(),
            })
            .collect();
        let has_token = |name: &str| tokens.contains(&name);
        let (chat, unrecognized_chat) = ChatTemplate::from_gguf(gguf, has_token).split();
        Ok(Self {
            inner: Inner::Spm(spm::Spm::new(&tokens, scores, &types, add_space_prefix)),
            piece_bytes,
            specials: Specials {
                bos,
                add_bos: flag("tokenizer.ggml.add_bos_token"),
                stops,
                strip_space_after_bos: add_space_prefix,
                chat,
                unrecognized_chat,
            },
        })
    }

    /// A SentencePiece-style vocabulary of `(piece, score)` by id (ids 0, 1, 2 are `<unk>`, BOS,
    /// EOS; spaces as ' '), as a BPE `tokenizers::Tokenizer`.
    fn from_pieces(pieces: Vec<(String, f32)>, what: &str) -> Result<Self> {
        let json = llama2c_to_tokenizer_json(&pieces);
        let inner = library(&format!("{what} does not convert"), || {
            tokenizers::Tokenizer::from_bytes(json.to_string().as_bytes())
        })?;
        let piece_bytes = pieces
            .iter()
            .enumerate()
            .map(|(id, (p, _))| {
                piece_to_bytes(&special_name(id).unwrap_or(p).replace(' ', "▁"), id as u32)
            })
            .collect();
        Ok(Self {
            inner: Inner::Hf(Box::new(inner)),
            piece_bytes,
            specials: Specials::sentencepiece(),
        })
    }

    /// A GGUF byte-level BPE vocabulary (`tokenizer.ggml.model` = `gpt2`): tokens spelled in
    /// GPT-2's byte-to-character table, merges as "left right", token types (3 control, 4
    /// user-defined), and `tokenizer.ggml.pre` naming the pre-tokenizer's split rules, as llama.cpp
    /// reads them. Only the rules whose test vectors we pass are accepted.
    fn from_gguf_byte_level(gguf: &Gguf) -> Result<Self> {
        let bad = |m: String| Error::BadTokenizer(format!("the GGUF file's tokenizer {m}"));
        let strings = |key: &str| -> Result<Vec<&str>> {
            gguf.get(key)
                .and_then(Value::as_array)
                .ok_or_else(|| bad(format!("has no {key} list")))?
                .iter()
                .map(|v| {
                    v.as_str()
                        .ok_or_else(|| bad(format!("has a {key} entry that is not text")))
                })
                .collect()
        };
        let tokens = strings("tokenizer.ggml.tokens")?;
        let merges = strings("tokenizer.ggml.merges")?;
        if tokens.is_empty() || tokens.len() > MAX_VOCAB {
            return Err(bad(format!("has {} tokens", tokens.len())));
        }
        let types = token_types(gguf, tokens.len())?;
        let pre = gguf
            .get("tokenizer.ggml.pre")
            .and_then(Value::as_str)
            .unwrap_or("(none)");
        // llama.cpp's split rules for these names (llama-vocab.cpp): GPT-2's regex, for the
        // StarCoder family each digit on its own first, and Qwen's and Llama 3's regexes (digits
        // alone, or in threes). The same as these models' tokenizer.json. Llama 3 also takes a
        // piece that is a whole token as it is, before any merge (llama.cpp's `ignore_merges`).
        let byte_level = template(GGUF_BYTE_LEVEL);
        let split = |digits: &str| {
            let regex = GGUF_QWEN_LLAMA3_SPLIT.replace("{digits}", digits);
            json!({"type": "Sequence", "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": false},
                template(GGUF_BYTES_ONLY)]})
        };
        let (pre_tokenizer, ignore_merges) = match pre {
            "gpt-2" => (byte_level, false),
            "starcoder" | "smollm" | "refact" => (
                json!({"type": "Sequence", "pretokenizers": [template(GGUF_DIGITS), byte_level]}),
                false,
            ),
            "qwen2" | "deepseek-r1-qwen" => (split(""), false),
            "llama-bpe" | "llama3" | "llama-v3" => (split("{1,3}"), true),
            other => {
                return Err(bad(format!(
                    "splits text by rules {other:?} (tokenizer.ggml.pre); this engine follows \
                     \"gpt-2\", \"starcoder\", \"smollm\", \"qwen2\" and \"llama-bpe\"; give the \
                     model's tokenizer.json instead"
                )));
            }
        };
        let mut vocab = serde_json::Map::new();
        for (id, token) in tokens.iter().enumerate() {
            vocab.entry(token.to_string()).or_insert(json!(id));
        }
        let merges = merges
            .iter()
            .map(|m| {
                m.split_once(' ')
                    .map(|(l, r)| json!([l, r]))
                    .ok_or_else(|| bad(format!("has a merge {m:?} that is not two pieces")))
            })
            .collect::<Result<Vec<_>>>()?;
        // Control (3) and user-defined (4) tokens are matched whole in a prompt; control tokens
        // print nothing.
        let added: Vec<_> = tokens
            .iter()
            .zip(&types)
            .enumerate()
            .filter(|(_, (_, t))| matches!(t, 3 | 4))
            .map(|(id, (token, t))| {
                json!({"id": id, "content": token, "single_word": false, "lstrip": false,
                       "rstrip": false, "normalized": false, "special": *t == 3})
            })
            .collect();
        let mut json = template(GGUF_TOKENIZER_JSON);
        json["added_tokens"] = serde_json::Value::Array(added);
        json["pre_tokenizer"] = pre_tokenizer;
        json["model"]["vocab"] = serde_json::Value::Object(vocab);
        json["model"]["merges"] = serde_json::Value::Array(merges);
        json["model"]["ignore_merges"] = json!(ignore_merges);
        let inner = library("the GGUF tokenizer does not convert", || {
            tokenizers::Tokenizer::from_bytes(json.to_string().as_bytes())
        })?;
        let piece_bytes = tokens
            .iter()
            .zip(&types)
            .map(|(token, t)| match t {
                3 => Vec::new(),
                4 => token.as_bytes().to_vec(),
                _ => byte_level_bytes(token),
            })
            .collect();
        let id_of = |key: &str| token_id(gguf, key, tokens.len());
        let bos = id_of("tokenizer.ggml.bos_token_id")?;
        let stops = stop_ids(
            &[
                id_of("tokenizer.ggml.eos_token_id")?,
                id_of("tokenizer.ggml.eot_token_id")?,
            ],
            &tokens,
            &types,
        );
        let has_token = |name: &str| tokens.contains(&name);
        let (chat, unrecognized_chat) = ChatTemplate::from_gguf(gguf, has_token).split();
        Ok(Self {
            inner: Inner::Hf(Box::new(inner)),
            piece_bytes,
            specials: Specials {
                bos,
                // As llama.cpp: the file's word, or by default BOS for Llama 3's rules only.
                add_bos: match gguf.get("tokenizer.ggml.add_bos_token") {
                    Some(Value::Bool(add)) => *add,
                    _ => ignore_merges,
                } && bos.is_some(),
                stops,
                strip_space_after_bos: false,
                chat,
                unrecognized_chat,
            },
        })
    }

    /// One past the largest id this tokenizer can produce.
    pub fn vocab_size(&self) -> usize {
        self.piece_bytes.len()
    }

    /// Encode with BOS first where the vocabulary wants it, as llama2.c's `encode(text, bos=1,
    /// eos=0)`. Never empty: a text that encodes to nothing in a vocabulary without BOS starts
    /// from its end-of-text token, as GPT-2 does.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let mut ids = self.tokens(text)?;
        // A tokenizer.json without a post-processor adds no BOS; the model expects one.
        if let Some(bos) = self.specials.bos.filter(|_| self.specials.add_bos)
            && ids.first() != Some(&bos)
        {
            ids.insert(0, bos);
        }
        if ids.is_empty() {
            match self.specials.bos.or(self.specials.stops.first().copied()) {
                Some(start) => ids.push(start),
                None => {
                    return Err(Error::BadPrompt(
                        "the prompt encodes to no tokens and this vocabulary has no start token; \
                         type some text"
                            .into(),
                    ));
                }
            }
        }
        Ok(ids)
    }

    /// The vocabulary's tokens for `text`, with nothing added (a SentencePiece tokenizer.json's
    /// post-processor may add its BOS).
    pub fn tokens(&self, text: &str) -> Result<Vec<u32>> {
        match &self.inner {
            Inner::Hf(inner) => {
                let encoding = library("cannot encode the prompt", || inner.encode(text, true))?;
                Ok(encoding.get_ids().to_vec())
            }
            Inner::Spm(spm) => Ok(spm.encode(text)),
        }
    }

    /// Wrap chat prompts in `template` from now on (`--chat-template`), in place of the file's
    /// own or none: each of its markers must be one token of this vocabulary, and its end of turn
    /// then ends a generation too.
    pub fn follow_chat(&mut self, template: ChatTemplate) -> Result<()> {
        let ids = template.marker_ids(|marker| self.tokens(marker))?;
        if let Some(&end) = ids.last()
            && !self.specials.stops.contains(&end)
        {
            self.specials.stops.push(end);
        }
        self.specials.chat = Some(template);
        self.specials.unrecognized_chat = None;
        Ok(())
    }

    /// Whether picking `id` ends a generation.
    pub fn is_stop(&self, id: u32) -> bool {
        self.specials.stops.contains(&id)
    }

    /// The raw bytes of one id (empty for specials and unknown ids).
    pub fn piece_bytes(&self, id: u32) -> &[u8] {
        self.piece_bytes.get(id as usize).map_or(&[], Vec::as_slice)
    }

    /// The first id whose bytes differ from `other`'s, if any, and one id's bytes as text.
    pub fn first_difference(&self, other: &Tokenizer) -> Option<u32> {
        (0..self.vocab_size() as u32).find(|&id| self.piece_bytes(id) != other.piece_bytes(id))
    }
    pub fn piece_text(&self, id: u32) -> String {
        String::from_utf8_lossy(self.piece_bytes(id)).into_owned()
    }

    /// Decode a whole sequence the way llama2.c prints it (the space after BOS dropped).
    pub fn decode(&self, ids: &[u32]) -> String {
        let mut stream = TextStream::default();
        let mut text = String::new();
        let mut prev = None;
        for &id in ids {
            text.push_str(&stream.push(self, prev, id));
            prev = Some(id);
        }
        text + &stream.finish()
    }
}

/// A GGUF's token id under `key` (`tokenizer.ggml.bos_token_id`, ...), checked to be one of its
/// `n` ids.
fn token_id(gguf: &Gguf, key: &str, n: usize) -> Result<Option<u32>> {
    match gguf.get(key) {
        None => Ok(None),
        Some(v) => match v.as_u64() {
            Some(id) if (id as usize) < n => Ok(Some(id as u32)),
            _ => Err(Error::BadTokenizer(format!(
                "the GGUF file's tokenizer has {key} {v:?}, not one of its {n} ids"
            ))),
        },
    }
}

/// Streaming detokenization: holds bytes back until they form whole UTF-8 characters, so a
/// character split over byte-fallback tokens is never emitted broken.
#[derive(Default, Debug)]
pub struct TextStream {
    pending: Vec<u8>,
}

impl TextStream {
    /// Add one token (`prev` is the token before it, for llama2.c's "no space after BOS" rule) and
    /// return whatever text is now complete.
    pub fn push(&mut self, tokenizer: &Tokenizer, prev: Option<u32>, id: u32) -> String {
        let mut bytes = tokenizer.piece_bytes(id);
        if tokenizer.specials.strip_space_after_bos
            && prev.is_some()
            && prev == tokenizer.specials.bos
            && bytes.first() == Some(&b' ')
        {
            bytes = &bytes[1..];
        }
        self.pending.extend_from_slice(bytes);
        self.take_complete()
    }

    /// Flush what is left at the end; bytes that never completed a character become U+FFFD.
    pub fn finish(&mut self) -> String {
        let text = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        text
    }

    fn take_complete(&mut self) -> String {
        let mut out = String::new();
        loop {
            match std::str::from_utf8(&self.pending) {
                Ok(s) => {
                    out.push_str(s);
                    self.pending.clear();
                    return out;
                }
                Err(e) => {
                    let good = e.valid_up_to();
                    out.push_str(std::str::from_utf8(&self.pending[..good]).unwrap());
                    match e.error_len() {
                        // An invalid sequence can never complete: replace it and go on.
                        Some(bad) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            self.pending.drain(..good + bad);
                        }
                        // An incomplete character at the end: keep it for the next token.
                        None => {
                            self.pending.drain(..good);
                            return out;
                        }
                    }
                }
            }
        }
    }
}

/// Call into the tokenizers crate: its error, or a panic it raised (natively; see
/// [`contain_panic`]), becomes one `BadTokenizer` sentence starting with `what`.
fn library<T, E: std::fmt::Display>(
    what: &str,
    f: impl FnOnce() -> std::result::Result<T, E>,
) -> Result<T> {
    match contain_panic(f) {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(Error::BadTokenizer(format!("{what}: {e}"))),
        Err(panic) => Err(Error::BadTokenizer(format!(
            "{what} (the tokenizers library panicked: {panic})"
        ))),
    }
}

/// A byte-level piece's bytes: GPT-2 spells each byte as one character, the printable ones as
/// themselves and the rest (controls, space, 127-160, 173) as U+0100 onwards in byte order. A
/// character outside that table stands for its own UTF-8.
fn byte_level_bytes(piece: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(piece.len());
    for c in piece.chars() {
        // The 68 unprintable bytes in order: 0-32, 127-160, 173.
        let byte = match c as u32 {
            b @ (33..=126 | 161..=172 | 174..=255) => Some(b),
            n @ 256..=288 => Some(n - 256),
            n @ 289..=322 => Some(n - 289 + 127),
            323 => Some(173),
            _ => None,
        };
        match byte {
            Some(b) => out.push(b as u8),
            None => out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
        }
    }
    out
}

/// The names of ids 0, 1, 2 in every llama2.c vocabulary.
fn special_name(id: usize) -> Option<&'static str> {
    ["<unk>", "<s>", "</s>"].get(id).copied()
}

fn piece_to_bytes(piece: &str, id: u32) -> Vec<u8> {
    if id <= EOS {
        return Vec::new();
    }
    if let Some(byte) = spm::byte_token(piece) {
        return vec![byte];
    }
    piece.replace('▁', " ").into_bytes()
}

/// Parse `tokenizer.bin` into `(piece, score)` by id, checking every length against the file.
fn parse_llama2c(bytes: &[u8]) -> Result<Vec<(String, f32)>> {
    let bad = |m: &str| Error::BadTokenizer(format!("not a llama2.c tokenizer.bin: {m}"));
    let mut rest = bytes;
    let mut take = |n: usize| -> Result<&[u8]> {
        if rest.len() < n {
            return Err(bad("truncated"));
        }
        let (chunk, tail) = rest.split_at(n);
        rest = tail;
        Ok(chunk)
    };
    let max_len = i32::from_le_bytes(take(4)?.try_into().unwrap());
    if !(1..=1024).contains(&max_len) {
        return Err(bad(&format!("max_token_length {max_len} is absurd")));
    }
    let mut pieces = Vec::new();
    let mut left = bytes.len() - 4;
    while left > 0 {
        let score = f32::from_le_bytes(take(4)?.try_into().unwrap());
        let len = i32::from_le_bytes(take(4)?.try_into().unwrap());
        if len < 0 || len > max_len {
            return Err(bad(&format!("token {} has length {len}", pieces.len())));
        }
        let text = String::from_utf8_lossy(take(len as usize)?).into_owned();
        left = left.saturating_sub(8 + len as usize);
        pieces.push((text, score));
    }
    if pieces.len() < 259 {
        return Err(bad(&format!(
            "only {} tokens; a llama2.c vocabulary has 3 specials and 256 bytes",
            pieces.len()
        )));
    }
    Ok(pieces)
}

/// The same tokenizer as a `tokenizer.json` document: vocabulary and merges from the pieces and
/// scores (a merge ranks by its merged piece's score, as SentencePiece's BPE does), and the
/// normalizer, post-processor and decoder of Llama-2's own `tokenizer.json`.
fn llama2c_to_tokenizer_json(pieces: &[(String, f32)]) -> serde_json::Value {
    let names: Vec<String> = pieces
        .iter()
        .enumerate()
        .map(|(id, (p, _))| special_name(id).map_or_else(|| p.replace(' ', "▁"), str::to_string))
        .collect();
    let mut vocab = serde_json::Map::new();
    let mut index = std::collections::HashMap::new();
    for (id, name) in names.iter().enumerate() {
        if !index.contains_key(name.as_str()) {
            index.insert(name.as_str(), id);
            vocab.insert(name.clone(), json!(id));
        }
    }
    let mergeable = |id: usize| id > EOS as usize && spm::byte_token(&names[id]).is_none();
    let mut by_score: Vec<usize> = (0..names.len()).filter(|&id| mergeable(id)).collect();
    by_score.sort_by(|&a, &b| pieces[b].1.total_cmp(&pieces[a].1));
    let mut merges = Vec::new();
    for id in by_score {
        let name = &names[id];
        let mut splits: Vec<(usize, usize, usize)> = name
            .char_indices()
            .skip(1)
            .filter_map(|(i, _)| {
                let (l, r) = name.split_at(i);
                Some((*index.get(l)?, *index.get(r)?, i))
            })
            .filter(|&(l, r, _)| mergeable(l) && mergeable(r))
            .collect();
        splits.sort();
        for (_, _, i) in splits {
            let (l, r) = name.split_at(i);
            merges.push(json!([l, r]));
        }
    }
    let mut json = template(LLAMA2C_TOKENIZER_JSON);
    json["model"]["vocab"] = serde_json::Value::Object(vocab);
    json["model"]["merges"] = serde_json::Value::Array(merges);
    json
}

/// A JSON document written as text (a template below). Kept as text and parsed rather than written
/// as `json!` literals, which compiled to about 16 kB of the page's wasm for the llama2.c one alone
/// (twiggy); from bytes, as every JSON this crate reads, so the wasm holds one JSON reader.
fn template(text: &str) -> serde_json::Value {
    serde_json::from_slice(text.as_bytes()).expect("the template is JSON")
}
