//! The model's shape: a Llama-2 style config, checked before anything is allocated, and RoPE's
//! angles.

use serde::Serialize;

use crate::error::{Error, Result};

/// The hyper-parameters of a Llama-2 style model, and what its family changes in the pass.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LlamaConfig {
    /// Llama, or a family whose layers differ ([`Family`]).
    pub family: Family,
    pub dim: usize,
    pub hidden_dim: usize,
    pub n_layers: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub vocab_size: usize,
    /// The context length: the most positions one sequence can hold.
    pub seq_len: usize,
    /// True when the output classifier reuses the token embedding.
    pub shared_classifier: bool,
    pub rope_theta: f32,
    pub norm_eps: f32,
}

/// What a family changes in the one forward pass (`model/forward.rs` reads it top to bottom).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum Family {
    /// Llama 2 (and SmolLM2, TinyLlama): SwiGLU, one RMSNorm before attention and one before the
    /// feed-forward, head size `dim / n_heads`.
    Llama,
    /// Gemma 3 (llama.cpp's `gemma3`): RMSNorm on each head of q and k, norms after attention and
    /// after the feed-forward too, a GELU-gated feed-forward, embeddings scaled by sqrt(dim), a head
    /// size of its own, and sliding-window attention on all but every `global_every`-th layer.
    Gemma3(Gemma3),
}

/// Gemma 3's shape beyond Llama's, from its GGUF metadata.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Gemma3 {
    /// `gemma3.attention.key_length` (256 for the 270M model, whose dim / heads is 160).
    pub head_size: usize,
    /// `gemma3.attention.sliding_window`: a local layer's query sees this many positions, its own
    /// included.
    pub sliding_window: usize,
    /// Every this-many-th layer (the 6th, 12th, ...) attends globally; the others locally.
    pub global_every: usize,
    /// The local layers' RoPE base (the global ones use `rope_theta`).
    pub rope_theta_local: f32,
}

impl Family {
    /// The name in conditions lines: llama.cpp's architecture name.
    pub fn name(&self) -> &'static str {
        match self {
            Family::Llama => "llama",
            Family::Gemma3(_) => "gemma3",
        }
    }
}

/// Limits that no real small model comes near; a header past them is corrupt or foreign.
const MAX_DIM: usize = 1 << 15;
const MAX_LAYERS: usize = 512;
/// The largest vocabulary (and so one past the largest token id) the engine accepts.
pub(crate) const MAX_VOCAB: usize = 1 << 20;
const MAX_SEQ_LEN: usize = 1 << 20;
/// The smallest vocabulary that holds `<unk>`, BOS (1) and EOS (2), which the engine feeds and stops on.
const MIN_VOCAB: usize = 3;
/// The smallest context: BOS plus one generated token.
const MIN_SEQ_LEN: usize = 2;

/// What each format calls the config's fields, so that an error quotes the file's own words.
pub struct FieldNames {
    /// How to introduce a field: "header field" (llama2.c) or "config.json" (Hugging Face).
    pub prefix: &'static str,
    /// dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len in the file's naming.
    pub names: [&'static str; 7],
}

/// llama2.c's header names.
pub const LLAMA2C_FIELDS: FieldNames = FieldNames {
    prefix: "header field",
    names: [
        "dim",
        "hidden_dim",
        "n_layers",
        "n_heads",
        "n_kv_heads",
        "vocab_size",
        "seq_len",
    ],
};

impl LlamaConfig {
    pub fn head_size(&self) -> usize {
        match &self.family {
            Family::Llama => self.dim / self.n_heads,
            Family::Gemma3(g) => g.head_size,
        }
    }

    /// The width of the queries (and of attention's output): every head's.
    pub fn q_dim(&self) -> usize {
        self.n_heads * self.head_size()
    }

    /// Layer `l`'s attention window (`None`: every earlier position) and RoPE base.
    pub fn layer_attention(&self, l: usize) -> (Option<usize>, f32) {
        match &self.family {
            Family::Gemma3(g) if !(l + 1).is_multiple_of(g.global_every) => {
                (Some(g.sliding_window), g.rope_theta_local)
            }
            _ => (None, self.rope_theta),
        }
    }

    /// What multiplies each embedding row: Gemma's sqrt(dim), in f32 as llama.cpp computes it.
    pub fn embedding_scale(&self) -> Option<f32> {
        match self.family {
            Family::Llama => None,
            Family::Gemma3(_) => Some((self.dim as f32).sqrt()),
        }
    }

    pub fn kv_dim(&self) -> usize {
        self.n_kv_heads * self.head_size()
    }

    /// Reject shapes that cannot be a Llama model, before anything is allocated. `fields` names the
    /// fields as the file does.
    pub fn validate(&self, fields: &FieldNames) -> Result<()> {
        let [dim, hidden, layers, heads, kv_heads, vocab, seq_len] = fields.names;
        let prefix = fields.prefix;
        let bad = |m: String| Err(Error::BadModel(m));
        let ranges = [
            (dim, self.dim, 1, MAX_DIM, ""),
            (hidden, self.hidden_dim, 1, 4 * MAX_DIM, ""),
            (layers, self.n_layers, 1, MAX_LAYERS, ""),
            (heads, self.n_heads, 1, MAX_DIM, ""),
            (kv_heads, self.n_kv_heads, 1, MAX_DIM, ""),
            (
                vocab,
                self.vocab_size,
                MIN_VOCAB,
                MAX_VOCAB,
                " (a vocabulary must hold <unk>, BOS and EOS)",
            ),
            (
                seq_len,
                self.seq_len,
                MIN_SEQ_LEN,
                MAX_SEQ_LEN,
                " (the context must hold BOS plus one generated token)",
            ),
        ];
        for (name, value, min, max, why) in ranges {
            if value < min || value > max {
                return bad(format!(
                    "{prefix} {name} = {value} is outside {min}..={max}{why}"
                ));
            }
        }
        if let Family::Gemma3(g) = &self.family {
            if !(1..=MAX_DIM).contains(&g.head_size) || g.sliding_window == 0 || g.global_every == 0
            {
                return bad(format!(
                    "Gemma 3 head size {}, sliding window {} and global layer pattern {} must each \
                     be at least 1",
                    g.head_size, g.sliding_window, g.global_every
                ));
            }
            if !(g.rope_theta_local.is_finite() && g.rope_theta_local > 1.0) {
                return bad(format!(
                    "local RoPE base {} must be a finite number above 1",
                    g.rope_theta_local
                ));
            }
        } else if !self.dim.is_multiple_of(self.n_heads) {
            return bad(format!(
                "{dim} {} is not a multiple of {heads} {}",
                self.dim, self.n_heads
            ));
        }
        if !self.n_heads.is_multiple_of(self.n_kv_heads) {
            return bad(format!(
                "{heads} {} is not a multiple of {kv_heads} {}",
                self.n_heads, self.n_kv_heads
            ));
        }
        if !(self.rope_theta.is_finite() && self.rope_theta > 1.0) {
            return bad(format!(
                "RoPE base (rope_theta) {} must be a finite number above 1",
                self.rope_theta
            ));
        }
        if !(self.norm_eps.is_finite() && self.norm_eps >= 0.0) {
            return bad(format!(
                "RMSNorm epsilon (rms_norm_eps) {} must be a finite number of at least 0",
                self.norm_eps
            ));
        }
        if !self.head_size().is_multiple_of(2) {
            return bad(format!(
                "head size {} ({dim} / {heads}) is odd; RoPE needs pairs",
                self.head_size()
            ));
        }
        Ok(())
    }

    /// How many f32 values the weights hold (embedding and classifier counted separately when
    /// not shared), in u64 so that no header can make it wrap, on 64-bit or 32-bit (wasm) targets.
    /// After [`validate`](Self::validate) the fields are bounded, so the products fit easily.
    pub fn weight_count(&self) -> u64 {
        let [d, h, l, v] =
            [self.dim, self.hidden_dim, self.n_layers, self.vocab_size].map(|x| x as u64);
        let (kv, q) = (self.kv_dim() as u64, self.q_dim() as u64);
        let extra_norms = match self.family {
            Family::Llama => 0,
            Family::Gemma3(_) => 2 * d + 2 * self.head_size() as u64,
        };
        let per_layer = 2 * d + 2 * q * d + 2 * kv * d + 3 * h * d + extra_norms;
        let classifier = if self.shared_classifier { 0 } else { v * d };
        v * d + l * per_layer + d + classifier
    }

    /// RoPE's rotation speed per pair, `theta^(-2i / head_size)` in f32 like run.c: fixed by the
    /// config, so a model computes them once.
    pub fn rope_frequencies(&self) -> Vec<f32> {
        self.rope_frequencies_for(self.rope_theta)
    }

    /// [`rope_frequencies`](Self::rope_frequencies) for another base (Gemma's local layers).
    pub fn rope_frequencies_for(&self, theta: f32) -> Vec<f32> {
        let hs = self.head_size();
        (0..hs / 2)
            .map(|i| 1.0 / theta.powf((2 * i) as f32 / hs as f32))
            .collect()
    }

    /// The RoPE angles' cos and sin for positions `start..end` (see [`rope_angles`]).
    pub fn rope_cos_sin(&self, start: usize, end: usize) -> (Vec<f32>, Vec<f32>) {
        rope_angles(&self.rope_frequencies(), start, end)
    }

    /// How many parameters the model has (embedding counted once when shared).
    pub fn parameter_count(&self) -> u64 {
        self.weight_count()
    }
}

/// cos and sin of `pos * freq` for positions `start..end` and every pair's frequency,
/// `[end - start, freqs.len()]` row-major. Computed for just the positions a forward pass needs,
/// so a model claiming a huge context costs nothing up front.
pub fn rope_angles(freqs: &[f32], start: usize, end: usize) -> (Vec<f32>, Vec<f32>) {
    let mut cos = Vec::with_capacity((end - start) * freqs.len());
    let mut sin = Vec::with_capacity((end - start) * freqs.len());
    for pos in start..end {
        for &freq in freqs {
            let angle = pos as f32 * freq;
            cos.push(angle.cos());
            sin.push(angle.sin());
        }
    }
    (cos, sin)
}
