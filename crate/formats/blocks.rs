//! A matrix's blocks as the kernels read them: every block's payload one after another, its
//! scale widened to f32, and an offset where the stored type has minimums ([`crate::formats::RunsAs`]),
//! in one [`Format`].

use crate::formats::block::{BLOCK, Format, RunFormat};
use crate::with_format;

/// Row-major blocks of one [`Format`]: `quants[b * payload..]` holds block `b`'s payload,
/// `scales[b]` its scale and `offsets[b]` its offset (a row of `cols` values is `cols / 32` blocks):
/// value `i` of block `b` is `(code_i - BIAS) * scales[b] + offsets[b]`. `offsets` is empty where
/// every offset is 0 (the formats' own blocks).
#[derive(Debug, Clone, PartialEq)]
pub struct Blocks {
    pub format: Format,
    pub quants: Vec<u8>,
    pub scales: Vec<f32>,
    pub offsets: Vec<f32>,
}

impl Blocks {
    /// No blocks yet, with room for `blocks` of them.
    pub fn with_capacity(format: Format, blocks: usize) -> Blocks {
        Blocks {
            format,
            quants: Vec::with_capacity(blocks * format.payload()),
            scales: Vec::with_capacity(blocks),
            offsets: Vec::with_capacity(blocks),
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
        }
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
        offsets: Vec::new(),
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
