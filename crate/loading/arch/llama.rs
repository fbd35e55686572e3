//! Llama 2 and the models built like it (SmolLM2, TinyLlama, the TinyStories models): llama.cpp's
//! `llama`. Its q and k rows rotate adjacent pairs, as the pass does.

use super::base::{Arch, Metadata};
use crate::error::Result;
use crate::model::Recipe;

pub const ARCH: Arch = Arch {
    name: "llama",
    models: "Llama 2 and 3, SmolLM2, TinyLlama",
    recipe,
    default_eps: 1e-5,
};

fn recipe(_: &dyn Metadata) -> Result<Recipe> {
    Ok(Recipe {
        ..Recipe::llama(ARCH.name)
    })
}
