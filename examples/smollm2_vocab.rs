//! Write a SmolLM2-like vocabulary GGUF (no tensors) from llama.cpp's StarCoder vocabulary as
//! `models/` ships it, for `tokenometer synth --vocab` to build the SmolLM2-shaped model the
//! page's end-to-end test loads (`make test-e2e` runs this):
//!
//!     cargo run --example smollm2_vocab -- models/gguf-vocab/ggml-vocab-starcoder.gguf OUT.gguf
//!
//! The copy's damage and how it is read past: `tests/common/vocab_copies.rs`.

#[path = "../tests/common/vocab_copies.rs"]
mod vocab_copies;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [input, output] = args.as_slice() else {
        eprintln!("usage: smollm2_vocab STARCODER_VOCAB.gguf OUT.gguf");
        std::process::exit(2);
    };
    let bytes = std::fs::read(input).unwrap_or_else(|e| panic!("{input}: {e}"));
    let metadata = vocab_copies::smollm2_like(vocab_copies::read(&bytes));
    let mut out = Vec::new();
    tokenometer::loading::gguf_writer::write(&metadata, &[], None, &mut out).unwrap();
    std::fs::write(output, out).unwrap_or_else(|e| panic!("{output}: {e}"));
    eprintln!("wrote {output}");
}
