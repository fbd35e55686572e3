//! GGUF files: any bytes either load (weights and, where there is one, the tokenizer inside) or
//! give an error, never a panic or an allocation the file's length does not justify; a tokenizer
//! that loads encodes and decodes a prompt. Seeds: tiny llama GGUFs with F32, Q8_0 and Q4_0 tensors,
//! one with a SentencePiece vocabulary and one with a byte-level BPE vocabulary and a chat template;
//! and every other block type (Q4_1, Q5_0, Q5_1; Q2_K to Q6_K in a width of 256).
#![no_main]

use libfuzzer_sys::fuzz_target;
use tokenometer_fuzz::loading::ModelFiles;

fuzz_target!(|data: &[u8]| {
    let files = ModelFiles::gguf("fuzz", data.to_vec());
    if let Ok(Some(tokenizer)) = files.embedded_tokenizer() {
        let prompt = match &tokenizer.specials.chat {
            Some(template) => template.wrap("Hi the 12 \u{fc}n \u{1f999}"),
            None => "Hi the 12 \u{fc}n \u{1f999}".to_string(),
        };
        if let Ok(ids) = tokenizer.encode(&prompt) {
            let _ = tokenizer.decode(&ids);
        }
    }
    if let Ok(weights) = files.load() {
        let c = &weights.config;
        assert_eq!(weights.layers.len(), c.n_layers);
        assert_eq!(weights.token_embedding.values().len(), c.vocab_size * c.dim);
    }
});
