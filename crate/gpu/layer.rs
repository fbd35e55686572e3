//! Weights as the GPU holds them: a layer's matrices and vectors in one buffer of u32 words, each
//! matrix in the stored form its type runs as (`shaders/common.wgsl`: f32, or blocks of 32 codes
//! with an f32 scale and, where the type has minimums, an f32 offset), and the description the
//! kernels read to find them (`Desc`).
//!
//! Every stored type is held as tightly as its block allows, none widened: Q8_0 in 36 bytes a
//! block of 32 (34 in the file), Q4_0 in 20 (18), Q4_1 and Q4_K in 24 (20 and 18), Q5_0 in 24
//! (22), Q5_1 and Q5_K in 28 (24 and 22), Q6_K in 32 (26.25). Scales stay f32 (a K-quant's
//! `d * sc` has more bits than an f16 holds), which is the whole difference.

use crate::formats::{BLOCK, Blocks, Format, Q5_0Run, RunFormat};
use crate::model::Stored;

/// The stored forms, as `common.wgsl` names them.
const F32: u32 = 0;
const Q8: u32 = 1;
const Q4: u32 = 2;
const Q5: u32 = 3;
const Q6: u32 = 4;
/// No offsets, no vector.
pub const NONE: u32 = u32::MAX;

/// u32 words of `Desc`: 7 matrices of 8, then 3 vec4 of vectors and the layer's attention.
pub const DESC_WORDS: usize = 68;
const VECTORS: usize = 56;

/// The matrices' places in `Desc` (common.wgsl's WQ.. W3).
pub const WQ: usize = 0;
pub const WK: usize = 1;
pub const WV: usize = 2;
pub const WO: usize = 3;
pub const W1: usize = 4;
pub const W2: usize = 5;
pub const W3: usize = 6;
/// The vectors' (common.wgsl's ATT_NORM.. POST_FFN).
pub const ATT_NORM: usize = 0;
pub const FFN_NORM: usize = 1;
pub const BQ: usize = 2;
pub const BK: usize = 3;
pub const BV: usize = 4;
pub const QN: usize = 5;
pub const KN: usize = 6;
pub const POST_ATT: usize = 7;
pub const POST_FFN: usize = 8;

/// Words being gathered into one buffer, and the description of what lies where.
pub struct Packed {
    pub words: Vec<u32>,
    pub desc: [u32; DESC_WORDS],
}

impl Default for Packed {
    fn default() -> Self {
        let mut desc = [0; DESC_WORDS];
        desc[VECTORS..VECTORS + 9].fill(NONE);
        Packed {
            words: Vec::new(),
            desc,
        }
    }
}

/// Words of one block in the stored form of `format`.
fn block_words(format: Format) -> usize {
    match format {
        Format::Q8_0 => 8,
        Format::Q4_0 => 4,
        Format::Q5_0 => 5,
        Format::Q6K => 7,
    }
}

fn le_words(bytes: &[u8], out: &mut [u32]) {
    for (w, b) in out.iter_mut().zip(bytes.chunks_exact(4)) {
        *w = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    }
}

/// One block's payload (`formats`' run forms) as the GPU's words.
fn gpu_block(format: Format, payload: &[u8], out: &mut [u32]) {
    match format {
        // Signed bytes; Q4_0's nibbles (byte j: value j low, j + 16 high), as they are.
        Format::Q8_0 | Format::Q4_0 => le_words(payload, out),
        // The nibbles as they are, then the fifth bits in GGUF's order (bit i for value i).
        Format::Q5_0 => {
            le_words(&payload[..BLOCK / 2], &mut out[..4]);
            out[4] = (0..BLOCK).fold(0, |high, i| {
                high | ((Q5_0Run::code(payload, i) as u32 >> 4) & 1) << i
            });
        }
        // Codes -32..=31 as value + 32: Q4_0's nibbles of the low four bits, two words of the top
        // two (value i at bits 2i of the first word for i < 16, of the second after), and a word
        // with the two 16-value scales.
        Format::Q6K => {
            let code = |i: usize| (payload[i] as i8 as i32 + 32) as u32;
            let mut nibbles = [0u8; BLOCK / 2];
            for (j, n) in nibbles.iter_mut().enumerate() {
                *n = (code(j) & 15) as u8 | ((code(j + 16) & 15) << 4) as u8;
            }
            le_words(&nibbles, &mut out[..4]);
            out[4] = (0..16).fold(0, |top, i| top | (code(i) >> 4) << (2 * i));
            out[5] = (0..16).fold(0, |top, i| top | (code(i + 16) >> 4) << (2 * i));
            out[6] = payload[BLOCK] as u32 | (payload[BLOCK + 1] as u32) << 8;
        }
    }
}

/// Bytes one output column of `m` (`k` inputs) takes as held.
pub fn row_bytes(m: &Stored, k: usize) -> u64 {
    let per_block = match m {
        Stored::F32(_) => return 4 * k as u64,
        Stored::Blocks(b) => 4 * (block_words(b.format) + 1 + !b.offsets.is_empty() as usize),
    };
    (k / BLOCK * per_block) as u64
}

impl Packed {
    fn at(&self) -> u32 {
        self.words.len() as u32
    }

    fn floats(&mut self, values: impl IntoIterator<Item = f32>) {
        self.words.extend(values.into_iter().map(f32::to_bits));
    }

    /// A vector (a norm's weight, a bias) in place `slot` of the description.
    pub fn vector(&mut self, slot: usize, v: &[f32]) {
        self.desc[VECTORS + slot] = self.at();
        self.floats(v.iter().copied());
    }

    /// The layer's attention: its window (0: every earlier position) and whether it rotates by the
    /// local base's angles.
    pub fn attention(&mut self, window: Option<usize>, local: bool) {
        self.desc[VECTORS + 10] = window.unwrap_or(0) as u32;
        self.desc[VECTORS + 11] = local as u32;
    }

    /// Matrix `m` (`[n, k]`: `n` outputs of `k` inputs) in place `slot` of the description, its
    /// outputs numbered from `col0`. Its words lie by output column: word `w` of block `b` of
    /// column `j` at `(words a block * b + w) * n + j`, so that the units of a workgroup, one
    /// column each, read neighbouring words.
    pub fn matrix(&mut self, slot: usize, m: Stored, n: usize, k: usize, col0: usize) {
        let codes = self.at();
        let (format, scales, offsets) = match m {
            Stored::F32(values) => {
                let values = &values[..];
                self.words.resize(self.words.len() + n * k, 0);
                let out = &mut self.words[codes as usize..];
                for (j, row) in values.chunks_exact(k).enumerate() {
                    for (i, v) in row.iter().enumerate() {
                        out[i * n + j] = v.to_bits();
                    }
                }
                (F32, NONE, NONE)
            }
            Stored::Blocks(blocks) => self.blocks(&blocks, n, k),
        };
        let d = &mut self.desc[8 * slot..8 * slot + 8];
        d.copy_from_slice(&[
            format,
            codes,
            scales,
            offsets,
            n as u32,
            k as u32,
            col0 as u32,
            0,
        ]);
    }

    /// Blocks of `n` rows of `k / 32` blocks each, by column; returns (form, scales, offsets).
    fn blocks(&mut self, b: &Blocks, n: usize, k: usize) -> (u32, u32, u32) {
        let per_row = k / BLOCK;
        let words = block_words(b.format);
        let payload = b.format.payload();
        let codes = self.words.len();
        self.words.resize(codes + words * per_row * n, 0);
        let mut block = [0u32; 8];
        for j in 0..n {
            for i in 0..per_row {
                let at = j * per_row + i;
                gpu_block(
                    b.format,
                    &b.quants[at * payload..(at + 1) * payload],
                    &mut block[..words],
                );
                for (w, &word) in block[..words].iter().enumerate() {
                    self.words[codes + (words * i + w) * n + j] = word;
                }
            }
        }
        let by_column = |values: &[f32], out: &mut Vec<u32>| {
            let at = out.len() as u32;
            out.resize(out.len() + per_row * n, 0);
            let base = at as usize;
            for j in 0..n {
                for i in 0..per_row {
                    out[base + i * n + j] = values[j * per_row + i].to_bits();
                }
            }
            at
        };
        let scales = by_column(&b.scales, &mut self.words);
        let offsets = if b.offsets.is_empty() {
            NONE
        } else {
            by_column(&b.offsets, &mut self.words)
        };
        let form = match b.format {
            Format::Q8_0 => Q8,
            Format::Q4_0 => Q4,
            Format::Q5_0 => Q5,
            Format::Q6K => Q6,
        };
        (form, scales, offsets)
    }

    /// Bytes the words take.
    pub fn bytes(&self) -> u64 {
        4 * self.words.len() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::with_format;

    /// A GPU block's values as `common.wgsl`'s `block_weights` reads them, in Rust.
    fn gpu_values(format: Format, words: &[u32], scale: f32) -> Vec<f32> {
        let byte = |w: u32, b: u32| (w >> (8 * b)) & 0xff;
        let signed = |w: u32, b: u32| (byte(w, b) as u8 as i8) as f32;
        (0..32u32)
            .map(|i| {
                let (w, b) = ((i % 16 / 4) as usize, i % 4);
                let nibble = if i < 16 {
                    byte(words[w], b) & 15
                } else {
                    byte(words[w], b) >> 4
                };
                match format {
                    Format::Q8_0 => signed(words[(i / 4) as usize], i % 4) * scale,
                    Format::Q4_0 => (nibble as f32 - 8.0) * scale,
                    Format::Q5_0 => ((nibble | ((words[4] >> i) & 1) << 4) as f32 - 16.0) * scale,
                    Format::Q6K => {
                        let top = words[4 + (i / 16) as usize] >> (2 * (i % 16));
                        let code = (nibble | (top & 3) << 4) as f32 - 32.0;
                        code * signed(words[6], i / 16) * scale
                    }
                }
            })
            .collect()
    }

    #[test]
    fn every_block_form_reads_back_as_its_run_format_says() {
        let values: Vec<f32> = (0..32)
            .map(|i| ((i * 37 % 23) as f32 - 11.0) * 0.13)
            .collect();
        for format in [Format::Q8_0, Format::Q4_0, Format::Q5_0, Format::Q6K] {
            let blocks = Blocks::quantize(format, &values);
            let (q, scale) = (&blocks.quants, blocks.scales[0]);
            let want: Vec<f32> = with_format!(format, F => (0..32)
                .map(|i| (F::code(q, i) - F::BIAS) as f32 * scale)
                .collect());
            let mut words = [0u32; 8];
            gpu_block(format, q, &mut words[..block_words(format)]);
            assert_eq!(gpu_values(format, &words, scale), want, "{format:?}");
        }
    }
}
