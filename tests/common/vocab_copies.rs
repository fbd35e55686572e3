//! llama.cpp's byte-level BPE vocabulary GGUFs (`models/gguf-vocab/`) as we have them.
//!
//! Those two files arrived with every byte that was not valid UTF-8 replaced by U+FFFD (the bytes
//! EF BF BD): the text (every token, every merge, every key) is intact, but a number holding a
//! byte of 0x80 or more is not. In `ggml-vocab-gpt-2.gguf` that is 9 bytes: the token and merge
//! counts (50257, 50000), the BOS/EOS id 50256 and a float the tokenizer does not use; in
//! `ggml-vocab-starcoder.gguf`, 29 places, among them the lengths of 24 tokens of 128 bytes or
//! more. One replacement may stand for up to 3 bytes (E8 BE before a 00 became one). llama.cpp's
//! upstream copies (`models/`, commit c392e5094) differ from ours in exactly those places: the
//! tokens and merges read here equal theirs, checked once by hand with the `gguf` Python package
//! on the upstream files. This reads such a file by GGUF's grammar, counting EF BF BD as one
//! unknown byte: an array whose count is unknown is read up to the next key (numbers: as many as
//! the array before it), and a scalar whose value is unknown is left out. An intact file reads
//! the same way, whole.
#![allow(dead_code)]

use std::collections::HashMap;

use tokenometer::loading::gguf::{Gguf, Value};

const LOST: [u8; 3] = [0xEF, 0xBF, 0xBD];

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
    /// The length of the last array read, for a numeric array whose count was lost.
    last_len: usize,
    /// `general.architecture`, once read: its keys start with it.
    arch: String,
}

impl Reader<'_> {
    /// Where `n` bytes of a number starting at `pos` may end: one place when none was lost; one
    /// per way of reading each EF BF BD as 1, 2 or 3 lost bytes otherwise (a replacement stands
    /// for the longest broken start of a character: E8 BE before a 00 is one).
    fn ends(&self, pos: usize, n: usize) -> Vec<usize> {
        if n == 0 {
            return vec![pos];
        }
        if self.bytes[pos..].starts_with(&LOST) {
            (1..=n.min(3))
                .flat_map(|w| self.ends(pos + 3, n - w))
                .collect()
        } else {
            self.ends(pos + 1, n - 1)
        }
    }

    /// `n` bytes of a number, or `None` when any was lost; then the reader stands at the first
    /// place it could end where `next` holds of what follows.
    fn number(&mut self, n: usize, next: impl Fn(&Self, usize) -> bool) -> Option<Vec<u8>> {
        let ends = self.ends(self.at, n);
        let end = *ends
            .iter()
            .find(|&&end| ends.len() == 1 || next(self, end))
            .expect("a place where the damaged number ends");
        let bytes = &self.bytes[self.at..end];
        self.at = end;
        (bytes.len() == n).then(|| bytes.to_vec())
    }

    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(
            self.number(4, |_, _| true)?.try_into().unwrap(),
        ))
    }

    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(
            self.number(8, |_, _| true)?.try_into().unwrap(),
        ))
    }

    fn length_at(&self, pos: usize) -> Option<usize> {
        let bytes = self.bytes.get(pos..pos + 8)?;
        Some(u64::from_le_bytes(bytes.try_into().unwrap()) as usize)
    }

    /// Whether a string of 1 to 255 bytes of text starts at `pos`.
    fn string_at(&self, pos: usize) -> bool {
        self.length_at(pos).is_some_and(|len| {
            (1..256).contains(&len)
                && self
                    .bytes
                    .get(pos + 8..pos + 8 + len)
                    .is_some_and(|t| std::str::from_utf8(t).is_ok())
        })
    }

    /// Whether a metadata key (or the end of the file, or its zero padding) starts at `pos`.
    fn key_at(&self, pos: usize) -> bool {
        let rest = &self.bytes[pos.min(self.bytes.len())..];
        if rest.len() < 8 || rest.iter().all(|&b| b == 0) {
            return true;
        }
        // A key is one of GGUF's names (the architecture's own, `general.`, `tokenizer.`)
        // followed by a value type (0 to 12).
        self.length_at(pos).is_some_and(|len| {
            let arch = format!("{}.", self.arch);
            (8..200).contains(&len)
                && rest.len() >= 8 + len + 4
                && ["general.", "tokenizer.", arch.as_str()]
                    .iter()
                    .any(|prefix| rest[8..8 + len].starts_with(prefix.as_bytes()))
                && rest[8 + len] < 13
                && rest[9 + len..8 + len + 4] == [0, 0, 0]
        })
    }

    /// A string. A length of 128 bytes or more lost its low byte; it is the one value of that
    /// byte for which the text is UTF-8 and another string (or a key) follows.
    fn string(&mut self) -> String {
        let len = match self.length_at(self.at) {
            Some(len)
                if !self.bytes[self.at..self.at + 8]
                    .windows(3)
                    .any(|w| w == LOST) =>
            {
                self.at += 8;
                len
            }
            _ => {
                assert!(self.bytes[self.at..].starts_with(&LOST));
                self.at += 3 + 7;
                (128..256)
                    .find(|&len| {
                        let end = self.at + len;
                        std::str::from_utf8(&self.bytes[self.at..end]).is_ok()
                            && (self.string_at(end) || self.key_at(end))
                    })
                    .expect("a long string's length")
            }
        };
        let text = std::str::from_utf8(&self.bytes[self.at..self.at + len]).expect("text");
        self.at += len;
        text.to_string()
    }

    /// A value of GGUF type `kind`, or `None` when a byte of it was lost.
    fn value(&mut self, kind: u32) -> Option<Value> {
        // A scalar is followed by the next key.
        let mut int = |n: usize, signed: bool| -> Option<Value> {
            let mut b = self.number(n, Self::key_at)?;
            let negative = signed && b[n - 1] & 0x80 != 0;
            b.resize(8, if negative { 0xFF } else { 0 });
            let v = u64::from_le_bytes(b.try_into().unwrap());
            Some(if signed {
                Value::Int(v as i64)
            } else {
                Value::Uint(v)
            })
        };
        match kind {
            0 => int(1, false),
            1 => int(1, true),
            2 => int(2, false),
            3 => int(2, true),
            4 => int(4, false),
            5 => int(4, true),
            10 => int(8, false),
            11 => int(8, true),
            6 => Some(Value::Float(f32::from_le_bytes(
                self.number(4, Self::key_at)?.try_into().unwrap(),
            ) as f64)),
            12 => Some(Value::Float(f64::from_le_bytes(
                self.number(8, Self::key_at)?.try_into().unwrap(),
            ))),
            7 => Some(Value::Bool(self.number(1, Self::key_at)?[0] != 0)),
            8 => Some(Value::Str(self.string())),
            9 => {
                let inner = self.u32().expect("an array's element type");
                // An array's count is followed by its first element: a string, or (token types)
                // an i32 from 1 to 6.
                let first = move |r: &Self, pos: usize| match inner {
                    8 => r.string_at(pos),
                    _ => r
                        .bytes
                        .get(pos..pos + 4)
                        .is_some_and(|b| (1..=6).contains(&b[0]) && b[1..] == [0, 0, 0]),
                };
                let items = match self.number(8, first) {
                    Some(n) => {
                        let n = u64::from_le_bytes(n.try_into().unwrap());
                        (0..n)
                            .map(|_| self.value(inner))
                            .collect::<Option<Vec<_>>>()?
                    }
                    None if inner == 8 => {
                        let mut items = Vec::new();
                        while !self.key_at(self.at) {
                            items.push(Value::Str(self.string()));
                        }
                        items
                    }
                    None => (0..self.last_len)
                        .map(|_| self.value(inner))
                        .collect::<Option<Vec<_>>>()?,
                };
                self.last_len = items.len();
                Some(Value::Array(items))
            }
            other => panic!("GGUF value type {other}"),
        }
    }
}

/// The metadata of a vocabulary GGUF in `models/gguf-vocab/` (see the module doc).
pub fn read(bytes: &[u8]) -> Gguf {
    assert_eq!(&bytes[..4], b"GGUF");
    let mut r = Reader {
        bytes,
        at: 4,
        last_len: 0,
        arch: String::new(),
    };
    let version = r.u32().expect("version");
    let tensors = r.u64().expect("tensor count");
    assert_eq!(tensors, 0, "a vocabulary file has no tensors");
    let count = r.u64().expect("metadata count");
    let mut metadata = HashMap::new();
    for _ in 0..count {
        let key = r.string();
        let kind = r.u32().expect("a value type");
        if let Some(value) = r.value(kind) {
            if key == "general.architecture"
                && let Value::Str(arch) = &value
            {
                r.arch = arch.clone();
            }
            metadata.insert(key, value);
        }
    }
    Gguf {
        version,
        metadata,
        tensors: HashMap::new(),
    }
}

/// SmolLM2-Instruct's chat template (its tokenizer_config.json): ChatML with a default system turn.
pub const SMOLLM2_TEMPLATE: &str = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

/// The tokenizer metadata of a SmolLM2-like vocabulary made from StarCoder's (`starcoder`, read by
/// [`read`]): the same 49152 tokens and split rules, with ids 1 and 2 renamed to ChatML's
/// markers as SmolLM2's own vocabulary has them, BOS 1, EOS 2 and SmolLM2-Instruct's template.
/// Sorted by key, `tokenizer.*` only, ready to follow a model's metadata in a GGUF.
pub fn smollm2_like(mut starcoder: Gguf) -> Vec<(String, Value)> {
    let metadata = &mut starcoder.metadata;
    if let Some(Value::Array(tokens)) = metadata.get_mut("tokenizer.ggml.tokens") {
        tokens[1] = Value::Str("<|im_start|>".into());
        tokens[2] = Value::Str("<|im_end|>".into());
    }
    metadata.insert("tokenizer.ggml.bos_token_id".into(), Value::Uint(1));
    metadata.insert("tokenizer.ggml.eos_token_id".into(), Value::Uint(2));
    metadata.insert(
        "tokenizer.chat_template".into(),
        Value::Str(SMOLLM2_TEMPLATE.into()),
    );
    starcoder.into_tokenizer_metadata()
}
