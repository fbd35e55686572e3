//! Synthetic checkpoints with the real shapes of the TinyStories models and SmolLM2-135M, for speed
//! work at scale: decode speed depends on shapes, not on weight values.

use std::str::FromStr;

use crate::error::{Error, Result};
use crate::model::{Family, GemmaNorms, HostWeights, LayerWeights, LlamaConfig, Matrix};

/// The shapes of karpathy/tinyllamas' stories models, and of the small chat models people run in
/// a browser, from their `config.json`s: SmolLM2-135M and -360M (heads of 64 sharing KV heads
/// three to one, rope theta 100000, a 49152-token vocabulary, tied embeddings) and TinyLlama-1.1B
/// (32 heads sharing 4 KV heads, Llama-2's 32000-token vocabulary, its own classifier).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    Stories15M,
    Stories42M,
    Stories110M,
    SmolLm2_135M,
    SmolLm2_360M,
    TinyLlama1_1B,
}

const SHAPES: &str =
    "stories15M, stories42M, stories110M, smollm2-135M, smollm2-360M or tinyllama-1.1B";

impl FromStr for Shape {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "stories15m" => Ok(Shape::Stories15M),
            "stories42m" => Ok(Shape::Stories42M),
            "stories110m" => Ok(Shape::Stories110M),
            "smollm2-135m" => Ok(Shape::SmolLm2_135M),
            "smollm2-360m" => Ok(Shape::SmolLm2_360M),
            "tinyllama-1.1b" => Ok(Shape::TinyLlama1_1B),
            _ => Err(Error::Unsupported(format!("shape {s:?}: choose {SHAPES}"))),
        }
    }
}

impl Shape {
    pub fn config(self) -> LlamaConfig {
        // dim, hidden, layers, heads, KV heads, vocabulary, context, rope theta, tied classifier
        let (dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len, theta, tied) =
            match self {
                Shape::Stories15M => (288, 768, 6, 6, 6, 32000, 256, 10000.0, true),
                Shape::Stories42M => (512, 1376, 8, 8, 8, 32000, 1024, 10000.0, true),
                Shape::Stories110M => (768, 2048, 12, 12, 12, 32000, 1024, 10000.0, true),
                Shape::SmolLm2_135M => (576, 1536, 30, 9, 3, 49152, 8192, 100000.0, true),
                Shape::SmolLm2_360M => (960, 2560, 32, 15, 5, 49152, 8192, 100000.0, true),
                Shape::TinyLlama1_1B => (2048, 5632, 22, 32, 4, 32000, 2048, 10000.0, false),
            };
        LlamaConfig {
            family: Family::Llama,
            dim,
            hidden_dim,
            n_layers,
            n_heads,
            n_kv_heads,
            vocab_size,
            seq_len,
            shared_classifier: tied,
            rope_theta: theta,
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
            Shape::SmolLm2_360M => "SmolLM2-360M",
            Shape::TinyLlama1_1B => "TinyLlama-1.1B",
        }
    }
}

/// Seeded random weights for `config`: uniform with standard deviation 0.02, norms at 1 (Gemma's
/// extra norms around 1, so that a wrong layout shows). The
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
    let (d, h, kv, v, q) = (
        config.dim,
        config.hidden_dim,
        config.kv_dim(),
        config.vocab_size,
        config.q_dim(),
    );
    let mut token_embedding = matrix(v, d);
    token_embedding.data.make_mut()[..3 * d].fill(0.0);
    let layers = (0..config.n_layers)
        .map(|_| LayerWeights {
            rms_att: vec![1.0; d],
            wq: matrix(q, d),
            wk: matrix(kv, d),
            wv: matrix(kv, d),
            wo: matrix(d, q),
            rms_ffn: vec![1.0; d],
            w1: matrix(h, d),
            w2: matrix(d, h),
            w3: matrix(h, d),
            gemma: matches!(config.family, Family::Gemma3(_)).then(|| {
                let mut norm = |n: usize| -> Vec<f32> {
                    matrix(1, n).data.iter().map(|x| 1.0 + 10.0 * x).collect()
                };
                GemmaNorms {
                    q: norm(config.head_size()),
                    k: norm(config.head_size()),
                    post_attention: norm(d),
                    post_ffn: norm(d),
                }
            }),
        })
        .collect();
    let classifier = (!config.shared_classifier).then(|| matrix(v, d));
    HostWeights {
        config: config.clone(),
        token_embedding,
        layers,
        rms_final: vec![1.0; d],
        classifier,
        tensor_types: Vec::new(),
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
