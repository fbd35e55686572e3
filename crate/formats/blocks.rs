//! A matrix's blocks as the kernels read them: every block's payload one after another, and its
//! scale widened to f32, in one [`Format`].

use crate::formats::block::{BLOCK, Format, RunFormat};
use crate::with_format;

/// Row-major blocks of one [`Format`]: `quants[b * payload..]` holds block `b`'s payload and
/// `scales[b]` its scale (a row of `cols` values is `cols / 32` blocks).
#[derive(Debug, Clone, PartialEq)]
pub struct Blocks {
    pub format: Format,
    pub quants: Vec<u8>,
    pub scales: Vec<f32>,
}

impl Blocks {
    /// `data` (a whole number of blocks) quantized by `format`'s reference quantizer.
    pub fn quantize(format: Format, data: &[f32]) -> Blocks {
        with_format!(format, F => quantize::<F>(data))
    }

    /// A GGUF tensor's bytes of `format` blocks (an f16 scale, then the payload, each).
    pub fn from_gguf(format: Format, raw: &[u8]) -> Blocks {
        with_format!(format, F => from_gguf::<F>(raw))
    }

    /// Bytes the blocks take (payloads and f32 scales).
    pub fn bytes(&self) -> u64 {
        (self.quants.len() + 4 * self.scales.len()) as u64
    }

    /// How many blocks.
    pub fn len(&self) -> usize {
        self.scales.len()
    }

    pub fn is_empty(&self) -> bool {
        self.scales.is_empty()
    }

    pub fn dequantize(&self) -> Vec<f32> {
        let mut out = Vec::with_capacity(self.len() * BLOCK);
        self.dequantize_into(0..self.len(), &mut out);
        out
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
    }
}

fn from_gguf<F: RunFormat>(raw: &[u8]) -> Blocks {
    let blocks = raw.chunks_exact(F::BLOCK_BYTES);
    let mut quants = Vec::with_capacity(blocks.len() * F::PAYLOAD);
    let mut scales = Vec::with_capacity(blocks.len());
    for block in blocks {
        let (scale, payload) = F::split_block(block);
        scales.push(scale);
        quants.extend_from_slice(payload);
    }
    Blocks {
        format: F::FORMAT,
        quants,
        scales,
    }
}

fn dequantize_into<F: RunFormat>(b: &Blocks, range: std::ops::Range<usize>, out: &mut Vec<f32>) {
    let payloads =
        b.quants[range.start * F::PAYLOAD..range.end * F::PAYLOAD].chunks_exact(F::PAYLOAD);
    for (payload, &scale) in payloads.zip(&b.scales[range]) {
        out.extend((0..BLOCK).map(|i| (F::code(payload, i) - F::BIAS) as f32 * scale));
    }
}
