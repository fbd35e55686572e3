//! Write a SmolLM2-like vocabulary GGUF (no tensors) from llama.cpp's StarCoder vocabulary as the
//! shared folder holds it, for `tokenometer synth --vocab` to build the SmolLM2-shaped model the
//! page's end-to-end test loads (`make test-e2e` runs this):
//!
//!     cargo run --example smollm2_vocab -- ../shared/models/gguf-vocab/ggml-vocab-starcoder.gguf OUT.gguf
//!
//! The shared file's damage and how it is read past: `tests/common/shared_vocab.rs`.

#[path = "../tests/common/shared_vocab.rs"]
mod shared_vocab;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [input, output] = args.as_slice() else {
        eprintln!("usage: smollm2_vocab STARCODER_VOCAB.gguf OUT.gguf");
        std::process::exit(2);
    };
    let bytes = std::fs::read(input).unwrap_or_else(|e| panic!("{input}: {e}"));
    let metadata = shared_vocab::smollm2_like(shared_vocab::read(&bytes));
    let mut out = Vec::new();
    tokenometer::loading::gguf_writer::write(&metadata, &[], false, &mut out).unwrap();
    std::fs::write(output, out).unwrap_or_else(|e| panic!("{output}: {e}"));
    eprintln!("wrote {output}");
}
