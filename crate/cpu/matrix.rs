//! A weight matrix in the form the CPU kernels read: f32, blocks of a format, or blocks packed 8
//! rows at a time (`packed/`).

use crate::cpu::isa::Isa;
use crate::cpu::matmul::WeightRows;
use crate::cpu::packed::{Packed, packs};
use crate::formats::{Activations, Blocks, Format};
use crate::model::{Stored, Values};

/// A weight matrix `[rows, cols]` (one row per output unit) in the form the CPU kernels read.
#[derive(Debug, Clone)]
pub enum HostMatrix {
    /// Often lying in the model file's bytes, used in place.
    F32(Values),
    /// Blocks of 32 with an f32 scale each (see [`Blocks`]).
    Blocks(Blocks),
    /// Blocks regrouped 8 rows at a time for the AVX2 and wasm kernels (`packed/`).
    Packed(Packed),
}

impl HostMatrix {
    /// Bytes the matrix takes.
    pub fn bytes(&self) -> u64 {
        match self {
            HostMatrix::F32(d) => 4 * d.len() as u64,
            HostMatrix::Blocks(blocks) => blocks.bytes(),
            HostMatrix::Packed(packed) => packed.bytes(),
        }
    }

    /// The matrix (`[rows, cols]`) in the layout `isa`'s kernels read fastest: blocks packed
    /// where [`packs`] says so (regrouped in their own memory), anything else as it is.
    pub fn packed_for(self, isa: Isa, rows: usize, cols: usize) -> HostMatrix {
        match self {
            HostMatrix::Blocks(blocks) if packs(isa, blocks.format) => {
                HostMatrix::Packed(Packed::pack(rows, cols, blocks))
            }
            other => other,
        }
    }

    /// How the activations this matrix multiplies are rounded to int8 (f32 weights take them as
    /// they are).
    pub fn activations(&self) -> Activations {
        match self {
            HostMatrix::F32(_) => Activations::Q8_0,
            HostMatrix::Blocks(blocks) => blocks.activations,
            HostMatrix::Packed(packed) => packed.activations(),
        }
    }

    /// Borrowed for one product.
    pub fn rows(&self) -> WeightRows<'_> {
        match self {
            HostMatrix::F32(d) => WeightRows::F32(d),
            HostMatrix::Blocks(b) => WeightRows::Blocks {
                format: b.format,
                quants: &b.quants,
                scales: &b.scales,
                offsets: &b.offsets,
            },
            HostMatrix::Packed(packed) => WeightRows::Packed(packed.view()),
        }
    }

    /// Q8_0 blocks of `data` (a multiple of 32 long): scale = max |x| / 127.
    pub fn q8(data: &[f32]) -> HostMatrix {
        HostMatrix::Blocks(Blocks::quantize(Format::Q8_0, data))
    }

    /// Q4_0 blocks of `data` (a multiple of 32 long): the value of largest magnitude maps to -8.
    pub fn q4(data: &[f32]) -> HostMatrix {
        HostMatrix::Blocks(Blocks::quantize(Format::Q4_0, data))
    }

    /// Append row `r`'s values (of `cols`) as f32 to `out`, as
    /// [`Matrix::extend_row`](crate::model::Matrix::extend_row) widens the
    /// blocks it was made from: the token embedding read from a tied classifier, whose table is
    /// then held once.
    pub fn extend_row(&self, r: usize, cols: usize, out: &mut Vec<f32>) {
        let per_row = cols / crate::formats::BLOCK;
        match self {
            HostMatrix::F32(d) => out.extend_from_slice(&d[r * cols..(r + 1) * cols]),
            HostMatrix::Blocks(b) => b.dequantize_into(r * per_row..(r + 1) * per_row, out),
            HostMatrix::Packed(p) => p.rows_blocks(r..r + 1).dequantize_into(0..per_row, out),
        }
    }

    /// The values back as f32 (tests, and checking a quantization's error).
    pub fn dequantize(&self) -> Vec<f32> {
        match self {
            HostMatrix::F32(d) => d.to_vec(),
            HostMatrix::Blocks(blocks) => blocks.dequantize(),
            HostMatrix::Packed(packed) => packed.blocks().dequantize(),
        }
    }
}

impl From<Stored> for HostMatrix {
    fn from(stored: Stored) -> HostMatrix {
        match stored {
            Stored::F32(values) => HostMatrix::F32(values),
            Stored::Blocks(blocks) => HostMatrix::Blocks(blocks),
        }
    }
}

/// A projection on the host: `[rows, cols]`, `y = W x`.
#[derive(Debug, Clone)]
pub struct HostLinear {
    pub rows: usize,
    pub cols: usize,
    pub weights: HostMatrix,
}
