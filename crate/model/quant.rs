//! The weights' precision at load: `stored` (each tensor as the file stores it), or re-encoded to
//! `f32`, `q8` or `q4`, in one form for every backend.
//!
//! Q8_0 and Q4_0 blocks of 32 values along each row, with one f32 scale each (f32, not f16:
//! browsers without `shader-f16` cannot read f16), as [`Stored`]. The CPU kernels (`cpu/`) and
//! the GPU's (`gpu/`) both multiply straight from the blocks, never widening a whole matrix to
//! f32. (burn's CPU backend dequantized the whole weight on every
//! matmul: 3.8 tok/s for stories15M q8 against 280 in f32, and stored q4 as one byte per value.)

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::formats::{BLOCK, Blocks, Format, TensorType};
use crate::model::weights::{HostWeights, Matrix, Values};

/// The weight precision a user picks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Quant {
    /// Each tensor as the file stores it: the block types the kernels run ([`crate::formats::RunsAs`])
    /// in their blocks, exactly, and the others (f16, bf16, Q2_K, Q3_K) widened to f32.
    Stored,
    F32,
    Q8,
    Q4,
}

impl Quant {
    /// The block format this precision re-encodes matrices in (`None`: f32, or as stored).
    pub fn format(self) -> Option<Format> {
        match self {
            Quant::Stored | Quant::F32 => None,
            Quant::Q8 => Some(Format::Q8_0),
            Quant::Q4 => Some(Format::Q4_0),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Quant::Stored => "stored",
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
            "stored" => Ok(Quant::Stored),
            "f32" => Ok(Quant::F32),
            "q8" => Ok(Quant::Q8),
            "q4" => Ok(Quant::Q4),
            _ => Err(Error::Unsupported(format!(
                "quantization {s:?}: choose stored, f32, q8 or q4"
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

/// A matrix in the plan's precision, before a backend lays it out for its kernels.
#[derive(Debug, Clone)]
pub enum Stored {
    /// Often lying in the model file's bytes, used in place.
    F32(Values),
    /// Blocks of a [`crate::formats::Format`], one scale each.
    Blocks(Blocks),
}

impl Stored {
    /// Bytes the matrix takes.
    pub fn bytes(&self) -> u64 {
        match self {
            Stored::F32(d) => 4 * d.len() as u64,
            Stored::Blocks(blocks) => blocks.bytes(),
        }
    }

    /// How many values the matrix has.
    pub fn len(&self) -> usize {
        match self {
            Stored::F32(d) => d.len(),
            Stored::Blocks(blocks) => blocks.len() * crate::formats::BLOCK,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Rows `rows` of the matrix, whose rows are `cols` wide, as a matrix of their own.
    pub fn rows(&self, rows: std::ops::Range<usize>, cols: usize) -> Stored {
        match self {
            Stored::F32(d) => Stored::F32(d[rows.start * cols..rows.end * cols].to_vec().into()),
            Stored::Blocks(blocks) => {
                let per_row = cols / crate::formats::BLOCK;
                Stored::Blocks(blocks.slice(rows.start * per_row..rows.end * per_row))
            }
        }
    }
}

impl QuantPlan {
    /// `m` (`[rows, cols]`) in the plan's precision, consuming its f32 copy; its bytes are
    /// counted. As stored, a matrix in blocks keeps them and any other is f32; a matrix the file
    /// stores in blocks of the chosen format (without offsets) is used as it is.
    /// Whether [`apply`](Self::apply) keeps `m`'s values as they are: its blocks as stored, or
    /// widened to f32 (the same values), rather than re-encoded to another format.
    pub fn keeps_values(&self, m: &Matrix) -> bool {
        match (self.quant.format(), &m.blocks) {
            (None, _) => true,
            (Some(format), Some(blocks)) => blocks.format == format && blocks.offsets.is_empty(),
            (Some(_), None) => false,
        }
    }

    pub fn apply(&mut self, name: &str, m: Matrix) -> Stored {
        let cols = m.cols;
        let stored = match (self.quant.format(), m.blocks) {
            (None, Some(blocks)) if self.quant == Quant::Stored => Stored::Blocks(blocks),
            (Some(format), Some(blocks))
                if blocks.format == format && blocks.offsets.is_empty() =>
            {
                Stored::Blocks(blocks)
            }
            (format, blocks) => {
                let m = Matrix { blocks, ..m };
                match format {
                    None => Stored::F32(m.into_values()),
                    Some(_) if !cols.is_multiple_of(BLOCK) => {
                        self.exceptions.push(format!(
                            "{name}: width {cols} is not a multiple of {BLOCK}, kept in f32"
                        ));
                        Stored::F32(m.into_values())
                    }
                    Some(format) => Stored::Blocks(Blocks::quantize(format, &m.values())),
                }
            }
        };
        self.device_bytes += stored.bytes();
        stored
    }
}

impl QuantPlan {
    /// What loading does to a GGUF's tensor `types` (type, count) at this precision, as one note
    /// for the conditions: "GGUF tensors as stored: 210 Q4_1 (run by the Q4_0 kernels, exactly),
    /// 1 Q8_0, 61 F32".
    /// Both backends run the same stored types (`cpu/` and `gpu/layer.rs`).
    pub fn note_tensor_types(&mut self, types: &[(TensorType, usize)]) {
        if types.is_empty() {
            return;
        }
        let mut types = types.to_vec();
        types.sort_by_key(|&(kind, n)| (std::cmp::Reverse(n), kind.name()));
        let quant = self.quant;
        let each: Vec<String> = types
            .iter()
            .map(|&(kind, n)| {
                let name = kind.name();
                let what = match (quant, kind.runs_as()) {
                    _ if kind == TensorType::F32 => String::new(),
                    (Quant::Stored, Some(format)) if format.name() == name => String::new(),
                    (Quant::Stored, Some(format)) => {
                        format!(" (run by the {} kernels, exactly)", format.name())
                    }
                    (Quant::Stored | Quant::F32, _) => " (widened to f32)".to_string(),
                    (q, Some(format)) if q.format() == Some(format) && format.name() == name => {
                        " (used as they are)".to_string()
                    }
                    (q, _) => format!(" (re-encoded to {q})"),
                };
                format!("{n} {name}{what}")
            })
            .collect();
        let how = if quant == Quant::Stored {
            "as stored".to_string()
        } else {
            format!("at {quant}")
        };
        self.exceptions
            .push(format!("GGUF tensors {how}: {}", each.join(", ")));
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
