//! A GGUF's SentencePiece vocabulary (`tokenizer.ggml.model` = `llama`: Llama 2, Gemma 3)
//! encoded the way llama.cpp encodes it (`llm_tokenizer_spm` in `llama-vocab.cpp`), so that prompt
//! ids equal llama.cpp's:
//!
//! 1. The text is split at every special token's text (control, user-defined and unknown types;
//!    the longest first, each occurrence left to right). Gemma's user-defined tokens include runs of
//!    newlines, spaces and tabs, which therefore never reach step 2.
//! 2. Each piece of plain text gets a leading space where the vocabulary adds one
//!    (`add_space_prefix`: Llama yes, Gemma no) and only after a start or a special token, its
//!    spaces become `▁`, and it starts as one symbol per character.
//! 3. Adjacent symbols whose joined text is a token merge, the pair whose token has the highest
//!    score first (the leftmost among equal scores), until no pair is a token.
//! 4. A symbol that is not a token (a character outside the vocabulary) becomes its bytes'
//!    `<0xHH>` tokens.
//!
//! The tokenizers crate's BPE, which the other vocabularies use, ranks merges by pair rather than by
//! the merged token's score, and builds a merge table with an entry per split of every token: for
//! Gemma's 262,144 tokens that is millions of merges.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};

use crate::error::{Error, Result};
use crate::loading::gguf::{Gguf, Value};

/// A SentencePiece vocabulary, as llama.cpp reads it.
#[derive(Clone)]
pub struct Spm {
    scores: Vec<f32>,
    /// Token text (`▁` for a space) to id; where two ids share a text, the later one, as llama.cpp.
    ids: HashMap<String, u32>,
    /// `<0xHH>` ids by byte (256 of them).
    bytes: Vec<Option<u32>>,
    /// Special tokens' `(text, id)`, longest text first.
    specials: Vec<(String, u32)>,
    unknown: Option<u32>,
    add_space_prefix: bool,
}

/// GGUF token types (`tokenizer.ggml.token_type`).
pub const NORMAL: i64 = 1;
pub const UNKNOWN: i64 = 2;
pub const CONTROL: i64 = 3;
pub const USER_DEFINED: i64 = 4;
pub const BYTE: i64 = 6;

/// A pair of adjacent symbols whose joined text is a token with `score`.
struct Bigram {
    left: usize,
    right: usize,
    score: f32,
    len: usize,
}

impl PartialEq for Bigram {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Bigram {}
impl PartialOrd for Bigram {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Bigram {
    /// The heap's greatest: the highest score, then the leftmost.
    fn cmp(&self, other: &Self) -> Ordering {
        self.score
            .total_cmp(&other.score)
            .then(other.left.cmp(&self.left))
    }
}

/// A run of the text: `start..start + len` bytes, linked to its neighbours (`len` 0 once merged
/// into its left neighbour).
#[derive(Clone, Copy)]
struct Symbol {
    start: usize,
    len: usize,
    prev: Option<usize>,
    next: Option<usize>,
}

impl Spm {
    /// The vocabulary from its tokens (`▁` for spaces, as GGUF stores them), scores and types.
    pub fn new(tokens: &[&str], scores: Vec<f32>, types: &[i64], add_space_prefix: bool) -> Spm {
        let mut ids = HashMap::with_capacity(tokens.len());
        let mut bytes = vec![None; 256];
        let mut specials = Vec::new();
        let mut unknown = None;
        for (id, (&text, &kind)) in tokens.iter().zip(types).enumerate() {
            let id = id as u32;
            ids.insert(text.to_string(), id);
            match kind {
                BYTE => {
                    if let Some(b) = byte_token(text) {
                        bytes[b as usize] = Some(id);
                    }
                }
                UNKNOWN | CONTROL | USER_DEFINED if !text.is_empty() => {
                    specials.push((text.to_string(), id));
                    if kind == UNKNOWN {
                        unknown = Some(id);
                    }
                }
                _ => {}
            }
        }
        specials.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then(a.1.cmp(&b.1)));
        Spm {
            scores,
            ids,
            bytes,
            specials,
            unknown,
            add_space_prefix,
        }
    }

    /// `text`'s ids, with nothing added (no BOS).
    pub fn encode(&self, text: &str) -> Vec<u32> {
        let mut out = Vec::new();
        let mut after_special = true;
        for piece in self.split_specials(text) {
            match piece {
                Piece::Special(id) => {
                    out.push(id);
                    after_special = true;
                }
                Piece::Text(raw) => {
                    let mut text = String::with_capacity(raw.len() + 3);
                    if self.add_space_prefix && after_special {
                        text.push(' ');
                    }
                    text.push_str(raw);
                    self.merge(&text.replace(' ', "▁"), &mut out);
                    after_special = false;
                }
            }
        }
        out
    }

    /// Split `text` at each special token, the longest tokens first.
    fn split_specials<'t>(&self, text: &'t str) -> Vec<Piece<'t>> {
        // No text, no pieces (and no space prefix: llama.cpp encodes "" as nothing).
        let mut pieces = if text.is_empty() {
            Vec::new()
        } else {
            vec![Piece::Text(text)]
        };
        for (special, id) in &self.specials {
            if !text.contains(special.as_str()) {
                continue;
            }
            let mut split = Vec::with_capacity(pieces.len() + 2);
            for piece in pieces {
                let Piece::Text(mut rest) = piece else {
                    split.push(piece);
                    continue;
                };
                while let Some(at) = rest.find(special.as_str()) {
                    if at > 0 {
                        split.push(Piece::Text(&rest[..at]));
                    }
                    split.push(Piece::Special(*id));
                    rest = &rest[at + special.len()..];
                }
                if !rest.is_empty() {
                    split.push(Piece::Text(rest));
                }
            }
            pieces = split;
        }
        pieces
    }

    /// Merge `text`'s characters by score and append the resulting ids.
    fn merge(&self, text: &str, out: &mut Vec<u32>) {
        let mut symbols: Vec<Symbol> = Vec::with_capacity(text.len());
        for (i, (start, c)) in text.char_indices().enumerate() {
            symbols.push(Symbol {
                start,
                len: c.len_utf8(),
                prev: i.checked_sub(1),
                next: None,
            });
            if i > 0 {
                symbols[i - 1].next = Some(i);
            }
        }
        let mut queue = BinaryHeap::new();
        let bigram = |symbols: &[Symbol], left: Option<usize>, right: Option<usize>| {
            let (left, right) = (left?, right?);
            let (l, r) = (symbols[left], symbols[right]);
            let joined = &text[l.start..l.start + l.len + r.len];
            let id = *self.ids.get(joined)?;
            Some(Bigram {
                left,
                right,
                score: self.scores[id as usize],
                len: joined.len(),
            })
        };
        for i in 1..symbols.len() {
            queue.extend(bigram(&symbols, Some(i - 1), Some(i)));
        }
        while let Some(b) = queue.pop() {
            let (l, r) = (symbols[b.left], symbols[b.right]);
            // Stale: one side has merged since this pair was queued.
            if l.len == 0 || r.len == 0 || l.len + r.len != b.len {
                continue;
            }
            symbols[b.left].len += r.len;
            symbols[b.left].next = r.next;
            symbols[b.right].len = 0;
            if let Some(next) = r.next {
                symbols[next].prev = Some(b.left);
            }
            queue.extend(bigram(&symbols, l.prev, Some(b.left)));
            queue.extend(bigram(&symbols, Some(b.left), r.next));
        }
        let mut at = (!symbols.is_empty()).then_some(0);
        while let Some(i) = at {
            let s = symbols[i];
            let piece = &text[s.start..s.start + s.len];
            match self.ids.get(piece) {
                Some(&id) => out.push(id),
                // Only a single character can fail to be a token (every merge made one).
                None => out.extend(
                    piece
                        .bytes()
                        .filter_map(|b| self.bytes[b as usize].or(self.unknown)),
                ),
            }
            at = s.next;
        }
    }
}

enum Piece<'t> {
    Text(&'t str),
    Special(u32),
}

/// `<0xHH>` pieces stand for one raw byte.
pub fn byte_token(piece: &str) -> Option<u8> {
    let hex = piece.strip_prefix("<0x")?.strip_suffix('>')?;
    if hex.len() != 2 {
        return None;
    }
    u8::from_str_radix(hex, 16).ok()
}

/// A GGUF's `tokenizer.ggml.token_type` list (every token normal where it has none).
pub fn token_types(gguf: &Gguf, n: usize) -> Result<Vec<i64>> {
    match gguf.get("tokenizer.ggml.token_type") {
        None => Ok(vec![NORMAL; n]),
        Some(v) => v
            .as_array()
            .filter(|a| a.len() == n)
            .and_then(|a| a.iter().map(Value::as_i64).collect::<Option<Vec<_>>>())
            .ok_or_else(|| {
                Error::BadTokenizer(
                    "the GGUF file's tokenizer has token types that do not match its tokens".into(),
                )
            }),
    }
}
