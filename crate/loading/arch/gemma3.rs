//! Gemma 3 (llama.cpp's `gemma3`): each head of q and k RMS-normed, norms after attention and
//! after the feed-forward too, a GELU-gated feed-forward, embeddings scaled by sqrt(dim), a head
//! size of its own, RoPE on halves (NEOX), and sliding-window attention with a RoPE base of its
//! own on all but every sixth layer.

use super::base::{Arch, Metadata};
use crate::error::{Error, Result};
use crate::model::{Activation, Recipe, Sliding};

pub const ARCH: Arch = Arch {
    name: "gemma3",
    models: "Gemma 3",
    recipe,
    default_eps: 1e-6,
};

/// Values llama.cpp fixes in code rather than reading (`llama-model.cpp`), used where a file does
/// not say: every 6th layer global, the local layers' RoPE base 10,000.
const GLOBAL_EVERY: usize = 6;
const LOCAL_ROPE_BASE: f32 = 10_000.0;

fn recipe(gguf: &dyn Metadata) -> Result<Recipe> {
    if gguf.has("gemma3.final_logit_softcapping") || gguf.has("gemma3.attn_logit_softcapping") {
        return Err(Error::BadModel(
            "GGUF has gemma3's logit softcapping (Gemma 2's), which this engine does not run"
                .into(),
        ));
    }
    // A head size of its own (256 for the 270M model, whose dim / heads is 160).
    gguf.required("gemma3.attention.key_length")?;
    Ok(with_window(Sliding {
        window: gguf.required("gemma3.attention.sliding_window")?,
        global_every: gguf
            .count("gemma3.attention.sliding_window_pattern")?
            .unwrap_or(GLOBAL_EVERY),
        rope_theta_local: gguf.float("gemma3.rope.freq_base_swa", LOCAL_ROPE_BASE)?,
    }))
}

/// Gemma 3's recipe with `sliding` windows (and the file's head size, which `loading/gguf.rs`
/// reads into `head_size`).
pub fn with_window(sliding: Sliding) -> Recipe {
    Recipe {
        qk_norm: true,
        post_norms: true,
        activation: Activation::GeluTanh,
        embedding_scale: true,
        rope_halves: true,
        sliding: Some(sliding),
        ..Recipe::llama(ARCH.name)
    }
}
