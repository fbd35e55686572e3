//! llama2.c `tokenizer.bin`: loads or errors; what loads encodes and decodes without panicking.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tokenometer_fuzz::loading::tokenizer::Tokenizer;

fuzz_target!(|data: &[u8]| {
    if let Ok(tokenizer) = Tokenizer::from_llama2c(data)
        && let Ok(ids) = tokenizer.encode("Once upon a time, \u{1F600} <0x41>")
    {
        assert!(ids.iter().all(|&id| (id as usize) < tokenizer.vocab_size()));
        let _ = tokenizer.decode(&ids);
    }
});
