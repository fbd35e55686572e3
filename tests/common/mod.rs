//! Paths to the small models shipped in `models/`, and the reference data parsed from them.
#![allow(dead_code)]

use std::path::PathBuf;

#[cfg(not(target_arch = "wasm32"))]
pub mod serve;
pub mod vocab_copies;

/// `models/` in the checkout: what the project ships (README.md there).
pub fn models() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("models")
}

pub fn stories260k(file: &str) -> PathBuf {
    models().join("stories260K").join(file)
}

pub fn llama2_tokenizer(file: &str) -> PathBuf {
    models().join("llama2-tokenizer").join(file)
}

/// A llama.cpp vocabulary file: GPT-2's and StarCoder's ship in models/gguf-vocab/; Qwen2's and
/// Llama 3's (13.7 MB) are fetched by `make models` into models/cache/gguf-vocab/.
pub fn gguf_vocab(file: &str) -> PathBuf {
    let shipped = models().join("gguf-vocab").join(file);
    match shipped.exists() {
        true => shipped,
        false => models().join("cache/gguf-vocab").join(file),
    }
}

/// The metadata of llama.cpp's byte-level vocabulary `ggml-vocab-{name}.gguf` (`gpt-2`,
/// `starcoder`), read past the damage our copies carry ([`vocab_copies`]).
pub fn byte_level_vocab(name: &str) -> tokenometer::loading::gguf::Gguf {
    vocab_copies::read(&read(gguf_vocab(&format!("ggml-vocab-{name}.gguf"))))
}

/// stories260K (llama2.c's .bin and tok512.bin) on `backend` in `quant`.
pub fn engine(backend: &tokenometer::Backend, quant: tokenometer::Quant) -> tokenometer::Engine {
    let files =
        tokenometer::ModelFiles::llama2c("stories260K", read(stories260k("stories260K.bin")));
    let tokenizer = read(stories260k("tok512.bin"));
    tokenometer::Engine::load(files, Some(&tokenizer), quant, backend).expect("loads")
}

pub fn read(path: PathBuf) -> Vec<u8> {
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `(prompt_ids, sequence_ids)` from `reference-greedy-ids.txt`.
pub fn reference_ids() -> (Vec<u32>, Vec<u32>) {
    let text = String::from_utf8(read(stories260k("reference-greedy-ids.txt"))).unwrap();
    let line = |key: &str| -> Vec<u32> {
        let line = text.lines().find(|l| l.starts_with(key)).expect(key);
        line[key.len()..]
            .split_whitespace()
            .map(|n| n.parse().unwrap())
            .collect()
    };
    (line("prompt_ids:"), line("sequence_ids:"))
}

/// The text run.c printed, between the markers, without its trailing newline.
pub fn reference_text() -> String {
    let text = String::from_utf8(read(stories260k("reference-greedy.txt"))).unwrap();
    let start =
        text.find("----- BEGIN STDOUT -----\n").unwrap() + "----- BEGIN STDOUT -----\n".len();
    let end = text.find("----- END STDOUT -----").unwrap();
    text[start..end].trim_end_matches('\n').to_string()
}

/// The ids a run from "Once upon a time" generates.
pub fn generated_ids(
    engine: &tokenometer::Engine,
    options: &tokenometer::GenerateOptions,
) -> Vec<u32> {
    let mut ids = Vec::new();
    pollster::block_on(engine.generate("Once upon a time", options, &mut |e| {
        if let tokenometer::Event::Token { id, .. } = e {
            ids.push(*id);
        }
        tokenometer::Flow::Continue
    }))
    .unwrap();
    ids
}

/// The arguments of `tokenometer generate` for a model, tokenizer and prompt, then `extra`.
pub fn generate_args(model: &str, tokenizer: &str, prompt: &str, extra: &[&str]) -> Vec<String> {
    let fixed = [
        "generate",
        "--model",
        model,
        "--tokenizer",
        tokenizer,
        "--prompt",
        prompt,
    ];
    fixed.iter().chain(extra).map(|s| s.to_string()).collect()
}

/// An engine on a tiny synthetic model (dim 64, 2 layers, the stories260K tokenizer's 512 ids) with
/// a context of `seq_len` positions, on the CPU. Its random weights never pick BOS or EOS, so only
/// the context or max tokens end its runs.
pub fn tiny_synthetic_engine(seq_len: usize) -> tokenometer::Engine {
    tiny_synthetic_engine_on(seq_len, &tokenometer::Backend::cpu())
}

/// [`tiny_synthetic_engine`] on `backend`.
pub fn tiny_synthetic_engine_on(
    seq_len: usize,
    backend: &tokenometer::Backend,
) -> tokenometer::Engine {
    let mut config = tokenometer::loading::synth::Shape::Stories15M.config();
    (
        config.dim,
        config.hidden_dim,
        config.n_layers,
        config.n_heads,
        config.n_kv_heads,
    ) = (64, 128, 2, 4, 2);
    (config.vocab_size, config.seq_len) = (512, seq_len);
    let mut bytes = Vec::new();
    tokenometer::loading::llama2c::write(
        &tokenometer::loading::synth::weights(&config, 1),
        &mut bytes,
    )
    .unwrap();
    let files = tokenometer::ModelFiles::llama2c("tiny", bytes);
    tokenometer::Engine::load(
        files,
        Some(&read(stories260k("tok512.bin"))),
        tokenometer::Quant::F32,
        backend,
    )
    .unwrap()
}
