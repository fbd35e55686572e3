//! The model's shape and its weights as plain host arrays, before they go to a device.
//!
//! Every loader (llama2.c `.bin`, Hugging Face safetensors, synthetic) produces a [`HostWeights`] in
//! llama2.c's layout: matrices row-major `[out, in]`, and RoPE on adjacent pairs (2i, 2i+1).

use std::sync::Arc;

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

/// A model file's bytes, held 4-byte aligned so that its f32 arrays can be used where they lie
/// instead of being copied: loading then holds the file once, not the file and a parsed copy.
pub struct FileBytes {
    words: Vec<u32>,
    len: usize,
}

impl FileBytes {
    /// Room for `len` bytes, zeroed, to be filled through [`bytes_mut`](Self::bytes_mut).
    pub fn zeroed(len: usize) -> FileBytes {
        FileBytes {
            words: vec![0; len.div_ceil(4)],
            len,
        }
    }

    /// Read a whole file straight into aligned memory.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn read(path: &std::path::Path) -> std::io::Result<FileBytes> {
        use std::io::Read;
        let mut file = std::fs::File::open(path)?;
        let len = usize::try_from(file.metadata()?.len())
            .map_err(|_| std::io::Error::other("file too large"))?;
        let mut out = FileBytes::zeroed(len);
        file.read_exact(out.bytes_mut())?;
        Ok(out)
    }

    pub fn bytes(&self) -> &[u8] {
        &bytemuck::cast_slice(&self.words)[..self.len]
    }

    pub fn bytes_mut(&mut self) -> &mut [u8] {
        &mut bytemuck::cast_slice_mut(&mut self.words)[..self.len]
    }
}

impl From<&[u8]> for FileBytes {
    fn from(bytes: &[u8]) -> FileBytes {
        let mut out = FileBytes::zeroed(bytes.len());
        out.bytes_mut().copy_from_slice(bytes);
        out
    }
}

impl From<Vec<u8>> for FileBytes {
    fn from(bytes: Vec<u8>) -> FileBytes {
        FileBytes::from(bytes.as_slice())
    }
}

impl std::fmt::Debug for FileBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "FileBytes({} bytes)", self.len)
    }
}

/// f32 values: owned, or `len` little-endian f32 lying in a model file at byte `start`.
#[derive(Debug, Clone)]
pub enum Values {
    Owned(Vec<f32>),
    File {
        file: Arc<FileBytes>,
        start: usize,
        len: usize,
    },
}

impl Values {
    /// `len` f32 at byte `start` of `file`: used in place where they are 4-byte aligned (and the
    /// machine is little-endian, as x86 and wasm are), copied otherwise. The caller has checked
    /// that the range lies in the file.
    pub fn in_file(file: &Arc<FileBytes>, start: usize, len: usize) -> Values {
        if start.is_multiple_of(4) && cfg!(target_endian = "little") {
            Values::File {
                file: file.clone(),
                start,
                len,
            }
        } else {
            Values::Owned(
                file.bytes()[start..start + 4 * len]
                    .chunks_exact(4)
                    .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
                    .collect(),
            )
        }
    }

    /// The values as an owned vector (a copy when they lie in the file).
    pub fn into_vec(self) -> Vec<f32> {
        match self {
            Values::Owned(v) => v,
            file => file.to_vec(),
        }
    }

    /// Mutable access, copying out of the file first.
    pub fn make_mut(&mut self) -> &mut Vec<f32> {
        if let Values::File { .. } = self {
            *self = Values::Owned(self.to_vec());
        }
        match self {
            Values::Owned(v) => v,
            Values::File { .. } => unreachable!(),
        }
    }
}

impl Default for Values {
    fn default() -> Values {
        Values::Owned(Vec::new())
    }
}

impl std::ops::Deref for Values {
    type Target = [f32];
    fn deref(&self) -> &[f32] {
        match self {
            Values::Owned(v) => v,
            Values::File { file, start, len } => {
                &bytemuck::cast_slice(&file.words)[start / 4..start / 4 + len]
            }
        }
    }
}

impl From<Vec<f32>> for Values {
    fn from(v: Vec<f32>) -> Values {
        Values::Owned(v)
    }
}

impl PartialEq for Values {
    fn eq(&self, other: &Values) -> bool {
        **self == **other
    }
}

/// Weights a file stores in blocks of 32 values with one scale (GGUF's Q8_0 and Q4_0), scales
/// widened to f32: the form the CPU kernels read, so such blocks are used as they are.
#[derive(Debug, Clone, PartialEq)]
pub enum Blocks {
    /// One i8 per value.
    Q8 { quants: Vec<i8>, scales: Vec<f32> },
    /// Two values per byte: byte `j` of a block holds value `j` (low nibble) and `j + 16` (high),
    /// each stored as `value + 8`.
    Q4 { quants: Vec<u8>, scales: Vec<f32> },
}

impl Blocks {
    /// Bytes the blocks take (values and f32 scales).
    pub fn bytes(&self) -> u64 {
        let (values, scales) = match self {
            Blocks::Q8 { quants, scales } => (quants.len(), scales.len()),
            Blocks::Q4 { quants, scales } => (quants.len(), scales.len()),
        };
        (values + 4 * scales) as u64
    }

    pub fn dequantize(&self) -> Vec<f32> {
        let blocks = match self {
            Blocks::Q8 { scales, .. } | Blocks::Q4 { scales, .. } => scales.len(),
        };
        let mut out = Vec::with_capacity(blocks * 32);
        self.dequantize_into(0..blocks, &mut out);
        out
    }

    /// Append the values of blocks `range` to `out`.
    pub fn dequantize_into(&self, range: std::ops::Range<usize>, out: &mut Vec<f32>) {
        match self {
            Blocks::Q8 { quants, scales } => {
                let quants = &quants[range.start * 32..range.end * 32];
                for (q, &s) in quants.chunks_exact(32).zip(&scales[range]) {
                    out.extend(q.iter().map(|&v| v as f32 * s));
                }
            }
            Blocks::Q4 { quants, scales } => {
                let quants = &quants[range.start * 16..range.end * 16];
                for (q, &s) in quants.chunks_exact(16).zip(&scales[range]) {
                    let value = |nibble: u8| (nibble as f32 - 8.0) * s;
                    out.extend(q.iter().map(|&b| value(b & 0x0f)));
                    out.extend(q.iter().map(|&b| value(b >> 4)));
                }
            }
        }
    }
}

/// A row-major matrix `[rows, cols]` = `[out, in]`: f32 values, or (`blocks`) the quantized
/// blocks a file stores, in which case `data` is empty and [`values`](Self::values) widens them.
#[derive(Debug, Clone, PartialEq)]
pub struct Matrix {
    pub rows: usize,
    pub cols: usize,
    pub data: Values,
    pub blocks: Option<Blocks>,
}

impl Matrix {
    pub fn new(rows: usize, cols: usize, data: impl Into<Values>) -> Self {
        let data = data.into();
        assert_eq!(
            rows * cols,
            data.len(),
            "matrix data does not fit its shape"
        );
        Self {
            rows,
            cols,
            data,
            blocks: None,
        }
    }

    /// A matrix kept in a file's quantized blocks.
    pub fn quantized(rows: usize, cols: usize, blocks: Blocks) -> Self {
        Self {
            rows,
            cols,
            data: Values::default(),
            blocks: Some(blocks),
        }
    }

    /// The values as f32 (widened from the blocks, when the matrix is kept in blocks).
    pub fn values(&self) -> std::borrow::Cow<'_, [f32]> {
        match &self.blocks {
            Some(blocks) => std::borrow::Cow::Owned(blocks.dequantize()),
            None => std::borrow::Cow::Borrowed(&self.data),
        }
    }

    /// Append row `r`'s values as f32 to `out` (widening just that row's blocks).
    pub fn extend_row(&self, r: usize, out: &mut Vec<f32>) {
        match &self.blocks {
            Some(blocks) => {
                let per_row = self.cols / 32;
                blocks.dequantize_into(r * per_row..(r + 1) * per_row, out);
            }
            None => out.extend_from_slice(&self.data[r * self.cols..(r + 1) * self.cols]),
        }
    }

    /// Bytes the matrix takes as held: its blocks, or 4 per f32 value.
    pub fn bytes(&self) -> u64 {
        match &self.blocks {
            Some(blocks) => blocks.bytes(),
            None => 4 * self.data.len() as u64,
        }
    }

    /// The values as f32, consuming the matrix.
    pub fn into_values(self) -> Values {
        match self.blocks {
            Some(blocks) => Values::Owned(blocks.dequantize()),
            None => self.data,
        }
    }

    /// Mutable f32 values (widening the blocks, or copying out of the file, first).
    pub fn make_mut(&mut self) -> &mut Vec<f32> {
        if let Some(blocks) = self.blocks.take() {
            self.data = Values::Owned(blocks.dequantize());
        }
        self.data.make_mut()
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
    /// What loading changed about the file's tensors (a GGUF's Q4_K widened to f32, say), for the
    /// conditions; empty when the file was f32 or f16/bf16.
    pub conversions: Vec<String>,
}
