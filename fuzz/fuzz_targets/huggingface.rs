//! Hugging Face `config.json` + `model.safetensors`: the input is split at its first NUL byte into
//! the config and the safetensors file, so both parsers and their agreement are exercised.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tokenometer_fuzz::loading::ModelFiles;

fuzz_target!(|data: &[u8]| {
    let split = data.iter().position(|&b| b == 0).unwrap_or(data.len());
    let config = data[..split].to_vec();
    let safetensors = data.get(split + 1..).unwrap_or_default().to_vec();
    let _ = ModelFiles::hugging_face("fuzz", config, safetensors).load();
});
