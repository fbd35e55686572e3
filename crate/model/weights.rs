//! The model's weights as plain host arrays, before they go to a device.
//!
//! Every loader (llama2.c `.bin`, GGUF, Hugging Face safetensors, synthetic) produces a
//! [`HostWeights`] in llama2.c's layout: matrices row-major `[out, in]`, and RoPE on adjacent
//! pairs (2i, 2i+1).

use std::sync::Arc;

use crate::formats::{Blocks, TensorType};
use crate::model::config::LlamaConfig;

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

/// Reads a model file held outside the engine's memory (the page: the browser holds the download),
/// a range at a time.
pub trait ReadAt: Send + Sync {
    /// The file's length in bytes.
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Copy `out.len()` bytes from byte `start` (the caller keeps within the file) into `out`.
    fn read_at(&self, start: usize, out: &mut [u8]);
}

/// Where a model file's bytes are while it loads: in memory, where its f32 arrays are used in
/// place, or outside it ([`ReadAt`]), whence each tensor is copied in as it is read, so that the
/// engine's memory never holds the file beside the weights made from it (issue 43: SmolLM2's
/// Q4_1 file of 98 MB had the page's wasm memory at 233 MB after load, the file included).
#[derive(Clone)]
pub enum FileSource {
    Memory(Arc<FileBytes>),
    Outside(Arc<dyn ReadAt>),
}

impl FileSource {
    pub fn len(&self) -> usize {
        match self {
            FileSource::Memory(file) => file.len,
            FileSource::Outside(file) => file.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes `start..end` (within the file): borrowed from memory, or copied in from outside.
    pub fn range(&self, start: usize, end: usize) -> std::borrow::Cow<'_, [u8]> {
        match self {
            FileSource::Memory(file) => std::borrow::Cow::Borrowed(&file.bytes()[start..end]),
            FileSource::Outside(file) => {
                let mut out = vec![0; end - start];
                file.read_at(start, &mut out);
                std::borrow::Cow::Owned(out)
            }
        }
    }

    /// Copy bytes `start..start + out.len()` (within the file) into `out`.
    pub fn read_into(&self, start: usize, out: &mut [u8]) {
        match self {
            FileSource::Memory(file) => {
                out.copy_from_slice(&file.bytes()[start..start + out.len()])
            }
            FileSource::Outside(file) => file.read_at(start, out),
        }
    }

    /// `len` little-endian f32 at byte `start` (within the file): in place where they lie in
    /// memory ([`Values::in_file`]), else a copy.
    pub fn values(&self, start: usize, len: usize) -> Values {
        match self {
            FileSource::Memory(file) => Values::in_file(file, start, len),
            // Straight into the values' own memory, no copy of the bytes beside them.
            FileSource::Outside(file) => {
                let mut values = vec![0f32; len];
                file.read_at(start, bytemuck::cast_slice_mut(&mut values));
                if cfg!(target_endian = "big") {
                    for v in &mut values {
                        *v = f32::from_bits(u32::from_le(v.to_bits()));
                    }
                }
                Values::Owned(values)
            }
        }
    }
}

impl FileSource {
    /// The whole file in memory: itself, or a copy read in from outside.
    pub fn into_memory(self) -> Arc<FileBytes> {
        match self {
            FileSource::Memory(file) => file,
            FileSource::Outside(file) => {
                let mut bytes = FileBytes::zeroed(file.len());
                file.read_at(0, bytes.bytes_mut());
                Arc::new(bytes)
            }
        }
    }
}

impl From<Arc<FileBytes>> for FileSource {
    fn from(file: Arc<FileBytes>) -> FileSource {
        FileSource::Memory(file)
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

    /// The matrix with each head's rows reordered: row `r` of head `h` (of `heads` heads of
    /// `rows / heads` rows) taken from that head's row `source(head_size / 2, r)`. Blocks move as
    /// they are (a row is `cols / 32` whole blocks), so a quantized matrix stays exact.
    pub fn permute_head_rows(
        &self,
        heads: usize,
        source: impl Fn(usize, usize) -> usize,
    ) -> Matrix {
        let head_size = self.rows / heads;
        let order: Vec<usize> = (0..heads)
            .flat_map(|h| (0..head_size).map(move |r| (h, r)))
            .map(|(h, r)| h * head_size + source(head_size / 2, r))
            .collect();
        match &self.blocks {
            Some(b) => {
                let per_row = self.cols / crate::formats::BLOCK;
                let payload = b.format.payload();
                let mut out = Blocks::with_capacity(b.format, b.len());
                for &src in &order {
                    for k in src * per_row..(src + 1) * per_row {
                        let offset = b.offsets.get(k).copied().unwrap_or(0.0);
                        out.push(
                            &b.quants[k * payload..(k + 1) * payload],
                            b.scales[k],
                            offset,
                        );
                    }
                }
                Matrix::quantized(self.rows, self.cols, out.finish())
            }
            None => {
                let mut out = Vec::with_capacity(self.data.len());
                for &src in &order {
                    out.extend_from_slice(&self.data[src * self.cols..(src + 1) * self.cols]);
                }
                Matrix::new(self.rows, self.cols, out)
            }
        }
    }

    /// Rows stored for rotate-half RoPE (each head's first half holding the pairs' first values,
    /// as Hugging Face and llama.cpp's NEOX-style files do) put back in adjacent pairs, the layout
    /// this engine's RoPE rotates: head row `2i + half` comes from row `half * head_size / 2 + i`.
    pub fn halves_to_pairs(&self, heads: usize) -> Matrix {
        self.permute_head_rows(heads, |half_size, r| (r % 2) * half_size + r / 2)
    }

    /// The inverse of [`halves_to_pairs`](Self::halves_to_pairs).
    pub fn pairs_to_halves(&self, heads: usize) -> Matrix {
        self.permute_head_rows(heads, |half_size, r| (r % half_size) * 2 + r / half_size)
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
    /// The norms and biases the architecture adds.
    pub extras: Extras<Vec<f32>>,
}

/// The norms and biases a layer has beyond Llama's, as its architecture's recipe says
/// ([`Recipe`](crate::model::Recipe)); `V`: a weight, on the host or a device.
#[derive(Debug, Clone)]
pub struct Extras<V> {
    /// Biases of the q, k and v projections: `[q_dim]`, `[kv_dim]`, `[kv_dim]` (Qwen2).
    pub qkv_bias: Option<[V; 3]>,
    /// Each head of q and of k, before RoPE: `[head_size]`, the same weight for every head
    /// (Gemma 3, Qwen3).
    pub qk_norm: Option<[V; 2]>,
    /// Attention's output, and the feed-forward's, before each is added to the residual: `[dim]`
    /// (Gemma 3).
    pub post_norms: Option<[V; 2]>,
}

impl<V> Extras<V> {
    /// Llama's: none.
    pub const NONE: Extras<V> = Extras {
        qkv_bias: None,
        qk_norm: None,
        post_norms: None,
    };

    pub fn map<W>(&self, f: impl Fn(&V) -> W) -> Extras<W> {
        Extras {
            qkv_bias: self.qkv_bias.as_ref().map(|b| b.each_ref().map(&f)),
            qk_norm: self.qk_norm.as_ref().map(|n| n.each_ref().map(&f)),
            post_norms: self.post_norms.as_ref().map(|n| n.each_ref().map(&f)),
        }
    }
}

impl Extras<Vec<f32>> {
    /// How many values the weights hold.
    pub fn value_count(&self) -> usize {
        let sum = |v: &[Vec<f32>]| v.iter().map(Vec::len).sum::<usize>();
        self.qkv_bias.as_ref().map_or(0, |b| sum(b))
            + self.qk_norm.as_ref().map_or(0, |n| sum(n))
            + self.post_norms.as_ref().map_or(0, |n| sum(n))
    }
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
    /// A GGUF's tensor types and how many of each, for the conditions ([`crate::model::QuantPlan`]
    /// says what loading did to them); empty for the other formats.
    pub tensor_types: Vec<(TensorType, usize)>,
}
