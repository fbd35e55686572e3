//! The architectures a GGUF may name in `general.architecture`, one file each: what its metadata
//! says beyond Llama's shape, read into the [`Recipe`](crate::model::Recipe) the forward pass follows. The shape's
//! common keys (`{arch}.embedding_length`, `.block_count`, ...) and the tensors' names are
//! llama.cpp's for every architecture, read once by `loading/gguf.rs`: the norms and biases a
//! recipe adds are `blk.N.attn_{q,k,v}.bias`, `blk.N.attn_{q,k}_norm.weight` and
//! `blk.N.post_{attention,ffw}_norm.weight`. Adding an architecture is a file here and a line in
//! [`ARCHITECTURES`] (docs/architecture.md).

use crate::error::{Error, Result, clip};

pub use base::{Arch, Metadata};

mod base;
pub mod gemma3;
pub mod llama;
pub mod qwen2;
pub mod qwen3;

/// Every architecture the engine runs.
pub const ARCHITECTURES: [&Arch; 4] = [&llama::ARCH, &gemma3::ARCH, &qwen2::ARCH, &qwen3::ARCH];

/// The architecture `name`, or an error naming the ones this engine runs.
pub fn find(name: &str) -> Result<&'static Arch> {
    ARCHITECTURES
        .into_iter()
        .find(|a| a.name == name)
        .ok_or_else(|| {
            Error::BadModel(format!(
                "GGUF general.architecture is {:?}; this engine runs {KNOWN}",
                clip(name)
            ))
        })
}

/// [`ARCHITECTURES`] for an error and the page's model list, as one text (a list built at run
/// time cost the page's wasm a kilobyte).
pub const KNOWN: &str = "\"llama\" (Llama 2 and 3, SmolLM2, TinyLlama), \"gemma3\" (Gemma 3), \
                     \"qwen2\" (Qwen2, Qwen2.5), \"qwen3\" (Qwen3)";

#[cfg(test)]
mod tests {
    #[test]
    fn the_error_names_every_architecture() {
        for a in super::ARCHITECTURES {
            let named = format!("{:?} ({})", a.name, a.models);
            assert!(
                super::KNOWN.contains(&named),
                "{named} not in {}",
                super::KNOWN
            );
        }
    }
}
