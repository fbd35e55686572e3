//! Hugging Face `tokenizer.json`: loads or errors; what loads encodes and decodes without panicking,
//! and every id it produces is inside the vocabulary size it reports (what the engine checks
//! against the model).
#![no_main]

use libfuzzer_sys::fuzz_target;
use tokenometer_fuzz::loading::tokenizer::Tokenizer;

fuzz_target!(|data: &[u8]| {
    if let Ok(tokenizer) = Tokenizer::from_json(data)
        && let Ok(ids) = tokenizer.encode("Once upon a time, \u{1F600}")
    {
        assert!(ids.iter().all(|&id| (id as usize) < tokenizer.vocab_size()));
        let _ = tokenizer.decode(&ids);
    }
});
