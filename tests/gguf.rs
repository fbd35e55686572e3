//! GGUF files written by llama.cpp's own writer: greedy output against run.c and llama.cpp, the
//! tokenizer inside, blocks read as they are, K-quants, and headers that lie.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use common::*;
use tokenometer::cpu::HostMatrix;
use tokenometer::formats::Format;
use tokenometer::loading::gguf::{self, Gguf, TensorType};
use tokenometer::loading::gguf_stream::GgufStream;
use tokenometer::{Backend, Engine, GenerateOptions, ModelFiles, Quant};

fn gguf_engine(file: &str, quant: Quant) -> Engine {
    let files = ModelFiles::gguf("stories260K", read(stories260k(file)));
    Engine::load(files, None, quant, &Backend::cpu()).expect("loads")
}

/// `generated_ids` for `model` in `gguf-llamacpp-greedy.txt`.
fn llama_cpp_greedy(model: &str) -> Vec<u32> {
    let text = String::from_utf8(read(stories260k("gguf-llamacpp-greedy.txt"))).unwrap();
    let section = text
        .split("model: ")
        .find(|s| s.starts_with(model))
        .unwrap_or_else(|| panic!("{model} in gguf-llamacpp-greedy.txt"));
    let line = section
        .lines()
        .find_map(|l| l.strip_prefix("generated_ids: "))
        .unwrap();
    line.split_whitespace()
        .map(|n| n.parse().unwrap())
        .collect()
}

fn greedy(engine: &Engine, n: usize) -> Vec<u32> {
    let options = GenerateOptions {
        max_tokens: n,
        ..Default::default()
    };
    generated_ids(engine, &options)
}

#[test]
fn f32_gguf_with_its_own_tokenizer_reproduces_run_c() {
    let (prompt, sequence) = reference_ids();
    let engine = gguf_engine("stories260K-f32.gguf", Quant::F32);
    assert_eq!(
        engine.encode_prompt("Once upon a time", true).unwrap(),
        prompt
    );
    let expected = &sequence[prompt.len()..];
    assert_eq!(greedy(&engine, 252), expected);
    // And llama.cpp agrees with both, for the 250 tokens it was asked for.
    let theirs = llama_cpp_greedy("stories260K-f32.gguf");
    assert_eq!(theirs, expected[..theirs.len()]);
}

#[test]
fn q8_0_gguf_follows_llama_cpp() {
    let engine = gguf_engine("stories260K-q8_0.gguf", Quant::Q8);
    let ours = greedy(&engine, 252);
    let theirs = llama_cpp_greedy("stories260K-q8_0.gguf");
    let same = ours.iter().zip(&theirs).take_while(|(a, b)| a == b).count();
    println!(
        "q8_0: the first {same} tokens equal llama.cpp's ({} compared)",
        theirs.len()
    );
    assert!(same >= 40, "parted from llama.cpp after {same} tokens");
}

#[test]
fn q4_0_gguf_runs_and_reports_its_conversions() {
    let engine = gguf_engine("stories260K-q4_0.gguf", Quant::Q4);
    let ours = greedy(&engine, 60);
    let theirs = llama_cpp_greedy("stories260K-q4_0.gguf");
    let same = ours.iter().zip(&theirs).take_while(|(a, b)| a == b).count();
    println!("q4_0: the first {same} tokens equal llama.cpp's");
    assert!(same >= 10, "parted from llama.cpp after {same} tokens");
    let notes = engine.info.quant_exceptions.join("; ");
    assert!(notes.contains("Q4_0"), "{notes}");
}

/// Quantizing a dequantized Q8_0 or Q4_0 tensor again gives back its very values: each block's
/// extreme is exactly 127 d (Q8_0) or -8 d (Q4_0).
#[test]
fn q8_0_and_q4_0_blocks_survive_the_round_trip() {
    for (file, kind) in [
        ("stories260K-q8_0.gguf", TensorType::Q8_0),
        ("stories260K-q4_0.gguf", TensorType::Q4_0),
    ] {
        let bytes = read(stories260k(file));
        let header = Gguf::parse(&bytes).unwrap();
        let info = &header.tensors["blk.0.attn_q.weight"];
        assert_eq!(info.kind, kind);
        let values = kind.dequantize(&bytes[info.start..info.end]);
        let again = if kind == TensorType::Q8_0 {
            HostMatrix::q8(&values)
        } else {
            HostMatrix::q4(&values)
        };
        assert_eq!(again.dequantize(), values, "{file}");
    }
}

/// On the CPU in q8, a Q8_0 file's blocks are used as they are: the quants byte for byte, the
/// f16 scale widened.
#[test]
fn q8_0_blocks_are_used_as_they_are() {
    let bytes = read(stories260k("stories260K-q8_0.gguf"));
    let file = std::sync::Arc::new(tokenometer::model::FileBytes::from(bytes.as_slice()));
    let header = Gguf::parse(&bytes).unwrap();
    let weights = gguf::load(&gguf::Tensors::File(&file.into()), &header).unwrap();
    let info = &header.tensors["blk.0.attn_q.weight"];
    let raw = &bytes[info.start..info.end];
    let mut plan = tokenometer::model::QuantPlan::new(Quant::Q8);
    let stored = plan.apply("wq", weights.layers[0].wq.clone());
    let tokenometer::model::Stored::Blocks(tokenometer::formats::Blocks {
        format: tokenometer::formats::Format::Q8_0,
        quants,
        scales,
        offsets,
        ..
    }) = stored
    else {
        panic!("not kept as Q8_0 blocks");
    };
    assert!(offsets.is_empty());
    assert_eq!(scales.len(), raw.len() / 34);
    for (b, block) in raw.chunks_exact(34).enumerate() {
        assert_eq!(&quants[b * 32..(b + 1) * 32], &block[2..], "block {b}");
        assert_eq!(
            scales[b],
            half::f16::from_le_bytes([block[0], block[1]]).to_f32()
        );
    }
}

/// Every type's reference dequantization against llama.cpp's (gguf-py's `dequantize`, a port of
/// ggml's) on random and real blocks (`tests/fixtures/blocks.json`, written by
/// `tests/fixtures/blocks.py` from the fetched SmolLM2 and Gemma 3 files); and each type the kernels
/// run as stored, in the blocks they run ([`TensorType::run_blocks`]), widened again to the same
/// values (up to f32 rounding: `(q - 8) d + (m + 8 d)` for `q d + m`).
#[test]
fn every_type_dequantizes_like_llama_cpp() {
    let fixture: serde_json::Value = serde_json::from_slice(&read(
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/blocks.json"),
    ))
    .unwrap();
    let mut seen = std::collections::BTreeSet::new();
    for case in fixture.as_array().unwrap() {
        let name = case["type"].as_str().unwrap();
        let what = format!("{name} ({})", case["source"].as_str().unwrap());
        let row = tokenometer::formats::TYPES
            .iter()
            .find(|t| t.name == name)
            .unwrap_or_else(|| panic!("{what}: no such type"));
        let kind = TensorType::from_id(row.id).unwrap();
        let hex = case["hex"].as_str().unwrap();
        let raw: Vec<u8> = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
            .collect();
        let expected: Vec<f32> = case["values"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap() as f32)
            .collect();
        let got = kind.dequantize(&raw);
        assert_eq!(got.len(), expected.len(), "{what}");
        let scale = expected.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        for (i, (a, b)) in got.iter().zip(&expected).enumerate() {
            assert!(
                (a - b).abs() <= 1e-6 * b.abs().max(1.0),
                "{what}[{i}]: {a} vs {b}"
            );
        }
        if let Some(blocks) = kind.run_blocks(&raw) {
            assert_eq!(Some(blocks.format), kind.runs_as());
            for (i, (a, b)) in blocks.dequantize().iter().zip(&expected).enumerate() {
                assert!(
                    (a - b).abs() <= 1e-6 * scale.max(1e-3),
                    "{what} run as {:?}[{i}]: {a} vs {b}",
                    blocks.format
                );
            }
        }
        seen.insert(name);
    }
    let all: std::collections::BTreeSet<&str> = tokenometer::formats::TYPES
        .iter()
        .map(|t| t.name)
        .filter(|&n| n != "F32")
        .collect();
    assert_eq!(seen, all, "the fixture covers every type but F32");
}

/// A GGUF of our own making: `metadata` then `tensors` (name, dims, type id, data).
fn write_gguf(
    metadata: &[(&str, u32, Vec<u8>)],
    tensors: &[(&str, Vec<u64>, u32, Vec<u8>)],
) -> Vec<u8> {
    let string = |s: &str| {
        [
            (s.len() as u64).to_le_bytes().to_vec(),
            s.as_bytes().to_vec(),
        ]
        .concat()
    };
    let mut out = b"GGUF".to_vec();
    out.extend(3u32.to_le_bytes());
    out.extend((tensors.len() as u64).to_le_bytes());
    out.extend((metadata.len() as u64).to_le_bytes());
    for (key, kind, value) in metadata {
        out.extend(string(key));
        out.extend(kind.to_le_bytes());
        out.extend(value);
    }
    let mut offset = 0u64;
    for (name, dims, kind, data) in tensors {
        out.extend(string(name));
        out.extend((dims.len() as u32).to_le_bytes());
        for d in dims {
            out.extend(d.to_le_bytes());
        }
        out.extend(kind.to_le_bytes());
        out.extend(offset.to_le_bytes());
        offset += (data.len() as u64).div_ceil(32) * 32;
    }
    out.resize(out.len().div_ceil(32) * 32, 0);
    for (_, _, _, data) in tensors {
        let mut data = data.clone();
        data.resize(data.len().div_ceil(32) * 32, 0);
        out.extend(data);
    }
    out
}

/// The one-line error of loading `bytes`, with the tokenizer inside or, where `tokenizer`, tok512.
fn load_error(bytes: Vec<u8>, tokenizer: bool) -> String {
    let tok = tokenizer.then(|| read(stories260k("tok512.bin")));
    let files = ModelFiles::gguf("bad", bytes);
    match Engine::load(files, tok.as_deref(), Quant::F32, &Backend::cpu()) {
        Ok(_) => panic!("loaded"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn broken_and_foreign_ggufs_are_named() {
    let good = read(stories260k("stories260K-q8_0.gguf"));
    let u32s = |v: u32| v.to_le_bytes().to_vec();
    let u64s = |v: u64| v.to_le_bytes().to_vec();
    let text = |s: &str| [u64s(s.len() as u64), s.as_bytes().to_vec()].concat();
    // Cases whose tokenizer comes from outside the file (`true`) or from inside it.
    let mut cases: Vec<(Vec<u8>, &str)> = vec![
        (good[..good.len() / 2].to_vec(), "runs past the file's"),
        (good[..100].to_vec(), "truncated"),
        (
            [b"GGUF".as_slice(), &u32s(1)].concat(),
            "GGUF version 1 is not supported",
        ),
    ];
    // A tensor count far past anything real, and a string whose length is a lie.
    let mut huge = good.clone();
    huge[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
    cases.push((huge, "claims 18446744073709551615 tensors"));
    let mut long_key = good.clone();
    long_key[24..32].copy_from_slice(&(1u64 << 40).to_le_bytes());
    cases.push((long_key, "needs 1099511627776 bytes"));
    // An array that claims more elements than there are bytes.
    cases.push((
        write_gguf(
            &[(
                "tokenizer.ggml.tokens",
                9,
                [u32s(8), u64s(1 << 50)].concat(),
            )],
            &[],
        ),
        "claims 1125899906842624 elements",
    ));
    // Another architecture, another tensor type, a missing tensor, a tokenizer we do not read.
    let arch = |a: &str| ("general.architecture", 8, text(a));
    let dims = |k: &'static str, v: u32| (k, 4, u32s(v));
    let llama = vec![
        arch("llama"),
        dims("llama.embedding_length", 32),
        dims("llama.feed_forward_length", 64),
        dims("llama.block_count", 1),
        dims("llama.attention.head_count", 2),
        dims("llama.context_length", 16),
    ];
    cases.push((
        write_gguf(&[arch("llama"), arch("mamba")], &[]),
        "holds general.architecture twice",
    ));
    cases.push((
        write_gguf(&[arch("mamba")], &[]),
        "general.architecture is \"mamba\"",
    ));
    // A NaN block scale in a Q8_0 matrix, and an infinity in an F32 norm: refused, not run.
    let parsed = tokenometer::loading::gguf::Gguf::parse(&good).unwrap();
    let first_of = |kind: tokenometer::formats::TensorType| {
        let mut names: Vec<_> = parsed
            .tensors
            .iter()
            .filter(|(_, t)| t.kind == kind)
            .map(|(n, t)| (n.clone(), t.start))
            .collect();
        names.sort();
        names.remove(0)
    };
    let (q8_name, q8_start) = first_of(tokenometer::formats::TensorType::Q8_0);
    let mut nan_scale = good.clone();
    nan_scale[q8_start..q8_start + 2].copy_from_slice(&half::f16::NAN.to_le_bytes());
    let nan_message: &'static str =
        Box::leak(format!("GGUF tensor {q8_name} holds NaN at its block scale 0").into_boxed_str());
    cases.push((nan_scale, nan_message));
    let (f32_name, f32_start) = first_of(tokenometer::formats::TensorType::F32);
    let mut infinite = good.clone();
    infinite[f32_start + 4..f32_start + 8].copy_from_slice(&f32::INFINITY.to_le_bytes());
    let inf_message: &'static str = Box::leak(
        format!("GGUF tensor {f32_name} holds an infinity at its value 1").into_boxed_str(),
    );
    cases.push((infinite, inf_message));
    // A megabyte of architecture name is not quoted whole.
    let long = "x".repeat(1 << 20);
    cases.push((
        write_gguf(&[arch(&long)], &[]),
        "... (1048576 bytes)\"; this engine runs",
    ));
    // Big-endian: the version reads as 50331648 little-endian; it is named for what it is.
    let mut big_endian = good.clone();
    big_endian[4..8].copy_from_slice(&3u32.to_be_bytes());
    cases.push((big_endian, "is big-endian"));
    // A tensor named twice, and two tensors over the same bytes (one would read the other's).
    let row = || vec![0u8; 32 * 4];
    cases.push((
        write_gguf(
            &llama,
            &[
                ("token_embd.weight", vec![32, 1], 0, row()),
                ("token_embd.weight", vec![32, 1], 0, row()),
            ],
        ),
        "holds tensor token_embd.weight twice",
    ));
    let mut overlapping = write_gguf(
        &llama,
        &[
            ("token_embd.weight", vec![32, 2], 0, [row(), row()].concat()),
            ("output.weight", vec![32, 1], 0, row()),
        ],
    );
    // The second tensor's offset (the last 8 bytes of its info, before the aligned data) is
    // moved from 256 to 128: inside the first's 256 bytes.
    let at = overlapping
        .windows(8)
        .rposition(|w| w == 256u64.to_le_bytes())
        .unwrap();
    overlapping[at..at + 8].copy_from_slice(&128u64.to_le_bytes());
    cases.push((overlapping, "overlap in the file"));
    cases.push((
        write_gguf(
            &llama,
            &[("token_embd.weight", vec![256, 8], 20, vec![0; 136 * 8])],
        ),
        "type 20 (IQ4_NL) is not supported",
    ));
    // A Q4_K tensor one super-block short of its shape: one line naming it, never a panic.
    cases.push((
        write_gguf(
            &llama,
            &[("token_embd.weight", vec![256, 8], 12, vec![0; 144 * 7])],
        ),
        "GGUF tensor token_embd.weight (Q4_K x [256, 8])",
    ));
    cases.push((
        write_gguf(
            &llama,
            &[("token_embd.weight", vec![32, 8], 0, vec![0; 32 * 8 * 4])],
        ),
        "has no tensor blk.0.attn_norm.weight",
    ));
    cases.push((
        write_gguf(&llama[1..], &[]),
        "general.architecture is \"(none)\"",
    ));
    // Gemma 3 headers that cannot be run: each one sentence.
    let gemma = vec![
        arch("gemma3"),
        dims("gemma3.embedding_length", 32),
        dims("gemma3.feed_forward_length", 64),
        dims("gemma3.block_count", 1),
        dims("gemma3.attention.head_count", 2),
        dims("gemma3.context_length", 16),
        dims("gemma3.attention.key_length", 16),
        dims("gemma3.attention.sliding_window", 8),
    ];
    let embedding = || vec![("token_embd.weight", vec![32, 8], 0, vec![0; 32 * 8 * 4])];
    let with = |extra: (&'static str, u32, Vec<u8>)| {
        let mut m = gemma.clone();
        m.push(extra);
        write_gguf(&m, &embedding())
    };
    cases.push((
        write_gguf(&gemma[..7], &embedding()),
        "GGUF metadata has no gemma3.attention.sliding_window",
    ));
    cases.push((
        with(dims("gemma3.attention.value_length", 32)),
        "gemma3.attention.value_length 32 differs from key_length 16",
    ));
    cases.push((
        with((
            "gemma3.final_logit_softcapping",
            6,
            30f32.to_le_bytes().to_vec(),
        )),
        "has gemma3's logit softcapping (Gemma 2's)",
    ));
    cases.push((
        with(dims("gemma3.attention.sliding_window_pattern", 0)),
        "sliding window 8 and global layer pattern 0 must each be at least 1",
    ));
    cases.push((
        write_gguf(&gemma, &embedding()),
        "has no tensor blk.0.attn_norm.weight",
    ));
    // A Qwen3 head size of its own that cannot be run: the key that gave it is named, not the
    // embedding length and head count it replaces.
    let qwen3 = |key_length: u32| {
        let header = vec![
            arch("qwen3"),
            dims("qwen3.embedding_length", 32),
            dims("qwen3.feed_forward_length", 64),
            dims("qwen3.block_count", 1),
            dims("qwen3.attention.head_count", 2),
            dims("qwen3.context_length", 16),
            dims("qwen3.attention.key_length", key_length),
        ];
        write_gguf(&header, &embedding())
    };
    cases.push((
        qwen3(15),
        "head size 15 (qwen3.attention.key_length) is odd; RoPE needs pairs",
    ));
    cases.push((
        qwen3(0),
        "GGUF qwen3.attention.key_length = 0 is outside 1..=",
    ));
    let mut bert = llama.clone();
    bert.push(("tokenizer.ggml.model", 8, text("bert")));
    cases.push((
        write_gguf(
            &bert,
            &[("token_embd.weight", vec![32, 8], 0, vec![0; 32 * 8 * 4])],
        ),
        "tokenizer is \"bert\"",
    ));
    // A byte-level vocabulary without its tokens.
    let mut gpt2 = llama.clone();
    gpt2.push(("tokenizer.ggml.model", 8, text("gpt2")));
    cases.push((
        write_gguf(
            &gpt2,
            &[("token_embd.weight", vec![32, 8], 0, vec![0; 32 * 8 * 4])],
        ),
        "tokenizer has no tokenizer.ggml.tokens list",
    ));
    cases.push((
        write_gguf(
            &llama,
            &[("token_embd.weight", vec![32, 8], 0, vec![0; 32 * 8 * 4])],
        ),
        "carries no tokenizer",
    ));
    for (bytes, expected) in cases {
        let inside = expected.contains("tokenizer");
        let error = load_error(bytes.clone(), !inside);
        assert!(error.contains(expected), "{expected:?} not in {error:?}");
        assert_eq!(error.lines().count(), 1, "{error}");
        // Streamed in (the page's download) with its length known, the same sentence.
        let tok = (!inside).then(|| read(stories260k("tok512.bin")));
        let streamed = stream_named("bad", &bytes, Some(bytes.len()), &[4093])
            .and_then(|files| Engine::load(files, tok.as_deref(), Quant::F32, &Backend::cpu()));
        assert_eq!(streamed.err().map(|e| e.to_string()), Some(error));
    }
}

/// `bytes` pushed into a [`GgufStream`] in pieces of the sizes `pieces` names, in turn.
fn stream(bytes: &[u8], total: Option<usize>, pieces: &[usize]) -> tokenometer::Result<ModelFiles> {
    stream_named("streamed", bytes, total, pieces)
}

fn stream_named(
    name: &str,
    bytes: &[u8],
    total: Option<usize>,
    pieces: &[usize],
) -> tokenometer::Result<ModelFiles> {
    let mut stream = GgufStream::new(total);
    let mut at = 0;
    for &piece in pieces.iter().cycle() {
        if at == bytes.len() {
            break;
        }
        let end = (at + piece).min(bytes.len());
        stream.push(&bytes[at..end])?;
        at = end;
    }
    Ok(ModelFiles::streamed(name, stream.finish()?))
}

/// A GGUF pushed in as it downloads, in pieces of any size (a byte, a block and a half, across
/// tensors' ends), loads as the file in memory does: the header parsed once its bytes are in,
/// each tensor made as its bytes pass, whatever its type.
#[test]
fn a_gguf_streamed_in_pieces_loads_as_the_file_does() {
    for (file, quant) in [
        ("stories260K-f32.gguf", Quant::F32),
        ("stories260K-q8_0.gguf", Quant::Q8),
        ("stories260K-q4_0.gguf", Quant::Q4),
    ] {
        let bytes = read(stories260k(file));
        let expected = greedy(&gguf_engine(file, quant), 24);
        for (total, pieces) in [
            (Some(bytes.len()), vec![bytes.len()]),
            (None, vec![1, 7, 51, 4093, 65536, 3]),
            (Some(bytes.len()), vec![33, 1 << 20]),
        ] {
            let files = stream(&bytes, total, &pieces).unwrap();
            let engine = Engine::load(files, None, quant, &Backend::cpu()).expect("loads");
            assert_eq!(
                greedy(&engine, 24),
                expected,
                "{file} in pieces of {pieces:?}"
            );
        }
    }
    // SmolLM2's shape: a header over a MiB, Q8_0 tensors of up to 30 MB.
    let bytes = smollm2_shaped_gguf();
    let whole = ModelFiles::gguf("SmolLM2-135M", bytes.clone())
        .load()
        .unwrap();
    let streamed = stream(&bytes, None, &[65536, 4099])
        .unwrap()
        .load()
        .unwrap();
    assert_eq!(streamed.config.vocab_size, 49152);
    let blocks = |m: &tokenometer::model::Matrix| {
        let b = m.blocks.as_ref().expect("Q8_0 blocks");
        (b.quants.clone(), b.scales.clone())
    };
    assert_eq!(
        blocks(&streamed.token_embedding),
        blocks(&whole.token_embedding)
    );
    for (a, b) in streamed.layers.iter().zip(&whole.layers) {
        assert_eq!(blocks(&a.w2), blocks(&b.w2));
        assert_eq!(a.rms_ffn, b.rms_ffn);
    }
}

/// A download that breaks off, or gives more than it promised, is a sentence naming where.
#[test]
fn a_stream_that_ends_early_is_named() {
    let bytes = read(stories260k("stories260K-q8_0.gguf"));
    let short = &bytes[..bytes.len() - 1];
    let error = stream(short, None, &[4096]).err().unwrap().to_string();
    assert!(
        error.contains(&format!(
            "the model file ended at byte {}, before the end of tensor",
            short.len()
        )),
        "{error}"
    );
    let error = stream(short, Some(bytes.len()), &[4096])
        .err()
        .unwrap()
        .to_string();
    assert!(error.contains("ended after"), "{error}");
    let longer = [bytes.as_slice(), b"more"].concat();
    let error = stream(&longer, Some(bytes.len()), &[4096])
        .err()
        .unwrap()
        .to_string();
    assert!(error.contains("gave more than the"), "{error}");
    // Not a GGUF: said at the first bytes, not after the whole file.
    let error = stream(b"PK\x03\x04 a zip file", None, &[4])
        .err()
        .unwrap()
        .to_string();
    assert!(error.contains("not a GGUF file"), "{error}");
}

/// A GGUF of SmolLM2-135M's shape (9 heads of 64 sharing 3 KV heads, rope theta 100000, tied
/// embeddings) with seeded random weights in Q8_0 and a SmolLM2-like vocabulary
/// ([`vocab_copies::smollm2_like`]): what `tokenometer synth --shape smollm2-135M --vocab ...
/// --q8` writes.
fn smollm2_shaped_gguf() -> Vec<u8> {
    use tokenometer::loading::gguf_writer;
    let config = tokenometer::loading::synth::Shape::SmolLm2_135M.config();
    let weights = tokenometer::loading::synth::weights(&config, 7);
    let mut metadata = gguf_writer::llama_metadata("SmolLM2-135M", &config, Some(Format::Q8_0));
    metadata.extend(vocab_copies::smollm2_like(byte_level_vocab("starcoder")));
    let mut bytes = Vec::new();
    gguf_writer::write_model(&weights, &metadata, Some(Format::Q8_0), &mut bytes).unwrap();
    bytes
}

#[test]
fn a_smollm2_shaped_gguf_chats_end_to_end() {
    let bytes = smollm2_shaped_gguf();
    // Q8_0: 34 bytes per 32 weights, the norms f32.
    assert!(
        (140_000_000..150_000_000).contains(&bytes.len()),
        "{}",
        bytes.len()
    );
    let header = Gguf::parse(&bytes).unwrap();
    let config = header.config().unwrap();
    assert_eq!(
        (config.n_heads, config.n_kv_heads, config.head_size()),
        (9, 3, 64)
    );
    assert_eq!(config.rope_theta, 100000.0);
    assert!(config.shared_classifier);
    let engine = Engine::load(
        ModelFiles::gguf("SmolLM2-135M", bytes),
        None,
        Quant::Q8,
        &Backend::cpu(),
    )
    .expect("loads");
    // SmolLM2-135M's published parameter count.
    assert_eq!(engine.info.parameters, 134_515_008);
    assert_eq!(engine.info.vocab_size, 49152);
    assert_eq!(engine.info.chat_template.as_deref(), Some("ChatML"));

    // The prompt goes in as a user's turn after the template's own system turn.
    let text = engine.prompt_text("Hi", true);
    assert_eq!(
        text,
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging \
         Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    );
    let ids = engine.encode_prompt("Hi", true).unwrap();
    assert_eq!(ids[0], 1, "<|im_start|> is one token");
    assert_eq!(
        ids.iter().filter(|&&id| id == 2).count(),
        2,
        "two turns end"
    );
    assert_eq!(
        engine.tokenizer.decode(&ids),
        text.replace(['<', '>'], "")
            .replace("|im_start|", "")
            .replace("|im_end|", "")
    );
    assert_eq!(
        engine.encode_prompt("Hi", false).unwrap(),
        engine.tokenizer.tokens("Hi").unwrap()
    );

    // It generates, and the streamed pieces are exactly the text of the ids.
    let mut tokens = Vec::new();
    let mut streamed = String::new();
    let options = GenerateOptions {
        max_tokens: 4,
        ..Default::default()
    };
    let reason = pollster::block_on(engine.generate("Hi", &options, &mut |event| {
        match event {
            tokenometer::Event::Token { id, text, .. } => {
                tokens.push(*id);
                streamed.push_str(text);
            }
            tokenometer::Event::Done { trailing_text, .. } => streamed.push_str(trailing_text),
            _ => {}
        }
        tokenometer::Flow::Continue
    }))
    .unwrap();
    assert_eq!(reason, tokenometer::StopReason::MaxTokens);
    assert_eq!(tokens.len(), 4);
    assert_eq!(streamed, engine.tokenizer.decode(&tokens));
}

/// `synth`'s shapes of the chat models people run in a browser have their published sizes: the
/// shape is what speed depends on, so it must be the real one.
#[test]
fn synth_shapes_of_chat_models_have_their_published_sizes() {
    use tokenometer::loading::synth::Shape;
    for (shape, parameters, kv_heads) in [
        ("smollm2-135M", 134_515_008, 3),
        ("smollm2-360M", 361_821_120, 5),
        ("tinyllama-1.1B", 1_100_048_384, 4),
    ] {
        let config = shape.parse::<Shape>().unwrap().config();
        assert_eq!(config.parameter_count(), parameters, "{shape}");
        assert_eq!(
            (config.head_size(), config.n_kv_heads),
            (64, kv_heads),
            "{shape}"
        );
    }
    let error = "llama-3.2-1b".parse::<Shape>().err().unwrap().to_string();
    assert!(error.contains("tinyllama-1.1B"), "{error}");
}

/// A GGUF of an architecture this engine does not run is named as such before its tokenizer is
/// read: Gemma 3's file (BOS id 2), before the engine ran it, failed on "needs BOS 1" instead.
#[test]
fn another_architecture_is_named_before_its_tokenizer() {
    let text = |s: &str| {
        [
            (s.len() as u64).to_le_bytes().to_vec(),
            s.as_bytes().to_vec(),
        ]
        .concat()
    };
    let bytes = write_gguf(
        &[
            ("general.architecture", 8, text("phi3")),
            ("tokenizer.ggml.model", 8, text("llama")),
            (
                "tokenizer.ggml.bos_token_id",
                4,
                2u32.to_le_bytes().to_vec(),
            ),
        ],
        &[],
    );
    let error = load_error(bytes, false);
    assert_eq!(
        error,
        "bad model file: GGUF general.architecture is \"phi3\"; this engine runs \"llama\" (Llama 2 \
         and 3, SmolLM2, TinyLlama), \"gemma3\" (Gemma 3), \"qwen2\" (Qwen2, Qwen2.5), \"qwen3\" (Qwen3)"
    );
}

/// Llama 3's `rope_freqs` divides each pair's RoPE frequency: a factor of 0 (or less) is refused
/// by name, and one of the wrong length as any tensor of the wrong shape; the right ones load.
#[test]
fn rope_frequency_factors_are_checked() {
    use tokenometer::loading::gguf_writer;
    let mut config = tokenometer::loading::synth::Shape::Stories15M.config();
    config.n_layers = 1;
    let half = config.head_size() / 2;
    let load = |factors: Vec<f32>| {
        let mut config = config.clone();
        config.rope_factors = Some(factors);
        let weights = tokenometer::loading::synth::weights(&config, 1);
        let metadata = gguf_writer::llama_metadata("stories15M", &config, None);
        let mut bytes = Vec::new();
        gguf_writer::write_model(&weights, &metadata, None, &mut bytes).unwrap();
        let file = std::sync::Arc::new(tokenometer::model::FileBytes::from(bytes.as_slice()));
        tokenometer::loading::gguf::load(
            &tokenometer::loading::gguf::Tensors::File(&file.clone().into()),
            &Gguf::parse(&bytes).unwrap(),
        )
        .map(|w| w.config.rope_factors)
        .map_err(|e| e.to_string())
    };
    let good: Vec<f32> = (0..half).map(|i| 1.0 + i as f32).collect();
    assert_eq!(load(good.clone()), Ok(Some(good)));
    let mut zero = vec![1.0; half];
    zero[3] = 0.0;
    let error = load(zero).unwrap_err();
    assert!(
        error.contains("rope_freqs.weight holds a factor of 0 or less"),
        "{error}"
    );
    let error = load(vec![1.0; half + 1]).unwrap_err();
    assert!(
        error.contains("GGUF tensor rope_freqs.weight has dimensions"),
        "{error}"
    );
    let error = load(vec![f32::NAN; half]).unwrap_err();
    assert!(error.contains("rope_freqs.weight holds NaN"), "{error}");
}

/// A file outside memory (the page's download, `FileSource::Outside`), with every read it is asked
/// for: where it starts and how long it is.
struct Outside {
    bytes: Vec<u8>,
    reads: std::sync::Mutex<Vec<(usize, usize)>>,
}

impl tokenometer::model::ReadAt for Outside {
    fn len(&self) -> usize {
        self.bytes.len()
    }
    fn read_at(&self, start: usize, out: &mut [u8]) {
        self.reads.lock().unwrap().push((start, out.len()));
        out.copy_from_slice(&self.bytes[start..start + out.len()]);
    }
}

fn outside(bytes: Vec<u8>) -> std::sync::Arc<Outside> {
    std::sync::Arc::new(Outside {
        bytes,
        reads: Default::default(),
    })
}

/// A GGUF held outside the engine's memory loads as the same file in memory does, its header
/// read from its first bytes (twice as many until it fits) and each tensor a MiB at a time, so
/// the page's memory never holds the file, nor a whole tensor's bytes, beside the weights.
#[test]
fn a_gguf_outside_memory_is_read_a_piece_at_a_time() {
    use tokenometer::model::FileSource;
    // The same text from a small file either way.
    let bytes = read(stories260k("stories260K-q8_0.gguf"));
    let file = outside(bytes.clone());
    let files = ModelFiles::gguf_from("stories260K", FileSource::Outside(file.clone()));
    let engine = Engine::load(files, None, Quant::Q8, &Backend::cpu()).expect("loads");
    assert_eq!(
        greedy(&engine, 24),
        greedy(&gguf_engine("stories260K-q8_0.gguf", Quant::Q8), 24)
    );
    // SmolLM2's shape: a 49,152-token vocabulary (a header over a MiB) and a 30 MB embedding.
    let bytes = smollm2_shaped_gguf();
    let parsed = Gguf::parse(&bytes).unwrap();
    let data_start = parsed.tensors.values().map(|t| t.start).min().unwrap();
    assert!(
        data_start > 1 << 20,
        "a header over a MiB: {data_start} bytes"
    );
    let tensor_bytes: usize = parsed.tensors.values().map(|t| t.end - t.start).sum();
    let file = outside(bytes);
    let weights = ModelFiles::gguf_from("SmolLM2-135M", FileSource::Outside(file.clone()))
        .load()
        .unwrap();
    assert_eq!(weights.config.vocab_size, 49152);
    let reads = file.reads.lock().unwrap();
    // (start, length) of each read: the header's from byte 0, the tensors' after it.
    type Reads = Vec<(usize, usize)>;
    let (header, tensors): (Reads, Reads) = reads.iter().copied().partition(|r| r.0 == 0);
    let doubling: Vec<usize> = (0..header.len()).map(|k| (1 << 20) << k).collect();
    assert_eq!(header.iter().map(|r| r.1).collect::<Vec<_>>(), doubling);
    let largest = tensors.iter().map(|r| r.1).max().unwrap();
    assert!(
        largest <= 1 << 20,
        "the largest read of a tensor: {largest} bytes"
    );
    let read: usize = tensors.iter().map(|r| r.1).sum();
    assert_eq!(read, tensor_bytes, "every tensor's bytes read once");
}
