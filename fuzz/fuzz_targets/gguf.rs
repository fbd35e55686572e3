//! GGUF files: any bytes either load (weights and, where there is one, the tokenizer inside) or
//! give an error, never a panic or an allocation the file's length does not justify. Seeds: a tiny
//! llama GGUF with F32, Q8_0 and Q4_0 tensors and a SentencePiece vocabulary.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tokenometer_fuzz::loading::ModelFiles;

fuzz_target!(|data: &[u8]| {
    let files = ModelFiles::gguf("fuzz", data.to_vec());
    let _ = files.embedded_tokenizer();
    if let Ok(weights) = files.load() {
        let c = &weights.config;
        assert_eq!(weights.layers.len(), c.n_layers);
        assert_eq!(weights.token_embedding.values().len(), c.vocab_size * c.dim);
    }
});
