//! A matrix's blocks as the kernels read them: every block's payload one after another, its
//! scale widened to f32, and an offset where the stored type has minimums ([`crate::formats::RunsAs`]),
//! in one [`Format`].

use crate::formats::block::{BLOCK, Format, RunFormat};
use crate::with_format;

/// How the activations a matrix multiplies are rounded to int8: as llama.cpp rounds them for the
/// type the matrix was stored in (its `vec_dot_type`), so that the integer sums are llama.cpp's and
/// only the order of the f32 additions differs. Both keep `127 / max |x|` as the inverse and round
/// `x * inverse` to the nearest code, ties to even (llama.cpp's x86 quantizers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Activations {
    /// A scale per 32 values, `max |x| / 127` kept rounded to f16 (llama.cpp's Q8_0, and Q8_1 with
    /// its block sums): for Q8_0, Q4_0, Q5_0, Q4_1, Q5_1 and every re-encoding.
    #[default]
    Q8_0,
    /// One f32 scale per 256 values, `1 / inverse` (llama.cpp's Q8_K): for the K-quants' matrices
    /// (Q4_K, Q5_K, Q6_K), whose rows are whole 256-value super-blocks. The kernels still read a
    /// scale per 32 values: eight blocks share it.
    Q8K,
}

impl Activations {
    /// The values that share one scale.
    pub fn span(self) -> usize {
        match self {
            Activations::Q8_0 => BLOCK,
            Activations::Q8K => 256,
        }
    }
}

/// Row-major blocks of one [`Format`]: `quants[b * payload..]` holds block `b`'s payload,
/// `scales[b]` its scale and `offsets[b]` its offset (a row of `cols` values is `cols / 32` blocks):
/// value `i` of block `b` is `(code_i - BIAS) * scales[b] + offsets[b]`. `offsets` is empty where
/// every offset is 0 (the formats' own blocks). `activations`: how the activations they multiply
/// are rounded.
#[derive(Debug, Clone, PartialEq)]
pub struct Blocks {
    pub format: Format,
    pub quants: Vec<u8>,
    pub scales: Vec<f32>,
    pub offsets: Vec<f32>,
    pub activations: Activations,
}

impl Blocks {
    /// No blocks yet, with room for `blocks` of them.
    pub fn with_capacity(format: Format, blocks: usize) -> Blocks {
        Blocks {
            format,
            quants: Vec::with_capacity(blocks * format.payload()),
            scales: Vec::with_capacity(blocks),
            offsets: Vec::with_capacity(blocks),
            activations: Activations::Q8_0,
        }
    }

    /// Append one block (fill with `push`, then [`finish`](Self::finish)).
    pub fn push(&mut self, payload: &[u8], scale: f32, offset: f32) {
        debug_assert_eq!(payload.len(), self.format.payload());
        self.quants.extend_from_slice(payload);
        self.scales.push(scale);
        self.offsets.push(offset);
    }

    /// The blocks [`push`](Self::push) filled, their offsets dropped where all are 0.
    pub fn finish(mut self) -> Blocks {
        if self.offsets.iter().all(|&o| o == 0.0) {
            self.offsets = Vec::new();
        }
        self
    }

    /// `data` (a whole number of blocks) quantized by `format`'s reference quantizer.
    pub fn quantize(format: Format, data: &[f32]) -> Blocks {
        with_format!(format, F => quantize::<F>(data))
    }

    /// Bytes the blocks take (payloads, f32 scales and offsets).
    pub fn bytes(&self) -> u64 {
        (self.quants.len() + 4 * self.scales.len() + 4 * self.offsets.len()) as u64
    }

    /// How many blocks.
    pub fn len(&self) -> usize {
        self.scales.len()
    }

    pub fn is_empty(&self) -> bool {
        self.scales.is_empty()
    }

    /// Blocks `range` as blocks of their own.
    pub fn slice(&self, range: std::ops::Range<usize>) -> Blocks {
        let payload = self.format.payload();
        Blocks {
            format: self.format,
            quants: self.quants[range.start * payload..range.end * payload].to_vec(),
            scales: self.scales[range.clone()].to_vec(),
            offsets: if self.offsets.is_empty() {
                Vec::new()
            } else {
                self.offsets[range].to_vec()
            },
            activations: self.activations,
        }
    }

    pub fn dequantize(&self) -> Vec<f32> {
        let mut out = Vec::with_capacity(self.len() * BLOCK);
        self.dequantize_into(0..self.len(), &mut out);
        out
    }

    /// The same blocks as Q8_0's, exactly, offsets kept: each code less its bias as a signed byte
    /// (Q5_0's and Q4_0's fit; Q6_K's, times a half's scale, do not). For kernels that read
    /// one-byte codes only (wgpu's).
    pub fn to_q8_0(&self) -> Blocks {
        with_format!(self.format, F => to_q8_0::<F>(self))
    }

    /// Append the values of blocks `range` to `out`, by the format's reference.
    pub fn dequantize_into(&self, range: std::ops::Range<usize>, out: &mut Vec<f32>) {
        with_format!(self.format, F => dequantize_into::<F>(self, range, out))
    }
}

fn quantize<F: RunFormat>(data: &[f32]) -> Blocks {
    let blocks = data.len() / BLOCK;
    let mut quants = vec![0u8; blocks * F::PAYLOAD];
    let scales = data
        .chunks_exact(BLOCK)
        .zip(quants.chunks_exact_mut(F::PAYLOAD))
        .map(|(values, payload)| F::quantize_block(values, payload))
        .collect();
    Blocks {
        format: F::FORMAT,
        quants,
        scales,
        offsets: Vec::new(),
        activations: Activations::Q8_0,
    }
}

fn to_q8_0<F: RunFormat>(b: &Blocks) -> Blocks {
    assert!(
        F::FORMAT != Format::Q6K,
        "Q6_K's codes times their half's scale are not bytes"
    );
    let quants = b
        .quants
        .chunks_exact(F::PAYLOAD)
        .flat_map(|payload| (0..BLOCK).map(|i| (F::code(payload, i) - F::BIAS) as i8 as u8))
        .collect();
    Blocks {
        format: Format::Q8_0,
        quants,
        ..b.clone()
    }
}

fn dequantize_into<F: RunFormat>(b: &Blocks, range: std::ops::Range<usize>, out: &mut Vec<f32>) {
    let payloads =
        b.quants[range.start * F::PAYLOAD..range.end * F::PAYLOAD].chunks_exact(F::PAYLOAD);
    for (k, (payload, &scale)) in payloads.zip(&b.scales[range.clone()]).enumerate() {
        let offset = b.offsets.get(range.start + k).copied().unwrap_or(0.0);
        out.extend((0..BLOCK).map(|i| (F::code(payload, i) - F::BIAS) as f32 * scale + offset));
    }
}
