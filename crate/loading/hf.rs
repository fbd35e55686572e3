//! Hugging Face Llama checkpoints: `config.json` + `model.safetensors` (f32, f16 or bf16).
//!
//! HF stores `q_proj`/`k_proj` rows permuted for its rotate-half RoPE (the first half of each head holds
//! the "real" parts, the second half the "imaginary" ones). We undo that permutation at load so that
//! one RoPE, llama2.c's adjacent pairs, serves every format.

use safetensors::{Dtype, SafeTensors};
use serde::Deserialize;

use crate::error::{Error, Result};
use crate::model::config::FieldNames;
use crate::model::{Extras, HostWeights, LayerWeights, LlamaConfig, Matrix, Recipe};

/// `config.json`'s names for the fields, so that its errors quote them.
const HF_FIELDS: FieldNames = FieldNames {
    prefix: "config.json",
    names: [
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "vocab_size",
        "max_position_embeddings",
        "head_dim",
    ],
    key_prefix: None,
};

#[derive(Deserialize)]
struct HfConfig {
    hidden_size: usize,
    intermediate_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    num_key_value_heads: Option<usize>,
    vocab_size: usize,
    max_position_embeddings: usize,
    rms_norm_eps: Option<f32>,
    rope_theta: Option<f32>,
    tie_word_embeddings: Option<bool>,
    model_type: Option<String>,
}

/// Parse `config.json` into our config.
pub fn parse_config(json: &[u8]) -> Result<LlamaConfig> {
    let hf: HfConfig = serde_json::from_slice(json)
        .map_err(|e| Error::BadModel(format!("config.json is not a Llama config: {e}")))?;
    if let Some(kind) = &hf.model_type
        && kind != "llama"
    {
        return Err(Error::BadModel(format!(
            "config.json model_type is {kind:?}, not \"llama\""
        )));
    }
    let config = LlamaConfig {
        recipe: Recipe::llama("llama"),
        dim: hf.hidden_size,
        hidden_dim: hf.intermediate_size,
        n_layers: hf.num_hidden_layers,
        n_heads: hf.num_attention_heads,
        n_kv_heads: hf.num_key_value_heads.unwrap_or(hf.num_attention_heads),
        vocab_size: hf.vocab_size,
        seq_len: hf.max_position_embeddings,
        shared_classifier: hf.tie_word_embeddings.unwrap_or(false),
        rope_theta: hf.rope_theta.unwrap_or(10000.0),
        rope_factors: None,
        norm_eps: hf.rms_norm_eps.unwrap_or(1e-5),
    };
    config.validate(&HF_FIELDS)?;
    Ok(config)
}

/// Load `config.json` + `model.safetensors` bytes.
pub fn load(config_json: &[u8], safetensors: &[u8]) -> Result<HostWeights> {
    let mut config = parse_config(config_json)?;
    let st = SafeTensors::deserialize(safetensors)
        .map_err(|e| Error::BadModel(format!("not a readable safetensors file: {e}")))?;
    let (d, h, kv, v) = (
        config.dim,
        config.hidden_dim,
        config.kv_dim(),
        config.vocab_size,
    );
    let get = |name: &str, rows: usize, cols: usize| tensor(&st, name, &[rows, cols]);
    let vector = |name: &str| tensor(&st, name, &[d]).map(|m| m.data.into_vec());

    let token_embedding = get("model.embed_tokens.weight", v, d)?;
    let mut layers = Vec::with_capacity(config.n_layers);
    for i in 0..config.n_layers {
        let p = format!("model.layers.{i}");
        let wq = get(&format!("{p}.self_attn.q_proj.weight"), d, d)?;
        let wk = get(&format!("{p}.self_attn.k_proj.weight"), kv, d)?;
        layers.push(LayerWeights {
            rms_att: vector(&format!("{p}.input_layernorm.weight"))?,
            wq: unpermute_rope_rows(&wq, config.n_heads),
            wk: unpermute_rope_rows(&wk, config.n_kv_heads),
            wv: get(&format!("{p}.self_attn.v_proj.weight"), kv, d)?,
            wo: get(&format!("{p}.self_attn.o_proj.weight"), d, d)?,
            rms_ffn: vector(&format!("{p}.post_attention_layernorm.weight"))?,
            w1: get(&format!("{p}.mlp.gate_proj.weight"), h, d)?,
            w2: get(&format!("{p}.mlp.down_proj.weight"), d, h)?,
            w3: get(&format!("{p}.mlp.up_proj.weight"), h, d)?,
            extras: Extras::NONE,
        });
    }
    let rms_final = vector("model.norm.weight")?;
    // Some tied checkpoints still ship lm_head; others omit it even without the flag.
    let classifier = match st.tensor("lm_head.weight") {
        Ok(_) if !config.shared_classifier => Some(get("lm_head.weight", v, d)?),
        Ok(_) => None,
        Err(_) => {
            config.shared_classifier = true;
            None
        }
    };
    Ok(HostWeights {
        config,
        token_embedding,
        layers,
        rms_final,
        classifier,
        tensor_types: Vec::new(),
    })
}

/// Read one tensor as f32, checking that its shape is exactly `shape` (a transposed matrix has the
/// right element count but the wrong shape, and would load as garbage).
fn tensor(st: &SafeTensors, name: &str, shape: &[usize]) -> Result<Matrix> {
    let view = st
        .tensor(name)
        .map_err(|_| Error::BadModel(format!("safetensors file has no tensor {name}")))?;
    if view.shape() != shape {
        return Err(Error::BadModel(format!(
            "tensor {name} has shape {:?}, expected {shape:?}",
            view.shape()
        )));
    }
    let (rows, cols) = match *shape {
        [rows, cols] => (rows, cols),
        [n] => (1, n),
        _ => unreachable!("weights are vectors or matrices"),
    };
    let raw = view.data();
    let data: Vec<f32> = match view.dtype() {
        Dtype::F32 => raw
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
            .collect(),
        Dtype::F16 => raw
            .chunks_exact(2)
            .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
            .collect(),
        Dtype::BF16 => raw
            .chunks_exact(2)
            .map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32())
            .collect(),
        other => {
            return Err(Error::Unsupported(format!(
                "tensor {name} is {other:?}; only F32, F16 and BF16 load"
            )));
        }
    };
    Ok(Matrix::new(rows, cols, data))
}

/// HF row `(head, half, i)` holds llama2.c row `(head, 2i + half)`; put the rows back in pairs.
pub fn unpermute_rope_rows(w: &Matrix, heads: usize) -> Matrix {
    w.halves_to_pairs(heads)
}

/// The inverse: llama2.c rows to HF's rotate-half layout (how HF's converter writes them).
pub fn permute_rope_rows(w: &Matrix, heads: usize) -> Matrix {
    w.pairs_to_halves(heads)
}
