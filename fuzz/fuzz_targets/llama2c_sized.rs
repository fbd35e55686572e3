//! llama2.c checkpoints whose length always matches what their header claims: the first 28 bytes
//! are the header, and the rest of the input is repeated to the exact size (when that is under
//! 1 MiB). Plain mutation rarely keeps a length consistent with its header; this reaches the loader
//! itself for every header the parser accepts.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tokenometer_fuzz::loading::{ModelFiles, llama2c};

fuzz_target!(|data: &[u8]| {
    if data.len() < 28 {
        return;
    }
    // The size run.c's layout implies, in i128 so that no header can overflow it; headers the
    // parser refuses on their fields alone go to it as they are.
    let header = &data[..28];
    let field = |i: usize| i32::from_le_bytes(header[4 * i..4 * i + 4].try_into().unwrap()) as i128;
    let [d, h, l, heads, kv_heads, vocab, s] = [0, 1, 2, 3, 4, 5, 6].map(field);
    if [d, h, l, heads, kv_heads, s].iter().any(|&v| v <= 0) || vocab == 0 || d % heads != 0 {
        let _ = llama2c::parse_header(data);
        return;
    }
    let v = vocab.abs();
    let kv = kv_heads * (d / heads);
    let classifier = if vocab < 0 { v * d } else { 0 };
    let floats = v * d + l * (2 * d + 2 * d * d + 2 * kv * d + 3 * h * d) + d + classifier;
    let with_rope = floats + s * (d / heads);
    let body = data[28..].iter().copied().chain(std::iter::once(0)).cycle();
    for count in [floats, with_rope] {
        if !(0..(1 << 18)).contains(&count) {
            continue;
        }
        let mut file = header.to_vec();
        file.extend(body.clone().take(4 * count as usize));
        if let Ok(weights) = ModelFiles::llama2c("fuzz", file).load() {
            let c = &weights.config;
            assert_eq!(weights.layers.len(), c.n_layers);
            assert_eq!(weights.token_embedding.data.len(), c.vocab_size * c.dim);
        }
    }
});
