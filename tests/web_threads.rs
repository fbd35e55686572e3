//! The page's threaded build in a real browser (wasm-bindgen-test in headless Chromium, in a
//! dedicated worker of a cross-origin isolated page, as the page's engine runs): the CPU kernels on
//! Web Workers that share the module's memory give the very bits one thread gives. Built and run
//! by `make test-wasm-threads` (nightly Rust, `-Z build-std`, atomics and shared memory); empty in
//! every other build.
#![cfg(all(target_arch = "wasm32", target_feature = "atomics"))]

use tokenometer::api::web::load_session;
use tokenometer::backend::Llama;
use tokenometer::cpu::{Isa, Threads};
use tokenometer::loading::synth::{Shape, weights};
use tokenometer::{Backend, Engine, Event, Flow, GenerateOptions, ModelFiles, Quant};
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_dedicated_worker);

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

/// The test runner serves this build's glue as wasm-bindgen-test.js (the page's is tokenometer.js,
/// which the threads find by themselves).
fn name_the_glue() {
    js_sys::eval(
        "globalThis.tokenometerGlue = new URL('wasm-bindgen-test.js', location.href).href",
    )
    .unwrap();
}

/// `count` threads, once all have started (each is a Web Worker that loads the module).
async fn threads(count: usize) -> Threads {
    name_the_glue();
    let threads = Threads::new(count).unwrap();
    for _ in 0..2000 {
        if threads.started().unwrap() == count - 1 {
            return threads;
        }
        sleep(10).await;
    }
    panic!("{count} threads did not start in 20 s");
}

async fn sleep(ms: i32) {
    let promise = js_sys::eval(&format!("new Promise(r => setTimeout(r, {ms}))")).unwrap();
    JsFuture::from(promise.unchecked_into::<js_sys::Promise>())
        .await
        .unwrap();
}

/// Every logit, as bits, of a prefill of `prompt` ids then one decode step for each of `steps`.
async fn logit_bits(model: &Llama, prompt: &[u32], steps: &[u32]) -> Vec<u32> {
    let mut cache = model.new_cache();
    let mut out = model
        .forward(prompt, &mut cache, true)
        .into_vec()
        .await
        .unwrap();
    for id in steps {
        out.extend(
            model
                .forward(std::slice::from_ref(id), &mut cache, true)
                .into_vec()
                .await
                .unwrap(),
        );
    }
    out.iter().map(|v| v.to_bits()).collect()
}

#[wasm_bindgen_test]
async fn two_threads_give_the_bits_of_one_on_every_quantization() {
    let two = threads(2).await;
    // stories260K (its matrices split by rows), and two layers of stories15M's shape with a
    // 200-token prompt (long enough that attention is split too).
    let mut small = Shape::Stories15M.config();
    small.n_layers = 2;
    let ids: Vec<u32> = (0..216).map(|i| (i * 7919 + 13) % 32000).collect();
    for quant in [Quant::F32, Quant::Q8, Quant::Q4] {
        let model =
            |threads: &Threads| Llama::new(weights(&small, 7), quant, None, Isa::detect(), threads);
        let one = logit_bits(&model(&Threads::one()), &ids[..200], &ids[200..]).await;
        let before = two.parts_taken();
        let many = logit_bits(&model(&two), &ids[..200], &ids[200..]).await;
        assert!(
            one == many,
            "stories15M shape, {quant}: 2 threads differ from 1"
        );
        // The same bits would come from the caller alone: the Web Worker must have run parts.
        let worker = two.parts_taken()[1] - before[1];
        assert!(worker > 0, "{quant}: the Web Worker ran no part of the run");

        let engine = |backend: &Backend| {
            Engine::load(
                ModelFiles::llama2c("stories260K", MODEL.to_vec()),
                Some(TOKENIZER),
                quant,
                backend,
            )
            .unwrap()
        };
        let reference: Vec<u32> = REFERENCE
            .lines()
            .find(|l| l.starts_with("sequence_ids:"))
            .unwrap()["sequence_ids:".len()..]
            .split_whitespace()
            .map(|n| n.parse().unwrap())
            .collect();
        let one = engine(&Backend::cpu());
        let many = engine(&Backend::cpu().with_threads(two.clone()));
        let (prompt, steps) = (&reference[..64], &reference[64..96]);
        let one = logit_bits(&one.model, prompt, steps).await;
        let many = logit_bits(&many.model, prompt, steps).await;
        assert!(one == many, "stories260K, {quant}: 2 threads differ from 1");
    }
}

#[wasm_bindgen_test]
async fn the_js_api_loads_on_threads_and_generates_run_c_s_text() {
    name_the_glue();
    let session = load_session(
        "stories260K".into(),
        js_sys::Uint8Array::from(MODEL),
        Some(TOKENIZER.to_vec()),
        "cpu".into(),
        "f32".into(),
        None,
        Some(3),
        None,
    )
    .await
    .map_err(JsValue::from)
    .unwrap();
    let info = session.info();
    let adapter = js_sys::Reflect::get(&info, &"adapter".into()).unwrap();
    assert_eq!(
        adapter.as_string().unwrap(),
        "CPU (SIMD128+relaxed), 3 threads"
    );

    // The engine on 3 threads decodes run.c's greedy ids.
    let engine = Engine::load(
        ModelFiles::llama2c("stories260K", MODEL.to_vec()),
        Some(TOKENIZER),
        Quant::F32,
        &Backend::cpu().with_threads(threads(3).await),
    )
    .unwrap();
    let mut ids = Vec::new();
    let options = GenerateOptions {
        max_tokens: 100,
        ..Default::default()
    };
    engine
        .generate("Once upon a time", &options, &mut |e| {
            if let Event::Token { id, .. } = e {
                ids.push(*id);
            }
            Flow::Continue
        })
        .await
        .unwrap();
    let reference: Vec<u32> = REFERENCE
        .lines()
        .find(|l| l.starts_with("sequence_ids:"))
        .unwrap()["sequence_ids:".len()..]
        .split_whitespace()
        .skip(5)
        .take(100)
        .map(|n| n.parse().unwrap())
        .collect();
    assert_eq!(ids, reference);
}
