//! llama2.c checkpoints: the legacy version-0 `.bin` that `run.c` reads.
//!
//! Layout: 7 little-endian i32 (`dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len`),
//! then f32 arrays. A negative `vocab_size` means a separate classifier follows at the very end.

use crate::error::{Error, Result};
use std::sync::Arc;

use crate::model::config::LLAMA2C_FIELDS;
use crate::model::{
    Extras, FileBytes, HostWeights, LayerWeights, LlamaConfig, Matrix, Recipe, Values,
};

pub const HEADER_BYTES: usize = 7 * 4;
/// `ak42`: the magic of llama2.c's newer export versions, which `run.c` itself does not read.
const NEW_FORMAT_MAGIC: u32 = 0x616b_3432;

/// Parse the header alone and check it against the file's byte length.
pub fn parse_header(bytes: &[u8]) -> Result<LlamaConfig> {
    if bytes.len() < HEADER_BYTES {
        return Err(Error::BadModel(format!(
            "{} bytes is too short for a llama2.c header ({HEADER_BYTES} bytes)",
            bytes.len()
        )));
    }
    if u32::from_le_bytes(bytes[0..4].try_into().unwrap()) == NEW_FORMAT_MAGIC {
        return Err(Error::BadModel(
            "this is a llama2.c version-1/2 export (magic \"ak42\"); export the legacy version-0 .bin".into(),
        ));
    }
    let field = |i: usize| i32::from_le_bytes(bytes[4 * i..4 * i + 4].try_into().unwrap());
    let positive = |i: usize, name: &str| -> Result<usize> {
        let v = field(i);
        if v <= 0 {
            return Err(Error::BadModel(format!(
                "header field {name} = {v} is not positive: not a llama2.c checkpoint"
            )));
        }
        Ok(v as usize)
    };
    let vocab = field(5);
    let config = LlamaConfig {
        recipe: Recipe::llama("llama"),
        dim: positive(0, "dim")?,
        hidden_dim: positive(1, "hidden_dim")?,
        n_layers: positive(2, "n_layers")?,
        n_heads: positive(3, "n_heads")?,
        n_kv_heads: positive(4, "n_kv_heads")?,
        vocab_size: vocab.unsigned_abs() as usize,
        seq_len: positive(6, "seq_len")?,
        shared_classifier: vocab > 0,
        rope_theta: 10000.0,
        rope_factors: None,
        norm_eps: 1e-5,
    };
    config.validate(&LLAMA2C_FIELDS)?;
    let (needed, allowed) = expected_floats(&config);
    // u64 throughout: in wasm `usize` is 32 bits, and a crafted header could make a usize size wrap
    // around to the file's length.
    let have = bytes.len() as u64 - HEADER_BYTES as u64;
    if !have.is_multiple_of(4) || !(have / 4 == needed || have / 4 == allowed) {
        return Err(Error::BadModel(format!(
            "header says {} bytes (dim {}, hidden_dim {}, n_layers {}, vocab_size {}, seq_len {}) but \
             the file has {}: truncated or not a llama2.c checkpoint",
            HEADER_BYTES as u64 + 4 * needed,
            config.dim,
            config.hidden_dim,
            config.n_layers,
            config.vocab_size,
            config.seq_len,
            bytes.len()
        )));
    }
    Ok(config)
}

/// Floats after the header: `(without the RoPE tables, with them)`. run.c's export writes the
/// `freq_cis` tables; we accept files with or without them.
fn expected_floats(c: &LlamaConfig) -> (u64, u64) {
    let weights = c.weight_count();
    (weights, weights + c.seq_len as u64 * c.head_size() as u64)
}

/// Load a whole llama2.c checkpoint from its bytes.
/// The matrices are used where they lie in `file` (see [`Values::in_file`]); only the norms are
/// copied out.
pub fn load(file: &Arc<FileBytes>) -> Result<HostWeights> {
    let bytes = file.bytes();
    let config = parse_header(bytes)?;
    let (needed, allowed) = expected_floats(&config);
    let has_rope_tables = (bytes.len() - HEADER_BYTES) as u64 / 4 == allowed;
    let mut reader = FloatReader {
        file,
        at: HEADER_BYTES,
    };
    let (d, h, l, kv, v) = (
        config.dim,
        config.hidden_dim,
        config.n_layers,
        config.kv_dim(),
        config.vocab_size,
    );

    let token_embedding = reader.matrix(v, d);
    // run.c stores each kind of weight for all layers together; regroup them per layer.
    let rms_att = reader.vectors(l, d);
    let wq = reader.per_layer(l, d * d);
    let wk = reader.per_layer(l, kv * d);
    let wv = reader.per_layer(l, kv * d);
    let wo = reader.per_layer(l, d * d);
    let rms_ffn = reader.vectors(l, d);
    let w1 = reader.per_layer(l, h * d);
    let w2 = reader.per_layer(l, d * h);
    let w3 = reader.per_layer(l, h * d);
    let rms_final = reader.floats(d);
    if has_rope_tables {
        reader.at += 4 * config.seq_len * config.head_size();
    }
    let classifier = (!config.shared_classifier).then(|| reader.matrix(v, d));
    debug_assert_eq!(
        (reader.at - HEADER_BYTES) as u64,
        4 * if has_rope_tables { allowed } else { needed }
    );

    let mut layers = Vec::with_capacity(l);
    let per_layer = rms_att
        .into_iter()
        .zip(wq)
        .zip(wk)
        .zip(wv)
        .zip(wo)
        .zip(rms_ffn)
        .zip(w1)
        .zip(w2)
        .zip(w3);
    for ((((((((rms_att, wq), wk), wv), wo), rms_ffn), w1), w2), w3) in per_layer {
        layers.push(LayerWeights {
            rms_att,
            wq: Matrix::new(d, d, wq),
            wk: Matrix::new(kv, d, wk),
            wv: Matrix::new(kv, d, wv),
            wo: Matrix::new(d, d, wo),
            rms_ffn,
            w1: Matrix::new(h, d, w1),
            w2: Matrix::new(d, h, w2),
            w3: Matrix::new(h, d, w3),
            extras: Extras::NONE,
        });
    }
    Ok(HostWeights {
        config,
        token_embedding,
        layers,
        rms_final,
        classifier,
        tensor_types: Vec::new(),
    })
}

/// Reads consecutive little-endian f32; the header check has already proved the length.
struct FloatReader<'a> {
    file: &'a Arc<FileBytes>,
    /// Byte offset in the file.
    at: usize,
}

impl FloatReader<'_> {
    /// The next `n` values, in place.
    fn values(&mut self, n: usize) -> Values {
        let values = Values::in_file(self.file, self.at, n);
        self.at += 4 * n;
        values
    }

    /// The next `n` values, copied (norm weights: small).
    fn floats(&mut self, n: usize) -> Vec<f32> {
        self.values(n).into_vec()
    }

    fn matrix(&mut self, rows: usize, cols: usize) -> Matrix {
        Matrix::new(rows, cols, self.values(rows * cols))
    }

    fn per_layer(&mut self, layers: usize, each: usize) -> Vec<Values> {
        (0..layers).map(|_| self.values(each)).collect()
    }

    fn vectors(&mut self, layers: usize, each: usize) -> Vec<Vec<f32>> {
        (0..layers).map(|_| self.floats(each)).collect()
    }
}

/// Write a checkpoint in the same format (used by the synthetic-weights generator and tests).
pub fn write(weights: &HostWeights, out: &mut impl std::io::Write) -> std::io::Result<()> {
    let c = &weights.config;
    let vocab = if c.shared_classifier {
        c.vocab_size as i32
    } else {
        -(c.vocab_size as i32)
    };
    let header = [
        c.dim as i32,
        c.hidden_dim as i32,
        c.n_layers as i32,
        c.n_heads as i32,
        c.n_kv_heads as i32,
        vocab,
        c.seq_len as i32,
    ];
    for v in header {
        out.write_all(&v.to_le_bytes())?;
    }
    let mut put = |xs: &[f32]| -> std::io::Result<()> {
        for x in xs {
            out.write_all(&x.to_le_bytes())?;
        }
        Ok(())
    };
    put(&weights.token_embedding.data)?;
    // Per kind of weight, all layers together, as run.c expects.
    let kinds: [fn(&LayerWeights) -> &[f32]; 9] = [
        |l| &l.rms_att,
        |l| &l.wq.data,
        |l| &l.wk.data,
        |l| &l.wv.data,
        |l| &l.wo.data,
        |l| &l.rms_ffn,
        |l| &l.w1.data,
        |l| &l.w2.data,
        |l| &l.w3.data,
    ];
    for pick in kinds {
        for layer in &weights.layers {
            put(pick(layer))?;
        }
    }
    put(&weights.rms_final)?;
    put(&rope_tables(c))?;
    if let Some(cls) = &weights.classifier {
        put(&cls.data)?;
    }
    Ok(())
}

/// run.c's `freq_cis_real` then `freq_cis_imag` tables, written for compatibility (run.c skips them).
fn rope_tables(c: &LlamaConfig) -> Vec<f32> {
    let (mut real, imag) = c.rope_cos_sin(0, c.seq_len);
    real.extend(imag);
    real
}
