//! Qwen2 and Qwen2.5 (llama.cpp's `qwen2`): Llama's block with biases on the q, k and v
//! projections, RoPE on halves of each head (NEOX), a tied or untied classifier.

use super::base::{Arch, Metadata};
use crate::error::Result;
use crate::model::Recipe;

pub const ARCH: Arch = Arch {
    name: "qwen2",
    models: "Qwen2, Qwen2.5",
    recipe,
    default_eps: 1e-6,
};

fn recipe(_: &dyn Metadata) -> Result<Recipe> {
    Ok(Recipe {
        qkv_bias: true,
        rope_halves: true,
        ..Recipe::llama(ARCH.name)
    })
}
