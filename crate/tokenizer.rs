//! Tokenizers: Hugging Face `tokenizer.json` as is, and llama2.c `tokenizer.bin` turned into the same
//! kind of `tokenizers::Tokenizer` (BPE, byte fallback, SentencePiece `▁` prefix), so both encode exactly
//! like llama2.c. Decoding for streaming is ours: each id maps to its raw bytes, and text is released
//! only in whole UTF-8 characters.

use serde_json::json;

use crate::error::{Error, Result, contain_panic};
use crate::loading::gguf::{self, Gguf, Value};
use crate::weights::MAX_VOCAB;

pub const BOS: u32 = 1;
pub const EOS: u32 = 2;

/// A tokenizer plus the byte table that streaming decoding needs.
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    /// The raw bytes each id stands for (`▁` as a space, `<0xHH>` as that byte, specials empty).
    piece_bytes: Vec<Vec<u8>>,
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
        let piece_bytes = (0..=max_id)
            .map(|id| {
                inner
                    .id_to_token(id)
                    .map(|p| piece_to_bytes(&p, id))
                    .unwrap_or_default()
            })
            .collect();
        Ok(Self { inner, piece_bytes })
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
        if model != "llama" {
            return Err(bad(format!(
                "is {model:?}; this engine reads GGUF vocabularies of SentencePiece kind \
                 (\"llama\"); give the model's tokenizer.json instead"
            )));
        }
        let list = |key: &str| {
            gguf.get(key)
                .and_then(Value::as_array)
                .ok_or_else(|| bad(format!("has no {key} list")))
        };
        let tokens = list("tokenizer.ggml.tokens")?;
        let scores = list("tokenizer.ggml.scores")?;
        if tokens.len() != scores.len() || tokens.len() > MAX_VOCAB {
            return Err(bad(format!(
                "has {} tokens and {} scores",
                tokens.len(),
                scores.len()
            )));
        }
        for (key, id) in [("bos", BOS), ("eos", EOS)] {
            let key = format!("tokenizer.ggml.{key}_token_id");
            if let Some(v) = gguf.get(&key)
                && *v != gguf::Value::Uint(id as u64)
                && *v != gguf::Value::Int(id as i64)
            {
                return Err(bad(format!("has {key} {v:?}; this engine needs {id}")));
            }
        }
        let pieces = tokens
            .iter()
            .zip(scores)
            .map(|(t, s)| match (t, s) {
                (Value::Str(t), Value::Float(s)) => Ok((t.replace('▁', " "), *s as f32)),
                _ => Err(bad("has a token that is not a string with a score".into())),
            })
            .collect::<Result<Vec<_>>>()?;
        if pieces.len() < 259 {
            return Err(bad(format!(
                "has {} tokens; a SentencePiece vocabulary has 3 specials and 256 bytes",
                pieces.len()
            )));
        }
        Self::from_pieces(pieces, "the GGUF tokenizer")
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
        Ok(Self { inner, piece_bytes })
    }

    /// One past the largest id this tokenizer can produce.
    pub fn vocab_size(&self) -> usize {
        self.piece_bytes.len()
    }

    /// Encode with BOS first, as llama2.c's `encode(text, bos=1, eos=0)`.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let encoding = library("cannot encode the prompt", || self.inner.encode(text, true))?;
        let mut ids = encoding.get_ids().to_vec();
        // A tokenizer.json without a post-processor adds no BOS; the model expects one.
        if ids.first() != Some(&BOS) {
            ids.insert(0, BOS);
        }
        Ok(ids)
    }

    /// The raw bytes of one id (empty for specials and unknown ids).
    pub fn piece_bytes(&self, id: u32) -> &[u8] {
        self.piece_bytes.get(id as usize).map_or(&[], Vec::as_slice)
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
        if prev == Some(BOS) && bytes.first() == Some(&b' ') {
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

/// The names of ids 0, 1, 2 in every llama2.c vocabulary.
fn special_name(id: usize) -> Option<&'static str> {
    ["<unk>", "<s>", "</s>"].get(id).copied()
}

fn piece_to_bytes(piece: &str, id: u32) -> Vec<u8> {
    if id <= EOS {
        return Vec::new();
    }
    if let Some(byte) = byte_token(piece) {
        return vec![byte];
    }
    piece.replace('▁', " ").into_bytes()
}

/// `<0xHH>` pieces stand for one raw byte.
fn byte_token(piece: &str) -> Option<u8> {
    let hex = piece.strip_prefix("<0x")?.strip_suffix('>')?;
    if hex.len() != 2 {
        return None;
    }
    u8::from_str_radix(hex, 16).ok()
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
    let mergeable = |id: usize| id > EOS as usize && byte_token(&names[id]).is_none();
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
    let special = |id: usize, content: &str| {
        json!({"id": id, "content": content, "single_word": false, "lstrip": false,
               "rstrip": false, "normalized": false, "special": true})
    };
    json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": [special(0, "<unk>"), special(1, "<s>"), special(2, "</s>")],
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "▁"},
            {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
        "pre_tokenizer": null,
        "post_processor": {"type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": "<s>", "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        "model": {"type": "BPE", "dropout": null, "unk_token": "<unk>",
            "continuing_subword_prefix": null, "end_of_word_suffix": null,
            "fuse_unk": true, "byte_fallback": true, "ignore_merges": false,
            "vocab": vocab, "merges": merges}
    })
}
