//! Synthetic checkpoints with the real shapes of the TinyStories models and SmolLM2-135M, for speed
//! work at scale: decode speed depends on shapes, not on weight values.

use std::str::FromStr;

use crate::error::{Error, Result};
use crate::weights::{HostWeights, LayerWeights, LlamaConfig, Matrix};

/// The shapes of karpathy/tinyllamas' stories models, and of SmolLM2-135M (HuggingFaceTB's
/// `config.json`: 9 heads of 64 sharing 3 KV heads, rope theta 100000, a 49152-token vocabulary,
/// tied embeddings).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    Stories15M,
    Stories42M,
    Stories110M,
    SmolLm2_135M,
}

impl FromStr for Shape {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "stories15m" => Ok(Shape::Stories15M),
            "stories42m" => Ok(Shape::Stories42M),
            "stories110m" => Ok(Shape::Stories110M),
            "smollm2-135m" => Ok(Shape::SmolLm2_135M),
            _ => Err(Error::Unsupported(format!(
                "shape {s:?}: choose stories15M, stories42M, stories110M or smollm2-135M"
            ))),
        }
    }
}

impl Shape {
    pub fn config(self) -> LlamaConfig {
        if self == Shape::SmolLm2_135M {
            return LlamaConfig {
                dim: 576,
                hidden_dim: 1536,
                n_layers: 30,
                n_heads: 9,
                n_kv_heads: 3,
                vocab_size: 49152,
                seq_len: 8192,
                shared_classifier: true,
                rope_theta: 100000.0,
                norm_eps: 1e-5,
            };
        }
        let (dim, hidden_dim, n_layers, heads, seq_len) = match self {
            Shape::Stories15M => (288, 768, 6, 6, 256),
            Shape::Stories42M => (512, 1376, 8, 8, 1024),
            _ => (768, 2048, 12, 12, 1024),
        };
        LlamaConfig {
            dim,
            hidden_dim,
            n_layers,
            n_heads: heads,
            n_kv_heads: heads,
            vocab_size: 32000,
            seq_len,
            shared_classifier: true,
            rope_theta: 10000.0,
            norm_eps: 1e-5,
        }
    }

    /// The name a file of this shape is given (`general.name` in a GGUF).
    pub fn name(self) -> &'static str {
        match self {
            Shape::Stories15M => "stories15M",
            Shape::Stories42M => "stories42M",
            Shape::Stories110M => "stories110M",
            Shape::SmolLm2_135M => "SmolLM2-135M",
        }
    }
}

/// Seeded random weights for `config`: uniform with standard deviation 0.02, norms at 1. The
/// embedding rows of ids 0-2 (where SentencePiece keeps BOS and EOS, and SmolLM2 its end-of-text
/// and chat markers) are zero, so their logits are 0 (the tied classifier) and greedy decoding
/// does not stop early: a benchmark runs its full length.
pub fn weights(config: &LlamaConfig, seed: u64) -> HostWeights {
    let mut rng = SplitMix64(seed);
    let mut matrix = |rows: usize, cols: usize| {
        let data: Vec<f32> = (0..rows * cols)
            .map(|_| rng.uniform() * 0.02 * 3f32.sqrt())
            .collect();
        Matrix::new(rows, cols, data)
    };
    let (d, h, kv, v) = (
        config.dim,
        config.hidden_dim,
        config.kv_dim(),
        config.vocab_size,
    );
    let mut token_embedding = matrix(v, d);
    token_embedding.data.make_mut()[..3 * d].fill(0.0);
    let layers = (0..config.n_layers)
        .map(|_| LayerWeights {
            rms_att: vec![1.0; d],
            wq: matrix(d, d),
            wk: matrix(kv, d),
            wv: matrix(kv, d),
            wo: matrix(d, d),
            rms_ffn: vec![1.0; d],
            w1: matrix(h, d),
            w2: matrix(d, h),
            w3: matrix(h, d),
        })
        .collect();
    let classifier = (!config.shared_classifier).then(|| matrix(v, d));
    HostWeights {
        config: config.clone(),
        token_embedding,
        layers,
        rms_final: vec![1.0; d],
        classifier,
        conversions: Vec::new(),
    }
}

/// SplitMix64: a tiny, well-known generator; enough for weights whose values do not matter.
struct SplitMix64(u64);

impl SplitMix64 {
    /// Uniform in [-1, 1).
    fn uniform(&mut self) -> f32 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
}
