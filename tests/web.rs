//! The engine and its JavaScript API inside a real browser (wasm-bindgen-test in headless Chromium):
//! the CPU backend (tokenometer's kernels, SIMD128) and WebGPU (Chromium's software adapter here).
#![cfg(target_arch = "wasm32")]

use tokenometer::api::web::{Session, load_session};
use tokenometer::{
    Backend, BackendChoice, Engine, Event, Flow, GenerateOptions, ModelFiles, Quant, StopReason,
};
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

/// The CPU kernels against plain arithmetic (tests/kernels.rs, natively a test of its own), here
/// in this binary: each wasm test binary links the whole engine with LTO over one codegen unit,
/// about 2 minutes of one core (docs/build.md).
#[path = "kernels.rs"]
mod kernels;

const MODEL: &[u8] = include_bytes!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/models/stories260K/stories260K.bin"
));
const TOKENIZER: &[u8] = include_bytes!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/models/stories260K/tok512.bin"
));
const REFERENCE: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/models/stories260K/reference-greedy-ids.txt"
));

/// The 252 ids run.c generated after the 5 prompt ids.
fn reference_generated() -> Vec<u32> {
    let line = REFERENCE
        .lines()
        .find(|l| l.starts_with("sequence_ids:"))
        .unwrap();
    line["sequence_ids:".len()..]
        .split_whitespace()
        .skip(5)
        .map(|n| n.parse().unwrap())
        .collect()
}

fn engine(backend: &Backend, quant: Quant) -> Engine {
    Engine::load(
        ModelFiles::llama2c("stories260K", MODEL.to_vec()),
        Some(TOKENIZER),
        quant,
        backend,
    )
    .unwrap()
}

async fn greedy(engine: &Engine, n: usize) -> (Vec<u32>, String, StopReason) {
    let mut ids = Vec::new();
    let mut text = String::new();
    let options = GenerateOptions {
        max_tokens: n,
        ..Default::default()
    };
    let reason = engine
        .generate("Once upon a time", &options, &mut |e| {
            if let Event::Token {
                id, text: piece, ..
            } = e
            {
                ids.push(*id);
                text.push_str(piece);
            }
            Flow::Continue
        })
        .await
        .unwrap();
    (ids, text, reason)
}

#[wasm_bindgen_test]
async fn greedy_f32_cpu_equals_the_reference() {
    let (ids, text, reason) = greedy(&engine(&Backend::cpu(), Quant::F32), 252).await;
    assert_eq!(reason, StopReason::MaxTokens);
    assert_eq!(ids, reference_generated());
    // The streamed pieces concatenate to the decoded text.
    let engine = engine(&Backend::cpu(), Quant::F32);
    let mut all = vec![378];
    all.extend(&ids);
    assert_eq!(text, engine.tokenizer.decode(&all)[" time".len()..]);
}

#[wasm_bindgen_test]
async fn greedy_f32_webgpu_equals_the_reference_prefix() {
    // SwiftShader's WebGPU is slow: a short prefix is enough to prove the kernels right.
    let backend = Backend::init(BackendChoice::Wgpu)
        .await
        .expect("WebGPU adapter (run Chromium with --enable-unsafe-webgpu)");
    let (ids, _, _) = greedy(&engine(&backend, Quant::F32), 24).await;
    assert_eq!(ids, reference_generated()[..24]);
}

#[wasm_bindgen_test]
async fn q8_runs_on_cpu_and_webgpu() {
    let cpu = engine(&Backend::cpu(), Quant::Q8);
    let (ids, _, _) = greedy(&cpu, 24).await;
    assert_eq!(ids.len(), 24);
    let agree = ids
        .iter()
        .zip(reference_generated())
        .filter(|(a, b)| **a == *b)
        .count();
    assert!(agree >= 20, "q8 CPU agrees on {agree}/24");
    // WebGPU's q8 teacher-forced along the CPU's q8 sequence: where its choice differs from the
    // CPU's, the CPU's best two logits there were a near tie (within 0.1): the GPU multiplies f32
    // activations with the blocks, the CPU int8 ones, as llama.cpp's backends differ.
    let gpu = Backend::init(BackendChoice::Wgpu).await.unwrap();
    let gpu = engine(&gpu, Quant::Q8);
    let mut sequence = cpu.encode_prompt("Once upon a time", false).unwrap();
    let prompt = sequence.len();
    sequence.extend(&ids);
    let gpu_choices = gpu.predictions(&sequence).await.unwrap();
    let cpu_logits = cpu.logits_along(&sequence, 0).await.unwrap();
    let vocab = cpu.model.config.vocab_size;
    let mut parted = 0;
    for (i, &choice) in gpu_choices.iter().enumerate().skip(prompt - 1) {
        let Some(&next) = sequence.get(i + 1) else {
            break;
        };
        if choice != next {
            let row = &cpu_logits[i * vocab..(i + 1) * vocab];
            let (best, choice_logit) = (row[next as usize], row[choice as usize]);
            assert!(
                best - choice_logit <= 0.1,
                "position {i}: the CPU's {next} by {} over the GPU's {choice}",
                best - choice_logit
            );
            parted += 1;
        }
    }
    assert!(
        parted <= 3,
        "WebGPU q8 parted from the CPU at {parted} of 24 positions"
    );
}

async fn session(model: &[u8]) -> Result<Session, JsValue> {
    load_session(
        "stories260K".into(),
        js_sys::Uint8Array::from(model),
        Some(TOKENIZER.to_vec()),
        "cpu".into(),
        "f32".into(),
        None,
        None,
        None,
    )
    .await
    .map_err(JsValue::from)
}

/// A property of a JS object.
fn get(value: &JsValue, key: &str) -> JsValue {
    js_sys::Reflect::get(value, &key.into()).unwrap()
}

#[wasm_bindgen_test]
async fn the_js_api_streams_events_with_reports_pump_by_pump() {
    let session = session(MODEL).await.unwrap();
    let info = session.info();
    assert_eq!(get(&info, "model").as_string().unwrap(), "stories260K");
    JsFuture::from(session.warm_up()).await.unwrap();

    let options = js_sys::JSON::parse(r#"{"max_tokens": 60}"#).unwrap();
    let run = session.start("Once upon a time".into(), options).unwrap();
    let mut kinds = Vec::new();
    let mut ids = Vec::new();
    let mut pumps = 0;
    let report = loop {
        let pumped = JsFuture::from(run.pump(1.0)).await.unwrap();
        pumps += 1;
        let events: js_sys::Array = get(&pumped, "events").unchecked_into();
        for event in events.iter() {
            kinds.push(get(&event, "event").as_string().unwrap());
            if let Some(id) = get(&event, "id").as_f64() {
                ids.push(id as u32);
            }
        }
        let report = get(&pumped, "report");
        assert!(get(&report, "conditions").is_object());
        if get(&pumped, "done").as_bool().unwrap() {
            break report;
        }
    };
    // The prefill's pump returns at once, with the first token, so TTFT shows without delay.
    assert_eq!(kinds[..2], ["prefill", "token"]);
    assert_eq!(kinds.last().map(String::as_str), Some("done"));
    assert!(pumps >= 2, "{pumps} pumps");
    assert_eq!(ids, reference_generated()[..60]);
    let conditions = get(&report, "conditions");
    assert_eq!(
        get(&conditions, "stop_reason").as_string().unwrap(),
        "max_tokens"
    );
    assert_eq!(get(&conditions, "output_tokens").as_f64(), Some(60.0));
    assert!(get(&report, "decode_tps").as_f64().unwrap() > 0.0);
    // In a browser the warm-up runs long enough for the hot code to be optimized.
    let warm_up_ms = get(&conditions, "warm_up_ms").as_f64().unwrap();
    assert!(
        warm_up_ms >= tokenometer::decode::engine::WARM_UP_MS,
        "{warm_up_ms}"
    );
}

#[wasm_bindgen_test]
async fn cancel_between_pumps_stops_a_run() {
    let session = session(MODEL).await.unwrap();
    let run = session
        .start("Once upon a time".into(), JsValue::UNDEFINED)
        .unwrap();
    let mut tokens = 0;
    while tokens < 3 {
        let pumped = JsFuture::from(run.pump(0.0)).await.unwrap();
        let events: js_sys::Array = get(&pumped, "events").unchecked_into();
        tokens += events
            .iter()
            .filter(|e| get(e, "event").as_string().as_deref() == Some("token"))
            .count();
    }
    let done = run.cancel().unwrap();
    assert_eq!(get(&done, "event").as_string().as_deref(), Some("done"));
    assert_eq!(
        get(&done, "reason").as_string().as_deref(),
        Some("cancelled")
    );
    assert_eq!(get(&done, "output_tokens").as_f64(), Some(tokens as f64));
    // Nothing more comes; a second cancel finds nothing to stop.
    let pumped = JsFuture::from(run.pump(10.0)).await.unwrap();
    assert_eq!(get(&pumped, "done").as_bool(), Some(true));
    assert_eq!(js_sys::Array::from(&get(&pumped, "events")).length(), 0);
    assert!(run.cancel().unwrap().is_null());
    let report = run.report().unwrap();
    let conditions = get(&report, "conditions");
    assert_eq!(
        get(&conditions, "stop_reason").as_string().unwrap(),
        "cancelled"
    );
}

#[wasm_bindgen_test]
async fn a_truncated_model_is_an_error_not_a_panic() {
    let error = session(&MODEL[..MODEL.len() / 3])
        .await
        .err()
        .expect("refused");
    let message = js_sys::Reflect::get(&error, &"message".into())
        .unwrap()
        .as_string()
        .unwrap();
    assert!(message.contains("bad model file"), "{message}");
    assert_eq!(
        tokenometer::api::web::recorded_fatal(),
        (None, None),
        "an error is not a crash"
    );
    // And an over-long prompt is an error too, with the session still usable afterwards.
    let session = session(MODEL).await.unwrap();
    let long = "the cat sat on the mat ".repeat(200);
    let error = JsValue::from(session.start(long, JsValue::UNDEFINED).err().unwrap());
    let message = get(&error, "message").as_string().unwrap();
    assert!(message.contains("context holds 512"), "{message}");
    // A measured figure passed in that is not one is refused, for a run and a lab alike.
    for bad in [
        r#"{"read_gb_per_s": 0}"#,
        r#"{"read_gb_per_s": -3}"#,
        r#"{"dispatch_us": -1}"#,
    ] {
        let options = js_sys::JSON::parse(bad).unwrap();
        let error = JsValue::from(session.start("Once".into(), options).err().expect(bad));
        let message = get(&error, "message").as_string().unwrap();
        assert!(
            message.contains("a measured figure is a positive number"),
            "{bad}: {message}"
        );
    }
    let options = js_sys::JSON::parse(r#"{"users": 1, "read_gb_per_s": 0}"#).unwrap();
    let error = JsValue::from(
        session
            .start_lab(options, None, None)
            .err()
            .expect("refused"),
    );
    let message = get(&error, "message").as_string().unwrap();
    assert!(message.contains("read_gb_per_s is 0"), "{message}");
}

/// In wasm `usize` is 32 bits: this header's size, 5 * 2^32 + 98304 floats, wraps to exactly the
/// file's length there. It is refused, quoting the real size (natively it is refused the same way).
#[wasm_bindgen_test]
async fn a_header_whose_size_wraps_in_32_bits_is_refused_with_its_real_size() {
    assert_eq!(usize::BITS, 32);
    let mut bytes: Vec<u8> = [32768i32, 131072, 1, 1, 1, 131072, 2]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    bytes.resize(28 + 4 * 98304, 0);
    let error = session(&bytes).await.err().expect("refused");
    let message = js_sys::Reflect::get(&error, &"message".into())
        .unwrap()
        .as_string()
        .unwrap();
    assert!(
        message.contains("header says 85899739164 bytes")
            && message.contains("the file has 393244"),
        "{message}"
    );
}

#[wasm_bindgen_test]
async fn the_lab_batches_users_pump_by_pump_and_cancels_between_pumps() {
    let session = session(MODEL).await.unwrap();
    let options = js_sys::JSON::parse(r#"{"users": 3, "max_tokens": 40}"#).unwrap();
    // An objective every user meets (TTFT within 10 minutes): all three are good.
    let lab = session.start_lab(options, Some(600_000.0), None).unwrap();
    let mut tokens = [0usize; 3];
    let mut ids: Vec<Vec<u32>> = vec![Vec::new(); 3];
    let report = loop {
        let pumped = JsFuture::from(lab.pump(5.0)).await.unwrap();
        let events: js_sys::Array = get(&pumped, "events").unchecked_into();
        for event in events.iter() {
            if get(&event, "event").as_string().as_deref() == Some("token") {
                let seq = get(&event, "seq").as_f64().unwrap() as usize;
                tokens[seq] += 1;
                ids[seq].push(get(&event, "id").as_f64().unwrap() as u32);
            }
        }
        if get(&pumped, "done").as_bool().unwrap() {
            break get(&pumped, "report");
        }
    };
    assert_eq!(tokens, [40, 40, 40]);
    // User 0 has the reference prompt: its batched greedy ids are run.c's.
    assert_eq!(ids[0], reference_generated()[..40]);
    assert_eq!(get(&report, "users").as_f64(), Some(3.0));
    assert_eq!(get(&report, "output_tokens").as_f64(), Some(120.0));
    assert_eq!(get(&get(&report, "goodput"), "good").as_f64(), Some(3.0));
    let aggregate = get(&report, "aggregate_tps").as_f64().unwrap();
    assert!(aggregate >= get(&report, "per_user_tps_p50").as_f64().unwrap());
    // Once every user has ended, the step's ceiling at its 3 rows, timed in wasm: above the
    // aggregate, since the products are only part of a step.
    let products = get(&report, "products_alone");
    assert_eq!(get(&products, "rows").as_f64(), Some(3.0));
    assert!(get(&products, "passes").as_f64().unwrap() >= 5.0);
    assert!(get(&products, "tps").as_f64().unwrap() > aggregate);
    assert_eq!(
        get(&get(&lab.report().unwrap(), "products_alone"), "rows").as_f64(),
        Some(3.0)
    );

    // Cancel between pumps: every user ends as cancelled, and the lab is done.
    let options = js_sys::JSON::parse(r#"{"users": 2, "max_tokens": 400}"#).unwrap();
    let lab = session.start_lab(options, None, None).unwrap();
    JsFuture::from(lab.pump(1.0)).await.unwrap();
    let cancelled: js_sys::Array = lab.cancel_all().unwrap().unchecked_into();
    assert_eq!(cancelled.length(), 2);
    for done in cancelled.iter() {
        assert_eq!(
            get(&done, "reason").as_string().as_deref(),
            Some("cancelled")
        );
    }
    let pumped = JsFuture::from(lab.pump(1.0)).await.unwrap();
    assert_eq!(get(&pumped, "done").as_bool(), Some(true));
    assert_eq!(
        get(&lab.report().unwrap(), "requests_completed").as_f64(),
        Some(0.0)
    );
    // Stop ends the lab at once: no ceiling is timed after a cancel.
    assert!(get(&lab.report().unwrap(), "products_alone").is_null());

    // A bad setting is a sentence.
    let bad = js_sys::JSON::parse(r#"{"users": 3, "arrival": "sometimes"}"#).unwrap();
    let error = session
        .start_lab(bad, None, None)
        .err()
        .map(JsValue::from)
        .unwrap();
    let message = get(&error, "message").as_string().unwrap();
    assert!(message.contains("use burst"), "{message}");
    let options = js_sys::JSON::parse(r#"{"users": 1}"#).unwrap();
    let error = session
        .start_lab(options, None, Some(-1.0))
        .err()
        .map(JsValue::from)
        .unwrap();
    let message = get(&error, "message").as_string().unwrap();
    assert!(
        message.contains("positive number of milliseconds"),
        "{message}"
    );
}
