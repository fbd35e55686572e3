//! The model's shape and its weights as plain host arrays, before they go to a device.
//!
//! Every loader (llama2.c `.bin`, Hugging Face safetensors, synthetic) produces a [`HostWeights`] in
//! llama2.c's layout: matrices row-major `[out, in]`, and RoPE on adjacent pairs (2i, 2i+1).

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
const MAX_VOCAB: usize = 1 << 20;
const MAX_SEQ_LEN: usize = 1 << 20;

impl LlamaConfig {
    pub fn head_size(&self) -> usize {
        self.dim / self.n_heads
    }

    pub fn kv_dim(&self) -> usize {
        self.n_kv_heads * self.head_size()
    }

    /// Reject shapes that cannot be a Llama model, before anything is allocated.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::BadModel(m));
        let fields = [
            ("dim", self.dim, MAX_DIM),
            ("hidden_dim", self.hidden_dim, 4 * MAX_DIM),
            ("n_layers", self.n_layers, MAX_LAYERS),
            ("n_heads", self.n_heads, MAX_DIM),
            ("n_kv_heads", self.n_kv_heads, MAX_DIM),
            ("vocab_size", self.vocab_size, MAX_VOCAB),
            ("seq_len", self.seq_len, MAX_SEQ_LEN),
        ];
        for (name, value, max) in fields {
            if value == 0 || value > max {
                return bad(format!(
                    "header field {name} = {value} is outside 1..={max}"
                ));
            }
        }
        if !self.dim.is_multiple_of(self.n_heads) {
            return bad(format!(
                "dim {} is not a multiple of n_heads {}",
                self.dim, self.n_heads
            ));
        }
        if !self.n_heads.is_multiple_of(self.n_kv_heads) {
            return bad(format!(
                "n_heads {} is not a multiple of n_kv_heads {}",
                self.n_heads, self.n_kv_heads
            ));
        }
        if !self.head_size().is_multiple_of(2) {
            return bad(format!(
                "head size {} is odd; RoPE needs pairs",
                self.head_size()
            ));
        }
        Ok(())
    }

    /// cos and sin of `pos * theta^(-2i / head_size)` for every position and pair, `[seq_len,
    /// head_size / 2]` row-major, in f32 like run.c.
    pub fn rope_cos_sin(&self) -> (Vec<f32>, Vec<f32>) {
        let (hs, half) = (self.head_size(), self.head_size() / 2);
        let mut cos = Vec::with_capacity(self.seq_len * half);
        let mut sin = Vec::with_capacity(self.seq_len * half);
        for pos in 0..self.seq_len {
            for i in 0..half {
                let freq = 1.0 / self.rope_theta.powf((2 * i) as f32 / hs as f32);
                let angle = pos as f32 * freq;
                cos.push(angle.cos());
                sin.push(angle.sin());
            }
        }
        (cos, sin)
    }

    /// How many parameters the model has (embedding counted once when shared).
    pub fn parameter_count(&self) -> usize {
        let (d, h, kv) = (self.dim, self.hidden_dim, self.kv_dim());
        let per_layer = 2 * d + d * d + 2 * kv * d + d * d + 3 * h * d;
        let classifier = if self.shared_classifier {
            0
        } else {
            self.vocab_size * d
        };
        self.vocab_size * d + self.n_layers * per_layer + d + classifier
    }
}

/// A row-major matrix `[rows, cols]` = `[out, in]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Matrix {
    pub rows: usize,
    pub cols: usize,
    pub data: Vec<f32>,
}

impl Matrix {
    pub fn new(rows: usize, cols: usize, data: Vec<f32>) -> Self {
        assert_eq!(
            rows * cols,
            data.len(),
            "matrix data does not fit its shape"
        );
        Self { rows, cols, data }
    }

    /// The transpose, `[in, out]`, which is what `x.matmul(w)` wants.
    pub fn transposed(&self) -> Matrix {
        let mut out = vec![0.0; self.data.len()];
        for r in 0..self.rows {
            for c in 0..self.cols {
                out[c * self.rows + r] = self.data[r * self.cols + c];
            }
        }
        Matrix::new(self.cols, self.rows, out)
    }
}

/// One transformer block's weights.
#[derive(Debug, Clone)]
pub struct LayerWeights {
    pub rms_att: Vec<f32>,
    pub wq: Matrix,
    pub wk: Matrix,
    pub wv: Matrix,
    pub wo: Matrix,
    pub rms_ffn: Vec<f32>,
    /// Gate projection (`gate_proj` in Hugging Face naming).
    pub w1: Matrix,
    /// Down projection.
    pub w2: Matrix,
    /// Up projection.
    pub w3: Matrix,
}

/// A whole model's weights on the host.
#[derive(Debug, Clone)]
pub struct HostWeights {
    pub config: LlamaConfig,
    pub token_embedding: Matrix,
    pub layers: Vec<LayerWeights>,
    pub rms_final: Vec<f32>,
    /// A separate classifier `[vocab, dim]`, or `None` when it is the embedding.
    pub classifier: Option<Matrix>,
}
