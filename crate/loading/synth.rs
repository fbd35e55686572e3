//! Synthetic checkpoints with the real shapes of the TinyStories models, SmolLM2, TinyLlama,
//! Qwen2.5 and Qwen3, for speed work at scale (decode speed depends on shapes, not on weight
//! values) and for checking an architecture against llama.cpp where the real weights are too
//! large to test with.

use std::str::FromStr;

use crate::error::{Error, Result};
use crate::model::{Extras, HostWeights, LayerWeights, LlamaConfig, Matrix, Recipe};

/// The shapes of karpathy/tinyllamas' stories models, and of the small chat models people run in
/// a browser, from their `config.json`s: SmolLM2-135M and -360M (heads of 64 sharing KV heads
/// three to one, rope theta 100000, a 49152-token vocabulary, tied embeddings) and TinyLlama-1.1B
/// (32 heads sharing 4 KV heads, Llama-2's 32000-token vocabulary, its own classifier);
/// Qwen2.5-0.5B (`qwen2`: biases on q, k and v, 14 heads sharing 2 KV heads, 151,936 tokens) and
/// Qwen3-0.6B (`qwen3`: q and k normed per head, heads of 128 where dim / heads is 64) and
/// Llama-3.2-1B (`llama` with Llama 3's 128,256-token vocabulary and its RoPE scaling).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    Stories15M,
    Stories42M,
    Stories110M,
    SmolLm2_135M,
    SmolLm2_360M,
    TinyLlama1_1B,
    Qwen25_0_5B,
    Qwen3_0_6B,
    Llama32_1B,
}

const SHAPES: &str = "stories15M, stories42M, stories110M, smollm2-135M, smollm2-360M, \
                      tinyllama-1.1B, qwen2.5-0.5B, qwen3-0.6B or llama3.2-1B";

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
            "qwen2.5-0.5b" => Ok(Shape::Qwen25_0_5B),
            "qwen3-0.6b" => Ok(Shape::Qwen3_0_6B),
            "llama3.2-1b" => Ok(Shape::Llama32_1B),
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
                Shape::Qwen25_0_5B => (896, 4864, 24, 14, 2, 151936, 32768, 1e6, true),
                Shape::Qwen3_0_6B => (1024, 3072, 28, 16, 8, 151936, 40960, 1e6, true),
                Shape::Llama32_1B => (2048, 8192, 16, 32, 8, 128256, 131072, 500000.0, true),
            };
        let recipe = match self {
            Shape::Qwen25_0_5B => Recipe {
                qkv_bias: true,
                rope_halves: true,
                ..Recipe::llama("qwen2")
            },
            Shape::Qwen3_0_6B => Recipe {
                head_size: Some(128),
                qk_norm: true,
                rope_halves: true,
                ..Recipe::llama("qwen3")
            },
            _ => Recipe::llama("llama"),
        };
        let norm_eps = if recipe.name == "llama" { 1e-5 } else { 1e-6 };
        let rope_factors =
            (self == Shape::Llama32_1B).then(|| llama3_rope_factors(dim / n_heads, theta));
        LlamaConfig {
            recipe,
            dim,
            hidden_dim,
            n_layers,
            n_heads,
            n_kv_heads,
            vocab_size,
            seq_len,
            shared_classifier: tied,
            rope_theta: theta,
            rope_factors,
            norm_eps,
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
            Shape::Qwen25_0_5B => "Qwen2.5-0.5B",
            Shape::Qwen3_0_6B => "Qwen3-0.6B",
            Shape::Llama32_1B => "Llama-3.2-1B",
        }
    }
}

/// Llama 3.1/3.2's RoPE scaling (`rope_scaling` of type `llama3`: factor 32, low and high
/// frequency factors 1 and 4, original context 8192) as the factors llama.cpp's converter writes
/// to `rope_freqs`: 1 for the fast pairs, 32 for the slow ones, a smooth blend between.
fn llama3_rope_factors(head_size: usize, theta: f32) -> Vec<f32> {
    let (factor, low, high, original) = (32.0f64, 1.0f64, 4.0f64, 8192.0f64);
    (0..head_size / 2)
        .map(|i| {
            let freq = 1.0 / (theta as f64).powf((2 * i) as f64 / head_size as f64);
            let wavelength = 2.0 * std::f64::consts::PI / freq;
            let f = if wavelength < original / high {
                1.0
            } else if wavelength > original / low {
                factor
            } else {
                let smooth = (original / wavelength - low) / (high - low);
                1.0 / ((1.0 - smooth) / factor + smooth)
            };
            f as f32
        })
        .collect()
}

/// Seeded random weights for `config`: uniform with standard deviation 0.02, norms at 1 (the
/// per-head and post norms around 1, and q/k/v biases of standard deviation 0.5, so that a wrong
/// layout shows). The
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
            extras: {
                let r = &config.recipe;
                let mut around_one = |n: usize| -> Vec<f32> {
                    matrix(1, n).data.iter().map(|x| 1.0 + 10.0 * x).collect()
                };
                let hs = config.head_size();
                let qk_norm = r.qk_norm.then(|| [around_one(hs), around_one(hs)]);
                let post_norms = r.post_norms.then(|| [around_one(d), around_one(d)]);
                // Biases as large as the projections' outputs (real Qwen2 biases reach tens in
                // k), so that a bias lost or misplaced changes the text.
                let mut bias =
                    |n: usize| -> Vec<f32> { matrix(1, n).data.iter().map(|x| 10.0 * x).collect() };
                let qkv_bias = r.qkv_bias.then(|| [bias(q), bias(kv), bias(kv)]);
                Extras {
                    qkv_bias,
                    qk_norm,
                    post_norms,
                }
            },
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
