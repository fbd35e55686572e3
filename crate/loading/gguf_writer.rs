//! Writing GGUF files of the architectures we read (their recipe's tensors and keys), for synthetic models (`tokenometer synth
//! --vocab`): a real model's shape and tokenizer with seeded random weights, so that speed and the
//! whole path from file to text can be tried at shapes whose real weights are not at hand
//! (SmolLM2-135M), and re-encodings of real models (`tokenometer convert`). Tensors are written
//! F32, or Q8_0 / Q4_0 where a row is whole blocks of 32, quantized by the formats' reference
//! quantizers (Q8_0's as llama.cpp's `quantize_row_q8_0_ref` does it: scale `max|x| / 127`, values
//! rounded half away from zero with the unrounded scale), the scale then stored as f16.

use std::io::{self, Write};

use half::f16;

use crate::formats::{BLOCK, Blocks, Format};
use crate::loading::gguf::Value;
use std::borrow::Cow;

use crate::model::{HostWeights, LlamaConfig, Matrix};

const ALIGNMENT: u64 = 32;
/// GGUF's type id for F32 tensors; blocks of `form` take their format's id.
const TYPE_F32: u32 = 0;

/// `general.file_type` (llama.cpp's `llama_ftype`) of a file whose matrices are `form`.
fn file_type(form: Option<Format>) -> u64 {
    match form {
        None => 0,
        Some(Format::Q4_0) => 2,
        Some(Format::Q8_0) => 7,
        Some(Format::Q5_0) => 8,
        Some(Format::Q6K) => 18,
    }
}

/// The metadata that describes `config` as llama.cpp's architecture of its recipe (`llama`,
/// `qwen2`, ...), its matrices `form` (`None`: F32).
pub fn llama_metadata(
    name: &str,
    config: &LlamaConfig,
    form: Option<Format>,
) -> Vec<(String, Value)> {
    let count = |n: usize| Value::Uint(n as u64);
    let arch = config.recipe.name;
    let mut entries = vec![
        ("general.architecture", Value::Str(arch.into())),
        ("general.name", Value::Str(name.into())),
        ("context_length", count(config.seq_len)),
        ("embedding_length", count(config.dim)),
        ("block_count", count(config.n_layers)),
        ("feed_forward_length", count(config.hidden_dim)),
        ("attention.head_count", count(config.n_heads)),
        ("attention.head_count_kv", count(config.n_kv_heads)),
        ("rope.dimension_count", count(config.head_size())),
        ("rope.freq_base", Value::Float(config.rope_theta as f64)),
        (
            "attention.layer_norm_rms_epsilon",
            Value::Float(config.norm_eps as f64),
        ),
        ("general.file_type", Value::Uint(file_type(form))),
    ];
    if let Some(hs) = config.recipe.head_size {
        entries.push(("attention.key_length", count(hs)));
        entries.push(("attention.value_length", count(hs)));
    }
    if let Some(s) = &config.recipe.sliding {
        entries.push(("attention.sliding_window", count(s.window)));
        entries.push(("attention.sliding_window_pattern", count(s.global_every)));
        entries.push((
            "rope.freq_base_swa",
            Value::Float(s.rope_theta_local as f64),
        ));
    }
    entries
        .into_iter()
        .map(|(k, v)| match k.starts_with("general.") {
            true => (k.to_string(), v),
            false => (format!("{arch}.{k}"), v),
        })
        .collect()
}

/// Write `weights` as a GGUF with `metadata` (the llama keys and a tokenizer's): matrices in the
/// blocks of `form` where it is given and their rows allow it, F32 otherwise; norms always F32.
pub fn write_model(
    weights: &HostWeights,
    metadata: &[(String, Value)],
    form: Option<Format>,
    out: &mut impl Write,
) -> io::Result<()> {
    let config = &weights.config;
    let (recipe, hs) = (&config.recipe, config.head_size());
    // Vectors as 1-row matrices (always F32). A NEOX file's q and k rotate halves of each head:
    // their rows (biases, norms) go back from the pairs loading made.
    let vector = |v: &[f32]| Cow::Owned(Matrix::new(1, v.len(), v.to_vec()));
    let halves = |m: &Matrix, heads: usize| -> Matrix {
        match recipe.rope_halves {
            true => m.pairs_to_halves(heads),
            false => m.clone(),
        }
    };
    let head_vector = |v: &[f32], heads: usize| {
        let m = halves(&Matrix::new(heads * hs, 1, v.to_vec()), heads);
        vector(&m.into_values().into_vec())
    };
    let mut tensors: Vec<(String, Cow<Matrix>)> = vec![(
        "token_embd.weight".into(),
        Cow::Borrowed(&weights.token_embedding),
    )];
    for (i, l) in weights.layers.iter().enumerate() {
        let add = |what: &str, m| (format!("blk.{i}.{what}"), m);
        let mut layer = vec![
            add("attn_norm.weight", vector(&l.rms_att)),
            add("attn_q.weight", Cow::Owned(halves(&l.wq, config.n_heads))),
            add(
                "attn_k.weight",
                Cow::Owned(halves(&l.wk, config.n_kv_heads)),
            ),
            add("attn_v.weight", Cow::Borrowed(&l.wv)),
            add("attn_output.weight", Cow::Borrowed(&l.wo)),
            add("ffn_norm.weight", vector(&l.rms_ffn)),
            add("ffn_gate.weight", Cow::Borrowed(&l.w1)),
            add("ffn_down.weight", Cow::Borrowed(&l.w2)),
            add("ffn_up.weight", Cow::Borrowed(&l.w3)),
        ];
        if let Some([q, k, v]) = &l.extras.qkv_bias {
            layer.push(add("attn_q.bias", head_vector(q, config.n_heads)));
            layer.push(add("attn_k.bias", head_vector(k, config.n_kv_heads)));
            layer.push(add("attn_v.bias", vector(v)));
        }
        if let Some([q, k]) = &l.extras.qk_norm {
            layer.push(add("attn_q_norm.weight", head_vector(q, 1)));
            layer.push(add("attn_k_norm.weight", head_vector(k, 1)));
        }
        if let Some([attention, ffn]) = &l.extras.post_norms {
            layer.push(add("post_attention_norm.weight", vector(attention)));
            layer.push(add("post_ffw_norm.weight", vector(ffn)));
        }
        tensors.extend(layer);
    }
    tensors.push(("output_norm.weight".into(), vector(&weights.rms_final)));
    if let Some(factors) = &config.rope_factors {
        tensors.push(("rope_freqs.weight".into(), vector(factors)));
    }
    if let Some(classifier) = &weights.classifier {
        tensors.push(("output.weight".into(), Cow::Borrowed(classifier)));
    }
    let tensors: Vec<(String, &Matrix)> = tensors.iter().map(|(n, m)| (n.clone(), &**m)).collect();
    write(metadata, &tensors, form, out)
}

/// Write a GGUF of `metadata` and `tensors` (none, for a vocabulary file): blocks of `form` where
/// it is given and a matrix's rows are whole blocks, F32 otherwise.
pub fn write(
    metadata: &[(String, Value)],
    tensors: &[(String, &Matrix)],
    form: Option<Format>,
    out: &mut impl Write,
) -> io::Result<()> {
    if let Some(format @ (Format::Q6K | Format::Q5_0)) = form {
        // Their kernels' blocks are not GGUF's (Q6_K's 256-value super-blocks, Q5_0's fifth bits
        // in their own order): no quantizer writes those here.
        return Err(io::Error::other(format!(
            "{} is read, not written: write Q8_0 or Q4_0 (--quant q8 or q4)",
            format.name()
        )));
    }
    let blocks_of = |m: &Matrix| form.filter(|_| m.rows > 1 && m.cols.is_multiple_of(BLOCK));
    let data_bytes = |m: &Matrix| -> u64 {
        let n = (m.rows * m.cols) as u64;
        match blocks_of(m) {
            Some(format) => n / BLOCK as u64 * (2 + format.payload() as u64),
            None => n * 4,
        }
    };
    let mut header = b"GGUF".to_vec();
    header.extend(3u32.to_le_bytes());
    header.extend((tensors.len() as u64).to_le_bytes());
    header.extend((metadata.len() as u64).to_le_bytes());
    for (key, value) in metadata {
        header.extend(string(key));
        header.extend(value_type(value).to_le_bytes());
        header.extend(value_bytes(value));
    }
    let mut offset = 0u64;
    for (name, m) in tensors {
        header.extend(string(name));
        // GGUF lists dimensions fastest first: [cols, rows], or [len] for a vector.
        let dims: Vec<u64> = if m.rows == 1 {
            vec![m.cols as u64]
        } else {
            vec![m.cols as u64, m.rows as u64]
        };
        header.extend((dims.len() as u32).to_le_bytes());
        for d in dims {
            header.extend(d.to_le_bytes());
        }
        let kind = blocks_of(m).map_or(TYPE_F32, Format::id);
        header.extend(kind.to_le_bytes());
        header.extend(offset.to_le_bytes());
        offset += data_bytes(m).div_ceil(ALIGNMENT) * ALIGNMENT;
    }
    let pad = |n: u64| vec![0u8; (n.div_ceil(ALIGNMENT) * ALIGNMENT - n) as usize];
    out.write_all(&header)?;
    out.write_all(&pad(header.len() as u64))?;
    for (_, m) in tensors {
        let values = m.values();
        let bytes = match blocks_of(m) {
            Some(format) => gguf_blocks(format, &values),
            None => values.iter().flat_map(|x| x.to_le_bytes()).collect(),
        };
        out.write_all(&bytes)?;
        out.write_all(&pad(bytes.len() as u64))?;
    }
    Ok(())
}

/// Blocks of `format` of `values` (a whole number of blocks of 32), in GGUF's layout: each
/// block's f16 scale, then its payload (the format's reference quantizer).
fn gguf_blocks(format: Format, values: &[f32]) -> Vec<u8> {
    let blocks = Blocks::quantize(format, values);
    let payload = format.payload();
    let mut out = Vec::with_capacity(blocks.len() * (2 + payload));
    for (quants, scale) in blocks.quants.chunks_exact(payload).zip(&blocks.scales) {
        out.extend(f16::from_f32(*scale).to_le_bytes());
        out.extend_from_slice(quants);
    }
    out
}

fn string(s: &str) -> Vec<u8> {
    [(s.len() as u64).to_le_bytes().as_slice(), s.as_bytes()].concat()
}

/// The GGUF type a value is written as: the narrowest of u32/u64, i32/i64; floats as f32.
fn value_type(value: &Value) -> u32 {
    match value {
        Value::Uint(v) if *v <= u32::MAX as u64 => 4,
        Value::Uint(_) => 10,
        Value::Int(v) if i32::try_from(*v).is_ok() => 5,
        Value::Int(_) => 11,
        Value::Float(_) => 6,
        Value::Bool(_) => 7,
        Value::Str(_) => 8,
        Value::Array(_) => 9,
    }
}

fn value_bytes(value: &Value) -> Vec<u8> {
    match value {
        Value::Uint(v) if *v <= u32::MAX as u64 => (*v as u32).to_le_bytes().to_vec(),
        Value::Uint(v) => v.to_le_bytes().to_vec(),
        Value::Int(v) => match i32::try_from(*v) {
            Ok(v) => v.to_le_bytes().to_vec(),
            Err(_) => v.to_le_bytes().to_vec(),
        },
        Value::Float(v) => (*v as f32).to_le_bytes().to_vec(),
        Value::Bool(v) => vec![*v as u8],
        Value::Str(s) => string(s),
        Value::Array(items) => {
            // One element type for the whole array: the widest any element needs.
            let kind = items.iter().map(value_type).max().unwrap_or(4);
            let mut out = kind.to_le_bytes().to_vec();
            out.extend((items.len() as u64).to_le_bytes());
            for item in items {
                out.extend(match (kind, item) {
                    (10, Value::Uint(v)) => v.to_le_bytes().to_vec(),
                    (11, Value::Int(v)) => v.to_le_bytes().to_vec(),
                    _ => value_bytes(item),
                });
            }
            out
        }
    }
}
