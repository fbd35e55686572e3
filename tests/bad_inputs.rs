//! A corpus of malformed, hostile and merely strange inputs, generated here (nothing binary is
//! committed) and fed to the CLI as a user would: every case either exits 2 with one line naming
//! the cause, or runs to the end, with no panic, no signal, and within a memory cap (`ulimit -v`).
//!
//! The cases go past the parsers: legal headers that ask for too much (a 2^20-token context with
//! 512 layers, a 32-bit size that wraps to the file's length), tokenizers whose ids do not fit the
//! model, transposed tensors, flags at the edges of their types.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;
use tokenometer::loading::llama2c;
use tokenometer::model::{LlamaConfig, Recipe};

/// The address-space cap every case runs under, in KiB: 3 GiB. A run that needs more is a bug
/// (no case needs more than a few hundred MB), and an allocation past it fails as it would in a
/// browser tab that runs out.
const MEMORY_CAP_KIB: u64 = 3 << 20;

/// What a case must do.
enum Expect {
    /// Exit code 2 with one line on stderr that contains this.
    Refused(&'static str),
    /// Exit code 0.
    Runs,
}

struct Case {
    name: &'static str,
    args: Vec<String>,
    expect: Expect,
}

/// A folder of generated files, removed at the end.
struct Corpus {
    dir: PathBuf,
}

impl Corpus {
    fn new() -> Self {
        let dir = std::env::temp_dir().join(format!("tokenometer-corpus-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Self { dir }
    }

    fn file(&self, name: &str, bytes: &[u8]) -> String {
        let path = self.dir.join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(&path, bytes).unwrap();
        path.display().to_string()
    }
}

impl Drop for Corpus {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A llama2.c header, as the seven i32 fields.
fn header(fields: [i32; 7]) -> Vec<u8> {
    fields.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn config(
    dim: usize,
    hidden: usize,
    layers: usize,
    heads: usize,
    vocab: usize,
    seq_len: usize,
) -> LlamaConfig {
    LlamaConfig {
        recipe: Recipe::llama("llama"),
        dim,
        hidden_dim: hidden,
        n_layers: layers,
        n_heads: heads,
        n_kv_heads: heads,
        vocab_size: vocab,
        seq_len,
        shared_classifier: true,
        rope_theta: 10000.0,
        rope_factors: None,
        norm_eps: 1e-5,
    }
}

/// A complete llama2.c checkpoint of `config` with seeded random weights.
fn checkpoint(config: &LlamaConfig) -> Vec<u8> {
    let weights = tokenometer::loading::synth::weights(config, 7);
    let mut bytes = Vec::new();
    llama2c::write(&weights, &mut bytes).unwrap();
    bytes
}

/// stories260K with every weight after the header replaced by `value`.
fn stories260k_filled(value: f32) -> Vec<u8> {
    let mut bytes = read(stories260k("stories260K.bin"));
    for chunk in bytes[28..].chunks_exact_mut(4) {
        chunk.copy_from_slice(&value.to_le_bytes());
    }
    bytes
}

/// A word-level `tokenizer.json` with the given (token, id) pairs.
fn tokenizer_json(vocab: &[(String, u64)]) -> Vec<u8> {
    let vocab: serde_json::Map<String, serde_json::Value> = vocab
        .iter()
        .map(|(t, id)| (t.clone(), (*id).into()))
        .collect();
    serde_json::json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": [],
        "normalizer": null, "pre_tokenizer": {"type": "Whitespace"}, "post_processor": null,
        "decoder": null,
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "<unk>"}
    })
    .to_string()
    .into_bytes()
}

/// 512 word tokens with ids 0..511, then `last` as the id of the final one.
fn words_512(last: u64) -> Vec<(String, u64)> {
    let mut vocab: Vec<(String, u64)> = ["<unk>", "<s>", "</s>"]
        .iter()
        .enumerate()
        .map(|(i, t)| (t.to_string(), i as u64))
        .collect();
    vocab.extend((3..511).map(|i| (format!("w{i}"), i as u64)));
    vocab.push(("once".to_string(), last));
    vocab
}

/// A small Hugging Face model: `config.json` and `model.safetensors`, with `embed` as the shape of
/// the embedding as stored.
fn hf_model(corpus: &Corpus, folder: &str, config: serde_json::Value, embed: [usize; 2]) -> String {
    let (d, h, v) = (16usize, 32usize, 512usize);
    let mut tensors: Vec<(String, Vec<usize>)> = vec![
        ("model.embed_tokens.weight".into(), embed.to_vec()),
        ("model.norm.weight".into(), vec![d]),
    ];
    let p = "model.layers.0";
    for (name, shape) in [
        ("self_attn.q_proj.weight", vec![d, d]),
        ("self_attn.k_proj.weight", vec![d, d]),
        ("self_attn.v_proj.weight", vec![d, d]),
        ("self_attn.o_proj.weight", vec![d, d]),
        ("mlp.gate_proj.weight", vec![h, d]),
        ("mlp.up_proj.weight", vec![h, d]),
        ("mlp.down_proj.weight", vec![d, h]),
        ("input_layernorm.weight", vec![d]),
        ("post_attention_layernorm.weight", vec![d]),
    ] {
        tensors.push((format!("{p}.{name}"), shape));
    }
    let data: HashMap<String, Vec<u8>> = tensors
        .iter()
        .map(|(name, shape)| {
            let n: usize = shape.iter().product();
            let bytes = (0..n)
                .flat_map(|i| ((i % 7) as f32 * 0.01).to_le_bytes())
                .collect();
            (name.clone(), bytes)
        })
        .collect();
    let views: Vec<(String, safetensors::tensor::TensorView)> = tensors
        .iter()
        .map(|(name, shape)| {
            let view = safetensors::tensor::TensorView::new(
                safetensors::Dtype::F32,
                shape.clone(),
                &data[name],
            )
            .unwrap();
            (name.clone(), view)
        })
        .collect();
    let st = safetensors::serialize(views, None).unwrap();
    assert_eq!(v, 512);
    corpus.file(
        &format!("{folder}/config.json"),
        config.to_string().as_bytes(),
    );
    corpus.file(&format!("{folder}/model.safetensors"), &st);
    corpus.dir.join(folder).display().to_string()
}

fn hf_config(overrides: &[(&str, serde_json::Value)]) -> serde_json::Value {
    let mut config = serde_json::json!({
        "model_type": "llama", "hidden_size": 16, "intermediate_size": 32,
        "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 2,
        "vocab_size": 512, "max_position_embeddings": 64, "rms_norm_eps": 1e-5,
        "tie_word_embeddings": true
    });
    for (key, value) in overrides {
        config[key] = value.clone();
    }
    config
}

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

fn generate(model: &str, tokenizer: &str, prompt: &str, extra: &[&str]) -> Vec<String> {
    generate_args(model, tokenizer, prompt, extra)
}

fn cases(corpus: &Corpus) -> Vec<Case> {
    let tok512 = stories260k("tok512.bin").display().to_string();
    let stories = stories260k("stories260K.bin").display().to_string();
    let real = read(stories260k("stories260K.bin"));
    let tok_bytes = read(stories260k("tok512.bin"));
    let refused = |name, args, why| Case {
        name,
        args,
        expect: Expect::Refused(why),
    };
    let runs = |name, args| Case {
        name,
        args,
        expect: Expect::Runs,
    };
    let model = |name: &str, bytes: &[u8], why: &'static str| (corpus.file(name, bytes), why);
    let mut out = Vec::new();

    // llama2.c files that are not what they claim.
    let mut with_body = |name: &'static str, fields: [i32; 7], body: usize, why: &'static str| {
        let mut bytes = header(fields);
        bytes.resize(28 + body, 0);
        let (path, why) = model(name, &bytes, why);
        out.push(refused(name, generate(&path, &tok512, "Hi", &[]), why));
    };
    with_body("empty.bin", [0; 7], 0, "bad model file");
    with_body(
        "negative-dim.bin",
        [-64, 172, 5, 8, 4, 512, 512],
        1000,
        "dim = -64 is not positive",
    );
    with_body(
        "odd-heads.bin",
        [64, 172, 5, 7, 7, 512, 512],
        1000,
        "not a multiple",
    );
    with_body(
        "kv-heads.bin",
        [64, 172, 5, 8, 3, 512, 512],
        1000,
        "n_kv_heads 3",
    );
    with_body(
        "odd-head-size.bin",
        [6, 172, 5, 2, 2, 512, 512],
        1000,
        "head size 3",
    );
    with_body(
        "lying-header.bin",
        [32768, 131072, 512, 1, 1, 1 << 20, 1 << 20],
        4096,
        "header says",
    );
    with_body(
        "context-1.bin",
        [64, 172, 5, 8, 4, 512, 1],
        1000,
        "seq_len = 1 is outside 2..=",
    );
    with_body(
        "vocab-2.bin",
        [64, 172, 5, 8, 4, 2, 512],
        1000,
        "vocab_size = 2 is outside 3..=",
    );
    // Sizes that wrap in 32-bit arithmetic (as wasm's usize does) to exactly this file's length:
    // 5 * 2^32 + 98304 floats. Refused everywhere, quoting the real size.
    with_body(
        "wraps-in-32-bit.bin",
        [32768, 131072, 1, 1, 1, 131072, 2],
        4 * 98304,
        "header says 85899739164 bytes",
    );
    let (path, why) = model("header-only.bin", &real[..28], "truncated");
    out.push(refused(
        "header-only.bin",
        generate(&path, &tok512, "Hi", &[]),
        why,
    ));
    let mut magic = real.clone();
    magic[0..4].copy_from_slice(&0x616b_3432u32.to_le_bytes());
    let (path, why) = model("ak42.bin", &magic, "version-1/2");
    out.push(refused(
        "ak42.bin",
        generate(&path, &tok512, "Hi", &[]),
        why,
    ));
    let noise: Vec<u8> = (0..1_000_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let (path, why) = model("noise.bin", &noise, "bad model file");
    out.push(refused(
        "noise.bin",
        generate(&path, &tok512, "Hi", &[]),
        why,
    ));

    // Legal files that ask for a lot: they must run in what they need, not what they claim.
    let deep = corpus.file("deep.bin", &checkpoint(&config(4, 4, 512, 1, 512, 1 << 20)));
    out.push(runs(
        "512 layers, dim 4, 2^20 context",
        generate(&deep, &tok512, "Once upon a time", &["--max-tokens", "8"]),
    ));
    let wide_context = corpus.file(
        "wide-context.bin",
        &checkpoint(&config(8, 8, 1, 1, 512, 1 << 20)),
    );
    let long_prompt = "Once upon a time there was a tiny robot who loved the sea. ".repeat(400);
    out.push(runs(
        "2^20 context and a 24,000-character prompt",
        generate(
            &wide_context,
            &tok512,
            &long_prompt,
            &["--max-tokens", "4", "--no-warmup"],
        ),
    ));
    let nan = corpus.file("nan.bin", &stories260k_filled(f32::NAN));
    out.push(runs(
        "NaN weights, greedy",
        generate(&nan, &tok512, "Once", &["--max-tokens", "8"]),
    ));
    out.push(runs(
        "NaN weights, sampled",
        generate(
            &nan,
            &tok512,
            "Once",
            &["--max-tokens", "8", "--temperature", "1"],
        ),
    ));
    let inf = corpus.file("inf.bin", &stories260k_filled(f32::INFINITY));
    out.push(runs(
        "infinite weights",
        generate(
            &inf,
            &tok512,
            "Once",
            &["--max-tokens", "8", "--temperature", "0.5"],
        ),
    ));

    // Tokenizers that do not fit the model.
    let skipping = corpus.file(
        "skipping/tokenizer.json",
        &tokenizer_json(&words_512(100_000)),
    );
    out.push(refused(
        "tokenizer.json with an id of 100000",
        generate(&stories, &skipping, "once", &[]),
        "ids run 0..100001",
    ));
    let huge_id = corpus.file(
        "huge-id/tokenizer.json",
        &tokenizer_json(&words_512(u32::MAX as u64)),
    );
    out.push(refused(
        "tokenizer.json with an id of 2^32-1",
        generate(&stories, &huge_id, "once", &[]),
        "bad tokenizer",
    ));
    let tiny: Vec<(String, u64)> = vec![("<unk>".into(), 0), ("<s>".into(), 1)];
    let tiny = corpus.file("tiny/tokenizer.json", &tokenizer_json(&tiny));
    out.push(refused(
        "tokenizer.json with 2 tokens",
        generate(&stories, &tiny, "once", &[]),
        "do not belong together",
    ));
    let tiny_model = corpus.file("vocab-3.bin", &checkpoint(&config(8, 8, 1, 1, 3, 16)));
    let tiny3: Vec<(String, u64)> =
        vec![("<unk>".into(), 0), ("<s>".into(), 1), ("</s>".into(), 2)];
    let tiny3 = corpus.file("tiny3/tokenizer.json", &tokenizer_json(&tiny3));
    out.push(runs(
        "a 3-token vocabulary",
        generate(&tiny_model, &tiny3, "anything", &["--max-tokens", "4"]),
    ));
    let tok_truncated = corpus.file("tok-truncated.bin", &tok_bytes[..tok_bytes.len() / 2]);
    out.push(refused(
        "truncated tokenizer.bin",
        generate(&stories, &tok_truncated, "Hi", &[]),
        "bad tokenizer",
    ));
    let mut absurd_len = tok_bytes.clone();
    absurd_len[0..4].copy_from_slice(&i32::MAX.to_le_bytes());
    let absurd_len = corpus.file("tok-absurd.bin", &absurd_len);
    out.push(refused(
        "tokenizer.bin with an absurd max length",
        generate(&stories, &absurd_len, "Hi", &[]),
        "absurd",
    ));
    let mut negative = tok_bytes.clone();
    negative[8..12].copy_from_slice(&(-5i32).to_le_bytes());
    let negative = corpus.file("tok-negative.bin", &negative);
    out.push(refused(
        "tokenizer.bin with a negative length",
        generate(&stories, &negative, "Hi", &[]),
        "has length -5",
    ));
    let empty_tok = corpus.file("tok-empty.bin", &[]);
    out.push(refused(
        "empty tokenizer",
        generate(&stories, &empty_tok, "Hi", &[]),
        "bad tokenizer",
    ));
    out.push(refused(
        "the model as its own tokenizer",
        generate(&stories, &stories, "Hi", &[]),
        "bad tokenizer",
    ));
    // Found by fuzzing: broken JSON inside a decoder panicked in the tokenizers crate.
    let decoder = br#"{"version": "1.0", "decoder": {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "x"}, "content": {"version": "1.0", "" "}]}, "model": {"type": "BPE", "vocab": {}, "merges": []}}"#;
    let decoder = corpus.file("decoder/tokenizer.json", decoder);
    out.push(refused(
        "tokenizer.json with broken JSON in its decoder",
        generate(&stories, &decoder, "Hi", &[]),
        "not valid JSON",
    ));
    let json_garbage = corpus.file("garbage/tokenizer.json", b"{\"model\": 17}");
    out.push(refused(
        "tokenizer.json of the wrong shape",
        generate(&stories, &json_garbage, "Hi", &[]),
        "tokenizer.json does not load",
    ));

    // Hugging Face checkpoints: shapes, config words, edges.
    let tok_json = llama2_tokenizer("tokenizer.json").display().to_string();
    let hf_tok = corpus.file("hf-tok/tokenizer.json", &tokenizer_json(&words_512(511)));
    let ok = hf_model(corpus, "hf-ok", hf_config(&[]), [512, 16]);
    out.push(runs(
        "a small HF model",
        generate(&ok, &hf_tok, "once", &["--max-tokens", "4"]),
    ));
    let transposed = hf_model(corpus, "hf-transposed", hf_config(&[]), [16, 512]);
    out.push(refused(
        "HF embedding stored transposed",
        generate(&transposed, &hf_tok, "once", &[]),
        "has shape [16, 512], expected [512, 16]",
    ));
    let zero = hf_model(
        corpus,
        "hf-zero",
        hf_config(&[("hidden_size", 0.into())]),
        [512, 16],
    );
    out.push(refused(
        "HF hidden_size 0",
        generate(&zero, &hf_tok, "once", &[]),
        "config.json hidden_size = 0",
    ));
    let short = hf_model(
        corpus,
        "hf-context-1",
        hf_config(&[("max_position_embeddings", 1.into())]),
        [512, 16],
    );
    out.push(refused(
        "HF context of 1",
        generate(&short, &hf_tok, "once", &[]),
        "config.json max_position_embeddings = 1",
    ));
    // Config values that parse but cannot be a model, each named in config.json's words.
    let config_cases: [(&'static str, &str, serde_json::Value, &'static str); 5] = [
        (
            "HF num_key_value_heads 0",
            "num_key_value_heads",
            0.into(),
            "config.json num_key_value_heads = 0",
        ),
        (
            "HF hidden_size -16",
            "hidden_size",
            (-16).into(),
            "config.json is not a Llama config",
        ),
        (
            "HF vocab_size 1e30",
            "vocab_size",
            1e30.into(),
            "config.json is not a Llama config",
        ),
        (
            "HF rope_theta 0",
            "rope_theta",
            0.into(),
            "(rope_theta) 0 must be",
        ),
        (
            "HF rms_norm_eps -1",
            "rms_norm_eps",
            (-1.0).into(),
            "(rms_norm_eps) -1 must be",
        ),
    ];
    for (name, key, value, why) in config_cases {
        let folder = format!("hf-{key}");
        let path = hf_model(corpus, &folder, hf_config(&[(key, value)]), [512, 16]);
        out.push(refused(name, generate(&path, &hf_tok, "once", &[]), why));
    }
    let other = hf_model(
        corpus,
        "hf-mistral",
        hf_config(&[("model_type", "mistral".into())]),
        [512, 16],
    );
    out.push(refused(
        "HF model of another type",
        generate(&other, &hf_tok, "once", &[]),
        "not \"llama\"",
    ));
    corpus.file("hf-bad-json/config.json", b"{ not json");
    corpus.file("hf-bad-json/model.safetensors", b"");
    let bad_json = corpus.dir.join("hf-bad-json").display().to_string();
    out.push(refused(
        "config.json that is not JSON",
        generate(&bad_json, &tok_json, "once", &[]),
        "config.json is not a Llama config",
    ));
    let mut lying = (1u64 << 60).to_le_bytes().to_vec();
    lying.extend_from_slice(b"{}");
    corpus.file(
        "hf-lying/config.json",
        hf_config(&[]).to_string().as_bytes(),
    );
    corpus.file("hf-lying/model.safetensors", &lying);
    let lying = corpus.dir.join("hf-lying").display().to_string();
    out.push(refused(
        "safetensors header claiming 2^60 bytes",
        generate(&lying, &hf_tok, "once", &[]),
        "not a readable safetensors file",
    ));

    // Flags at the edges of their types.
    let bench = |extra: &[&str]| {
        let mut a = args(&["bench", "--model", &stories, "--tokenizer", &tok512]);
        a.extend(args(extra));
        a
    };
    out.push(refused(
        "bench --runs 10^12",
        bench(&["--runs", "1000000000000"]),
        "1000000000000",
    ));
    out.push(refused(
        "bench --runs 2^64-1",
        bench(&["--runs", "18446744073709551615"]),
        "--runs",
    ));
    out.push(refused(
        "bench --runs 0",
        bench(&["--runs", "0"]),
        "0 is not in 1..=10000",
    ));
    out.push(refused(
        "--temperature 1e308",
        generate(&stories, &tok512, "Hi", &["--temperature", "1e308"]),
        "1e308 is not a finite number",
    ));
    out.push(refused(
        "--top-p NaN",
        generate(&stories, &tok512, "Hi", &["--top-p", "NaN"]),
        "top-p",
    ));
    out.push(refused(
        "--reading-wpm 0",
        generate(&stories, &tok512, "Hi", &["--reading-wpm", "0"]),
        "positive reading speed",
    ));
    out.push(refused(
        "--max-tokens 0",
        generate(&stories, &tok512, "Hi", &["--max-tokens", "0"]),
        "max tokens 0",
    ));
    out.push(runs(
        "--max-tokens 2^64-1 stops at the context",
        generate(
            &stories,
            &tok512,
            "Once upon a time",
            &["--max-tokens", "18446744073709551615", "--no-warmup"],
        ),
    ));
    out.push(refused(
        "missing --prompt",
        args(&["generate", "--model", &stories]),
        "--prompt",
    ));
    out.push(refused("no command", vec![], "no command given"));
    out.push(refused(
        "synth into a missing folder",
        args(&[
            "synth",
            "--shape",
            "stories15M",
            "--out",
            "/nonexistent-folder/x.bin",
        ]),
        "cannot write file",
    ));
    out.push(refused(
        "a 100,000-character prompt",
        generate(&stories, &tok512, &"a".repeat(100_000), &[]),
        "the context holds 512",
    ));
    out
}

/// Run the CLI under the memory cap. Returns (exit code or None for a signal, stderr).
fn run_capped(args: &[String]) -> (Option<i32>, String) {
    let output = Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit -v {MEMORY_CAP_KIB} && exec \"$0\" \"$@\""))
        .arg(env!("CARGO_BIN_EXE_tokenometer"))
        .args(args)
        .output()
        .expect("sh runs");
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn every_bad_input_is_one_line_or_a_run() {
    let corpus = Corpus::new();
    let mut failures = Vec::new();
    let cases = cases(&corpus);
    for case in &cases {
        let (code, stderr) = run_capped(&case.args);
        let problem = if stderr.contains("panicked") || stderr.contains("memory allocation of") {
            Some(format!("crashed: {stderr}"))
        } else {
            match (&case.expect, code) {
                (_, None) => Some(format!("killed by a signal: {stderr}")),
                (Expect::Runs, Some(0)) => None,
                (Expect::Runs, Some(c)) => Some(format!("exit {c}: {stderr}")),
                (Expect::Refused(why), Some(2)) => {
                    let lines = stderr.trim_end().lines().count();
                    if lines != 1 {
                        Some(format!("{lines} lines: {stderr}"))
                    } else if !stderr.contains(why) {
                        Some(format!("{why:?} not in: {stderr}"))
                    } else {
                        None
                    }
                }
                (Expect::Refused(_), Some(c)) => Some(format!("exit {c}, not 2: {stderr}")),
            }
        };
        if let Some(problem) = problem {
            failures.push(format!("{}: {problem}", case.name));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

/// The corpus helper itself: the wrapping header really is 5 * 2^32 + 98304 floats, and the
/// file is the size that makes a 32-bit computation of it match.
#[test]
fn the_wrapping_header_wraps() {
    let c = config(32768, 131072, 1, 1, 131072, 2);
    let floats = c.weight_count();
    assert_eq!(floats, 5 * (1u64 << 32) + 98304);
    assert_eq!((floats * 4) as u32 as u64, 4 * 98304);
    assert!(Path::new(&stories260k("tok512.bin")).is_file());
}
