//! The model's shape: a Llama-2 style config, checked before anything is allocated, and RoPE's
//! angles.

use serde::Serialize;

use crate::error::{Error, Result};

/// The hyper-parameters of a Llama-2 style model.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LlamaConfig {
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
        self.dim / self.n_heads
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
        if !self.dim.is_multiple_of(self.n_heads) {
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
        let kv = self.kv_dim() as u64;
        let per_layer = 2 * d + 2 * d * d + 2 * kv * d + 3 * h * d;
        let classifier = if self.shared_classifier { 0 } else { v * d };
        v * d + l * per_layer + d + classifier
    }

    /// RoPE's rotation speed per pair, `theta^(-2i / head_size)` in f32 like run.c: fixed by the
    /// config, so a model computes them once.
    pub fn rope_frequencies(&self) -> Vec<f32> {
        let hs = self.head_size();
        (0..hs / 2)
            .map(|i| 1.0 / self.rope_theta.powf((2 * i) as f32 / hs as f32))
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
