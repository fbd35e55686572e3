//! llama2.c checkpoints: any bytes either load or give an error, never a panic or an allocation
//! the file's length does not justify. Seeds: a stories260K-shaped header over small bodies.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tokenometer_fuzz::loading::ModelFiles;

fuzz_target!(|data: &[u8]| {
    if let Ok(weights) = ModelFiles::llama2c("fuzz", data.to_vec()).load() {
        // What loaded is consistent with its config.
        let c = &weights.config;
        assert_eq!(weights.layers.len(), c.n_layers);
        assert_eq!(weights.token_embedding.data.len(), c.vocab_size * c.dim);
    }
});
