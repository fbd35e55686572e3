//! Post-training quantization at load: `f32`, `q8`, `q4`, mapped to the burn scheme each backend runs.
//!
//! Measured on burn 0.22.1: the wgpu backend (native Vulkan and browser WebGPU) runs Q8S and Q4S with
//! the PackedU32 store. The CPU backend (flex) keeps quantized values as one i8 each (Native store),
//! so q4 would save no bytes over q8 there and is refused. Scales are F32 everywhere (browsers
//! without `shader-f16` cannot run F16 scales).

use std::fmt;
use std::str::FromStr;

use burn::prelude::*;
use burn::tensor::quantization::{QuantScheme, QuantStore, QuantValue, ScaleDtype};
use serde::{Deserialize, Serialize};

use crate::backend::BackendKind;
use crate::error::{Error, Result};

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

    fn bits(self) -> usize {
        match self {
            Quant::F32 => 32,
            Quant::Q8 => 8,
            Quant::Q4 => 4,
        }
    }

    /// The burn scheme for this choice on `backend` (`None` for f32), or why it cannot run there.
    pub fn scheme(self, backend: BackendKind) -> Result<Option<QuantScheme>> {
        let value = match self {
            Quant::F32 => return Ok(None),
            Quant::Q8 => QuantValue::Q8S,
            Quant::Q4 => QuantValue::Q4S,
        };
        let store = match (backend, self) {
            (BackendKind::Wgpu, _) => QuantStore::PackedU32(0),
            (BackendKind::Cpu, Quant::Q8) => QuantStore::Native,
            (BackendKind::Cpu, _) => {
                return Err(Error::Unsupported(format!(
                    "{} does not run on the CPU backend (it stores every quantized value as one \
                     byte, so {} would save nothing over q8); pick q8 or f32, or the wgpu backend",
                    self.name(),
                    self.name()
                )));
            }
        };
        Ok(Some(
            QuantScheme::default().with_value(value).with_store(store),
        ))
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

    /// Quantize a `[rows, cols]` weight with `scheme`: blocks of 32 along the rows where the width
    /// allows, one scale for the whole tensor where it does not.
    pub fn apply(
        &mut self,
        name: &str,
        tensor: Tensor<2>,
        scheme: Option<&QuantScheme>,
    ) -> Tensor<2> {
        let [rows, cols] = tensor.dims();
        let n = (rows * cols) as u64;
        let Some(scheme) = scheme else {
            self.device_bytes += 4 * n;
            return tensor;
        };
        // PackedU32 puts 32 / bits values in each word along the last dim.
        let pack = match scheme.store {
            QuantStore::PackedU32(_) => 32 / self.quant.bits(),
            _ => 1,
        };
        let value_bytes = n * self.quant.bits() as u64 / 8;
        if cols % BLOCK == 0 {
            self.device_bytes += value_bytes + 4 * n / BLOCK as u64;
            tensor.quantize_dynamic(&scheme.per_block([BLOCK as u8], ScaleDtype::F32))
        } else if cols % pack == 0 {
            self.exceptions.push(format!(
                "{name}: width {cols} is not a multiple of {BLOCK}, one scale per tensor"
            ));
            self.device_bytes += value_bytes + 4;
            tensor.quantize_dynamic(&scheme.per_tensor(ScaleDtype::F32))
        } else {
            self.exceptions.push(format!(
                "{name}: width {cols} cannot be packed, kept in f32"
            ));
            self.device_bytes += 4 * n;
            tensor
        }
    }
}
