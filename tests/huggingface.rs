//! Hugging Face checkpoints: stories260K rewritten as config.json + model.safetensors, with q/k rows
//! in HF's rotate-half layout, must generate exactly what the llama2.c file does.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use std::collections::HashMap;

use common::*;
use safetensors::{Dtype, tensor::TensorView};
use tokenometer::loading::{hf, llama2c};
use tokenometer::model::Matrix;
use tokenometer::{Backend, Engine, GenerateOptions, ModelFiles, Quant};

/// stories260K as HF files, in `dtype` (F32 or BF16).
fn hf_files(dtype: Dtype) -> (Vec<u8>, Vec<u8>) {
    let w = llama2c::load(&std::sync::Arc::new(
        read(stories260k("stories260K.bin")).into(),
    ))
    .unwrap();
    let c = &w.config;
    let config = serde_json::json!({
        "model_type": "llama", "hidden_size": c.dim, "intermediate_size": c.hidden_dim,
        "num_hidden_layers": c.n_layers, "num_attention_heads": c.n_heads,
        "num_key_value_heads": c.n_kv_heads, "vocab_size": c.vocab_size,
        "max_position_embeddings": c.seq_len, "rms_norm_eps": 1e-5, "tie_word_embeddings": true,
    });
    let encode = |v: &[f32]| -> Vec<u8> {
        match dtype {
            Dtype::F32 => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            Dtype::BF16 => v
                .iter()
                .flat_map(|x| half::bf16::from_f32(*x).to_le_bytes())
                .collect(),
            _ => unreachable!(),
        }
    };
    let mut tensors: Vec<(String, Vec<usize>, Vec<u8>)> = Vec::new();
    let mut put = |name: String, rows: usize, cols: usize, data: &[f32]| {
        let shape = if rows == 1 {
            vec![cols]
        } else {
            vec![rows, cols]
        };
        tensors.push((name, shape, encode(data)));
    };
    let m = |x: &Matrix| (x.rows, x.cols);
    put(
        "model.embed_tokens.weight".into(),
        c.vocab_size,
        c.dim,
        &w.token_embedding.data,
    );
    for (i, l) in w.layers.iter().enumerate() {
        let p = format!("model.layers.{i}");
        let wq = hf::permute_rope_rows(&l.wq, c.n_heads);
        let wk = hf::permute_rope_rows(&l.wk, c.n_kv_heads);
        put(format!("{p}.input_layernorm.weight"), 1, c.dim, &l.rms_att);
        put(
            format!("{p}.self_attn.q_proj.weight"),
            m(&wq).0,
            m(&wq).1,
            &wq.data,
        );
        put(
            format!("{p}.self_attn.k_proj.weight"),
            m(&wk).0,
            m(&wk).1,
            &wk.data,
        );
        put(
            format!("{p}.self_attn.v_proj.weight"),
            l.wv.rows,
            l.wv.cols,
            &l.wv.data,
        );
        put(
            format!("{p}.self_attn.o_proj.weight"),
            l.wo.rows,
            l.wo.cols,
            &l.wo.data,
        );
        put(
            format!("{p}.post_attention_layernorm.weight"),
            1,
            c.dim,
            &l.rms_ffn,
        );
        put(
            format!("{p}.mlp.gate_proj.weight"),
            l.w1.rows,
            l.w1.cols,
            &l.w1.data,
        );
        put(
            format!("{p}.mlp.down_proj.weight"),
            l.w2.rows,
            l.w2.cols,
            &l.w2.data,
        );
        put(
            format!("{p}.mlp.up_proj.weight"),
            l.w3.rows,
            l.w3.cols,
            &l.w3.data,
        );
    }
    put("model.norm.weight".into(), 1, c.dim, &w.rms_final);
    let views: HashMap<String, TensorView> = tensors
        .iter()
        .map(|(n, s, b)| (n.clone(), TensorView::new(dtype, s.clone(), b).unwrap()))
        .collect();
    let bytes = safetensors::serialize(&views, None).unwrap();
    (serde_json::to_vec(&config).unwrap(), bytes)
}

/// An f32 CPU engine on stories260K written as HF files in `dtype`.
fn hf_engine(dtype: Dtype) -> Engine {
    let (config, weights) = hf_files(dtype);
    let files = ModelFiles::hugging_face(format!("stories260K-{dtype:?}"), config, weights);
    Engine::load(
        files,
        Some(&read(stories260k("tok512.bin"))),
        Quant::F32,
        &Backend::cpu(),
    )
    .unwrap()
}

fn greedy_ids(engine: &Engine, n: usize) -> Vec<u32> {
    generated_ids(
        engine,
        &GenerateOptions {
            max_tokens: n,
            ..Default::default()
        },
    )
}

#[test]
fn hf_f32_checkpoint_matches_the_reference_exactly() {
    let engine = hf_engine(Dtype::F32);
    let (prompt, sequence) = reference_ids();
    assert_eq!(greedy_ids(&engine, 252), &sequence[prompt.len()..]);
}

#[test]
fn hf_bf16_checkpoint_loads_and_mostly_agrees() {
    let engine = hf_engine(Dtype::BF16);
    let (_, sequence) = reference_ids();
    let preds = pollster::block_on(engine.predictions(&sequence[..256])).unwrap();
    let agree = preds
        .iter()
        .zip(&sequence[1..])
        .filter(|(a, b)| a == b)
        .count();
    println!("bf16 HF checkpoint: {agree}/256 teacher-forced agreement with run.c's greedy ids");
    assert!(agree >= 230, "{agree}/256");
}

#[test]
fn rope_permutation_round_trips() {
    let m = Matrix::new(8, 3, (0..24).map(|x| x as f32).collect::<Vec<f32>>());
    assert_eq!(hf::unpermute_rope_rows(&hf::permute_rope_rows(&m, 2), 2), m);
    // Head 0 of HF layout holds llama2.c rows 0, 2 then 1, 3.
    let p = hf::permute_rope_rows(&m, 2);
    assert_eq!(
        &p.data[..12],
        &[0., 1., 2., 6., 7., 8., 3., 4., 5., 9., 10., 11.]
    );
}

#[test]
fn a_broken_hf_checkpoint_is_an_error() {
    let (config, weights) = hf_files(Dtype::F32);
    let tok = read(stories260k("tok512.bin"));
    let load = |c: Vec<u8>, w: Vec<u8>| {
        Engine::load(
            ModelFiles::hugging_face("x", c, w),
            Some(&tok),
            Quant::F32,
            &Backend::cpu(),
        )
        .err()
        .unwrap()
        .to_string()
    };
    assert!(load(config.clone(), weights[..weights.len() / 2].to_vec()).contains("safetensors"));
    assert!(load(b"{}".to_vec(), weights.clone()).contains("config.json"));
    let gpt2 = br#"{"model_type":"gpt2","hidden_size":64,"intermediate_size":172,"num_hidden_layers":5,"num_attention_heads":8,"vocab_size":512,"max_position_embeddings":512}"#;
    assert!(load(gpt2.to_vec(), weights).contains("gpt2"));
}
