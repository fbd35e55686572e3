//! Post-training quantization at load: `f32`, `q8`, `q4`, in one form for every backend.
//!
//! Q8_0 and Q4_0 blocks of 32 values along each row, with one f32 scale each (f32, not f16:
//! browsers without `shader-f16` cannot read f16), as [`HostMatrix`]. The CPU kernels in
//! `kernels.rs` and the wgpu kernels in `gpu_kernels.rs` both multiply straight from the blocks,
//! never widening a whole matrix to f32. (burn's CPU backend dequantized the whole weight on every
//! matmul: 3.8 tok/s for stories15M q8 against 280 in f32, and stored q4 as one byte per value.)

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::weights::{Blocks, HostWeights, Matrix, Values};

/// Values per scale in block quantization.
pub const BLOCK: usize = 32;

/// The weight precision a user picks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Quant {
    F32,
    Q8,
    Q4,
}

impl Quant {
    pub fn name(self) -> &'static str {
        match self {
            Quant::F32 => "f32",
            Quant::Q8 => "q8",
            Quant::Q4 => "q4",
        }
    }
}

impl fmt::Display for Quant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Quant {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "f32" => Ok(Quant::F32),
            "q8" => Ok(Quant::Q8),
            "q4" => Ok(Quant::Q4),
            _ => Err(Error::Unsupported(format!(
                "quantization {s:?}: choose f32, q8 or q4"
            ))),
        }
    }
}

/// What quantization did to each matrix, and the bytes the loaded weights take.
#[derive(Debug, Clone, Serialize)]
pub struct QuantPlan {
    pub quant: Quant,
    /// Bytes of all weights on the device (matrices as stored, plus f32 norms).
    pub device_bytes: u64,
    /// Matrices kept in f32 or quantized per tensor because their width does not fit the blocks.
    pub exceptions: Vec<String>,
}

impl QuantPlan {
    pub fn new(quant: Quant) -> Self {
        Self {
            quant,
            device_bytes: 0,
            exceptions: Vec::new(),
        }
    }

    /// Count `n` f32 values that are never quantized (norm weights).
    pub fn add_f32(&mut self, n: usize) {
        self.device_bytes += 4 * n as u64;
    }
}

/// A weight matrix `[rows, cols]` (one row per output unit) in the form the CPU kernels read.
#[derive(Debug, Clone)]
pub enum HostMatrix {
    /// Often lying in the model file's bytes, used in place.
    F32(Values),
    /// Q8_0 or Q4_0 blocks of 32 with an f32 scale each (see [`Blocks`]).
    Blocks(Blocks),
    /// Q8_0 or Q4_0 blocks regrouped 8 rows at a time for the AVX2 and wasm kernels (`packed.rs`).
    Packed(crate::packed::Packed),
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
    /// where [`crate::packed::packs`] says so (regrouped in their own memory), anything else as
    /// it is.
    pub fn packed_for(self, isa: crate::kernels::Isa, rows: usize, cols: usize) -> HostMatrix {
        use crate::packed::{Packed, packs};
        match self {
            HostMatrix::Blocks(blocks) if packs(isa, matches!(blocks, Blocks::Q4 { .. })) => {
                HostMatrix::Packed(Packed::pack(rows, cols, blocks))
            }
            other => other,
        }
    }

    /// Borrowed for one product.
    pub fn rows(&self) -> crate::kernels::WeightRows<'_> {
        use crate::kernels::WeightRows;
        match self {
            HostMatrix::F32(d) => WeightRows::F32(d),
            HostMatrix::Blocks(Blocks::Q8 { quants, scales }) => WeightRows::Q8 { quants, scales },
            HostMatrix::Blocks(Blocks::Q4 { quants, scales }) => WeightRows::Q4 { quants, scales },
            HostMatrix::Packed(packed) => WeightRows::Packed(packed),
        }
    }

    /// Q8_0 blocks of `data` (a multiple of 32 long): scale = max |x| / 127.
    pub fn q8(data: &[f32]) -> HostMatrix {
        let mut rows = crate::kernels::Q8Rows::default();
        crate::kernels::quantize_rows_q8(data, BLOCK, &mut rows);
        HostMatrix::Blocks(Blocks::Q8 {
            quants: rows.quants,
            scales: rows.scales,
        })
    }

    /// Q4_0 blocks of `data` (a multiple of 32 long): the value of largest magnitude maps to -8,
    /// so scale = that value / -8, and the others round to -8..=7.
    pub fn q4(data: &[f32]) -> HostMatrix {
        let mut quants = Vec::with_capacity(data.len() / 2);
        let mut scales = Vec::with_capacity(data.len() / BLOCK);
        for block in data.chunks_exact(BLOCK) {
            let extreme = block
                .iter()
                .copied()
                .fold(0.0f32, |m, v| if v.abs() > m.abs() { v } else { m });
            let scale = extreme / -8.0;
            let inv = if scale != 0.0 { 1.0 / scale } else { 0.0 };
            let code = |v: f32| ((v * inv).round() + 8.0).clamp(0.0, 15.0) as u8;
            scales.push(scale);
            let (lo, hi) = block.split_at(BLOCK / 2);
            quants.extend(lo.iter().zip(hi).map(|(&l, &h)| code(l) | (code(h) << 4)));
        }
        HostMatrix::Blocks(Blocks::Q4 { quants, scales })
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

/// A projection on the host: `[rows, cols]`, `y = W x`.
#[derive(Debug, Clone)]
pub struct HostLinear {
    pub rows: usize,
    pub cols: usize,
    pub weights: HostMatrix,
}

impl QuantPlan {
    /// Put `m` in the plan's form for the CPU kernels, block by block, consuming the f32 copy.
    /// A matrix the file stores in blocks of the chosen kind is used as it is.
    pub fn apply_host(&mut self, name: &str, m: Matrix) -> HostLinear {
        let (rows, cols) = (m.rows, m.cols);
        let weights = match (self.quant, m.blocks) {
            (Quant::Q8, Some(blocks @ Blocks::Q8 { .. }))
            | (Quant::Q4, Some(blocks @ Blocks::Q4 { .. })) => HostMatrix::Blocks(blocks),
            (quant, blocks) => {
                let m = Matrix { blocks, ..m };
                match quant {
                    Quant::F32 => HostMatrix::F32(m.into_values()),
                    _ if cols % BLOCK != 0 => {
                        self.exceptions.push(format!(
                            "{name}: width {cols} is not a multiple of {BLOCK}, kept in f32"
                        ));
                        HostMatrix::F32(m.into_values())
                    }
                    Quant::Q8 => HostMatrix::q8(&m.values()),
                    Quant::Q4 => HostMatrix::q4(&m.values()),
                }
            }
        };
        self.device_bytes += weights.bytes();
        HostLinear {
            rows,
            cols,
            weights,
        }
    }
}

/// Quantization blocks need widths that are multiples of [`BLOCK`]. A hidden size that is not one
/// (stories260K's 172) is padded with zero units: `w1` and `w3` get zero rows, `w2` zero columns,
/// so each padded unit computes `silu(0) * 0 = 0` and adds nothing. The result is exact.
pub fn pad_hidden_to_blocks(weights: &mut HostWeights) {
    let hidden = weights.config.hidden_dim;
    let padded = hidden.div_ceil(BLOCK) * BLOCK;
    if padded == hidden {
        return;
    }
    for layer in &mut weights.layers {
        for w in [&mut layer.w1, &mut layer.w3] {
            let len = padded * w.cols;
            w.make_mut().resize(len, 0.0);
            w.rows = padded;
        }
        let w2 = &layer.w2;
        let mut data = Vec::with_capacity(w2.rows * padded);
        for row in w2.values().chunks_exact(hidden) {
            data.extend_from_slice(row);
            data.extend(std::iter::repeat_n(0.0, padded - hidden));
        }
        layer.w2 = Matrix::new(w2.rows, padded, data);
    }
    weights.config.hidden_dim = padded;
}
