//! The model's shape: a Llama-2 style config, checked before anything is allocated, and RoPE's
//! angles.

use serde::Serialize;

use crate::error::{Error, Result};

/// The hyper-parameters of a Llama-2 style model, and what its architecture changes in the pass.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LlamaConfig {
    /// What the architecture adds to Llama's block ([`Recipe`]).
    pub recipe: Recipe,
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
    /// What each pair's RoPE frequency is divided by (`[head_size / 2]`, GGUF's `rope_freqs`
    /// tensor: Llama 3's long-context scaling, fixed at conversion; `gguf::load` checks it).
    pub rope_factors: Option<Vec<f32>>,
    pub norm_eps: f32,
}

/// What an architecture changes in the one forward pass, as fields `model/forward.rs` reads top to
/// bottom (it never asks for an architecture by name). Each architecture is one file of
/// `loading/arch/` that reads its GGUF metadata into one of these; Llama 2's block (SwiGLU, one
/// RMSNorm before attention and one before the feed-forward, head size `dim / n_heads`) is
/// [`Recipe::llama`], and the others say what they change.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Recipe {
    /// llama.cpp's architecture name, for conditions lines.
    pub name: &'static str,
    /// A head size of its own (`{arch}.attention.key_length`) instead of `dim / n_heads`.
    pub head_size: Option<usize>,
    /// Biases added to the q, k and v projections (Qwen2).
    pub qkv_bias: bool,
    /// RMSNorm on each head of q and k before RoPE, one `[head_size]` weight each (Gemma 3, Qwen3).
    pub qk_norm: bool,
    /// RMSNorm of attention's and the feed-forward's outputs before each residual (Gemma 3).
    pub post_norms: bool,
    /// The feed-forward's gate.
    pub activation: Activation,
    /// Embedding rows multiplied by sqrt(dim) (Gemma).
    pub embedding_scale: bool,
    /// The file's q and k rows rotate halves of each head (llama.cpp's NEOX RoPE: Gemma, Qwen):
    /// loading puts them in the adjacent pairs the pass rotates.
    pub rope_halves: bool,
    /// Sliding-window attention on some layers (Gemma 3).
    pub sliding: Option<Sliding>,
}

/// The feed-forward's gate: `act(gate) * up`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Activation {
    /// SiLU (SwiGLU): Llama, Qwen.
    Silu,
    /// GELU in its tanh form (GeGLU): Gemma.
    GeluTanh,
}

/// Local layers that attend to a window of recent positions with a RoPE base of their own.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Sliding {
    /// A local layer's query sees this many positions, its own included.
    pub window: usize,
    /// Every this-many-th layer (the 6th, 12th, ...) attends globally; the others locally.
    pub global_every: usize,
    /// The local layers' RoPE base (the global ones use `rope_theta`).
    pub rope_theta_local: f32,
}

impl Recipe {
    /// Llama 2's block, named `name`; an architecture changes what differs.
    pub const fn llama(name: &'static str) -> Recipe {
        Recipe {
            name,
            head_size: None,
            qkv_bias: false,
            qk_norm: false,
            post_norms: false,
            activation: Activation::Silu,
            embedding_scale: false,
            rope_halves: false,
            sliding: None,
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
    /// dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len and the head size
    /// where the file gives one of its own, in the file's naming.
    pub names: [&'static str; 8],
    /// What goes before each name but the vocabulary's: a GGUF's architecture (`qwen2.`).
    pub key_prefix: Option<&'static str>,
}

/// A field's name as a file writes it, `arch.name` where the file's keys carry the architecture.
#[derive(Clone, Copy)]
struct Field<'a>(Option<&'a str>, &'a str);

impl std::fmt::Display for Field<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(arch) => write!(f, "{arch}.{}", self.1),
            None => f.write_str(self.1),
        }
    }
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
        "head size",
    ],
    key_prefix: None,
};

impl LlamaConfig {
    pub fn head_size(&self) -> usize {
        self.recipe.head_size.unwrap_or(self.dim / self.n_heads)
    }

    /// The width of the queries (and of attention's output): every head's.
    pub fn q_dim(&self) -> usize {
        self.n_heads * self.head_size()
    }

    /// Layer `l`'s attention window (`None`: every earlier position) and RoPE base.
    pub fn layer_attention(&self, l: usize) -> (Option<usize>, f32) {
        match &self.recipe.sliding {
            Some(s) if !(l + 1).is_multiple_of(s.global_every) => {
                (Some(s.window), s.rope_theta_local)
            }
            _ => (None, self.rope_theta),
        }
    }

    /// What multiplies each embedding row: Gemma's sqrt(dim), in f32 as llama.cpp computes it.
    pub fn embedding_scale(&self) -> Option<f32> {
        self.recipe
            .embedding_scale
            .then(|| (self.dim as f32).sqrt())
    }

    pub fn kv_dim(&self) -> usize {
        self.n_kv_heads * self.head_size()
    }

    /// Reject shapes that cannot be a Llama model, before anything is allocated. `fields` names the
    /// fields as the file does.
    pub fn validate(&self, fields: &FieldNames) -> Result<()> {
        // The vocabulary's size is not a key of the file's.
        let field = |i: usize| Field(fields.key_prefix.filter(|_| i != 5), fields.names[i]);
        let [dim, hidden, layers, heads, kv_heads, vocab, seq_len, head] =
            std::array::from_fn(field);
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
        if let Some(hs) = self.recipe.head_size
            && !(1..=MAX_DIM).contains(&hs)
        {
            return bad(format!("{prefix} {head} = {hs} is outside 1..={MAX_DIM}"));
        }
        if let Some(g) = &self.recipe.sliding {
            if g.window == 0 || g.global_every == 0 {
                return bad(format!(
                    "sliding window {} and global layer pattern {} must each be at least 1",
                    g.window, g.global_every
                ));
            }
            if !(g.rope_theta_local.is_finite() && g.rope_theta_local > 1.0) {
                return bad(format!(
                    "local RoPE base {} must be a finite number above 1",
                    g.rope_theta_local
                ));
            }
        }
        if self.recipe.head_size.is_none() && !self.dim.is_multiple_of(self.n_heads) {
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
            // The head size is the file's own where it gives one, else dim over heads.
            let from = match self.recipe.head_size {
                Some(_) => head.to_string(),
                None => format!("{dim} / {heads}"),
            };
            return bad(format!(
                "head size {} ({from}) is odd; RoPE needs pairs",
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
        let r = &self.recipe;
        let extras = [
            (r.post_norms, 2 * d),
            (r.qk_norm, 2 * self.head_size() as u64),
            (r.qkv_bias, q + 2 * kv),
        ];
        let extras: u64 = extras.iter().filter(|(on, _)| *on).map(|(_, n)| n).sum();
        let per_layer = 2 * d + 2 * q * d + 2 * kv * d + 3 * h * d + extras;
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
            .map(|i| {
                let freq = 1.0 / theta.powf((2 * i) as f32 / hs as f32);
                // As llama.cpp's `ggml_rope_ext` applies `freq_factors`.
                self.rope_factors.as_ref().map_or(freq, |f| freq / f[i])
            })
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
