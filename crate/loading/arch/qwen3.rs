//! Qwen3 (llama.cpp's `qwen3`): Qwen2's block without the biases, each head of q and k RMS-normed
//! before RoPE, and a head size of its own (`qwen3.attention.key_length`, which `loading/gguf.rs`
//! reads for every architecture: 128 for the 0.6B model, whose dim / heads is 64).

use super::base::{Arch, Metadata};
use crate::error::Result;
use crate::model::Recipe;

pub const ARCH: Arch = Arch {
    name: "qwen3",
    models: "Qwen3",
    recipe,
    default_eps: 1e-6,
};

fn recipe(_: &dyn Metadata) -> Result<Recipe> {
    Ok(Recipe {
        qk_norm: true,
        rope_halves: true,
        ..Recipe::llama(ARCH.name)
    })
}
