//! The tokenizer.json documents `loading/tokenizer.rs` fills in for the vocabularies inside GGUF
//! and llama2.c files (the `tokenizers` crate reads them), kept as text: as `json!` literals they
//! compiled to about 16 kB of the page's wasm for the llama2.c one alone (twiggy).

/// A GGUF's byte-level tokenizer.json (llama.cpp's `gpt2` model) but its added tokens, split
/// rules, vocabulary and merges.
pub(crate) const GGUF_TOKENIZER_JSON: &str = r#"{
  "version": "1.0", "truncation": null, "padding": null,
  "added_tokens": [], "normalizer": null, "pre_tokenizer": null, "post_processor": null,
  "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
  "model": {"type": "BPE", "dropout": null, "unk_token": null,
    "continuing_subword_prefix": null, "end_of_word_suffix": null,
    "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
    "vocab": {}, "merges": []}
}"#;
/// GPT-2's split rules.
pub(crate) const GGUF_BYTE_LEVEL: &str =
    r#"{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true}"#;
/// Bytes to GPT-2's characters, after a split of its own (Qwen's, Llama 3's).
pub(crate) const GGUF_BYTES_ONLY: &str = r#"{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}"#;
/// Qwen2's and Llama 3's split (their tokenizer.json's), `{digits}` after `\p{N}`: nothing (each
/// digit alone, Qwen) or `{1,3}` (Llama 3).
pub(crate) const GGUF_QWEN_LLAMA3_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{digits}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// StarCoder's: each digit on its own first.
pub(crate) const GGUF_DIGITS: &str = r#"{"type": "Digits", "individual_digits": true}"#;

/// Everything of a llama2.c vocabulary's tokenizer.json but its vocabulary and merges.
pub(crate) const LLAMA2C_TOKENIZER_JSON: &str = r#"{
  "version": "1.0",
  "truncation": null,
  "padding": null,
  "added_tokens": [
    {"id": 0, "content": "<unk>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
    {"id": 1, "content": "<s>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
    {"id": 2, "content": "</s>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}
  ],
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
    "vocab": {}, "merges": []}
}"#;
