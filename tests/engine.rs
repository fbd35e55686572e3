//! The engine against llama2.c's reference output, on the CPU and the wgpu backends.

mod common;

use common::*;
use tokenometer::{Backend, BackendChoice, Engine, Event, Flow, GenerateOptions, ModelFiles, Quant, StopReason};

fn engine(backend: &Backend, quant: Quant) -> Engine {
    let files = ModelFiles::llama2c("stories260K", read(stories260k("stories260K.bin")));
    Engine::load(files, &read(stories260k("tok512.bin")), quant, backend).expect("loads")
}

fn wgpu() -> Backend {
    pollster::block_on(Backend::init(BackendChoice::Wgpu)).expect(
        "the wgpu backend needs a Vulkan driver; on a machine without a GPU install Mesa's \
         software one: apt-get install -y mesa-vulkan-drivers",
    )
}

/// Greedy generation of the 252 tokens run.c generated after the prompt; returns ids and text.
fn greedy(engine: &Engine, tokens: usize) -> (Vec<u32>, String, StopReason) {
    let mut ids = Vec::new();
    let mut text = String::new();
    let options = GenerateOptions { max_tokens: tokens, ..Default::default() };
    let reason = pollster::block_on(engine.generate("Once upon a time", &options, &mut |e| {
        match e {
            Event::Token { id, text: piece, .. } => {
                ids.push(*id);
                text.push_str(piece);
            }
            Event::Done { trailing_text, .. } => text.push_str(trailing_text),
            Event::Prefill { .. } => {}
        }
        Flow::Continue
    }))
    .expect("generates");
    (ids, text, reason)
}

fn check_reference(backend: &Backend, steps: usize) {
    let (prompt, sequence) = reference_ids();
    let engine = engine(backend, Quant::F32);
    assert_eq!(engine.encode_prompt("Once upon a time").unwrap(), prompt);
    let expected = &sequence[prompt.len()..prompt.len() + steps];
    let (ids, text, reason) = greedy(&engine, steps);
    assert_eq!(reason, StopReason::MaxTokens);
    assert_eq!(ids, expected, "greedy ids differ from run.c on {}", backend.adapter);
    if steps == sequence.len() - prompt.len() {
        assert_eq!(format!("Once upon a time{text}"), reference_text());
    }
}

#[test]
fn greedy_f32_cpu_reproduces_run_c_all_256_steps() {
    check_reference(&Backend::cpu(), 252);
}

#[test]
fn greedy_f32_wgpu_reproduces_run_c_all_256_steps() {
    check_reference(&wgpu(), 252);
}
