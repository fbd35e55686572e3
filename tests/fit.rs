//! Will it fit, before the download (`api::fit`): the weights it counts from a GGUF's header
//! alone are what loading holds (each quantization, on real files: SmolLM2's Q4_1, Gemma 3's
//! Q4_K_M, stories260K's Q8_0), and a model past the engine's memory is refused with what fits.

#![cfg(not(target_arch = "wasm32"))]

use tokenometer::api::fit::{Limits, fit, need};
use tokenometer::backend::Backend;
use tokenometer::cpu::Isa;
use tokenometer::loading::ModelFiles;
use tokenometer::loading::gguf::Gguf;
use tokenometer::{Engine, Quant};

fn root() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Each quantization's estimate against the engine's own count of what it loaded, on the CPU with
/// the scalar kernels: they hold blocks as the page's wasm does, f32 scales unpacked (natively
/// the AVX2 kernels pack a GGUF's f16 scales in 2 bytes: `cpu::packed`).
fn weights_as_loaded(rel: &str, quants: &[Quant]) {
    let path = root().join(rel);
    assert!(path.exists(), "{rel} is missing: run `make models`");
    let bytes = std::fs::read(&path).unwrap();
    let header = Gguf::parse(&bytes).unwrap();
    for &quant in quants {
        let estimate = need(&header, quant, 64, false).unwrap().weight_bytes;
        let files = ModelFiles::gguf("fit", bytes.clone());
        let engine = Engine::load(files, None, quant, &Backend::cpu_with(Isa::Scalar)).unwrap();
        let loaded = engine.info.weight_bytes;
        let off = estimate as f64 / loaded as f64 - 1.0;
        eprintln!(
            "{rel} at {quant}: estimate {estimate}, loaded {loaded} ({:+.3}%)",
            100.0 * off
        );
        assert!(
            off.abs() < 0.01,
            "{rel} at {quant}: estimate {estimate}, loaded {loaded}"
        );
    }
}

#[test]
fn the_weights_counted_from_the_header_are_what_loading_holds() {
    let smollm2 = "models/cache/smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf";
    weights_as_loaded(smollm2, &[Quant::Stored, Quant::F32, Quant::Q8, Quant::Q4]);
    weights_as_loaded(
        "models/cache/gemma3-270m/gemma-3-270m-q4_k_m.gguf",
        &[Quant::Stored, Quant::Q8],
    );
    weights_as_loaded(
        "models/stories260K/stories260K-q8_0.gguf",
        &[Quant::Stored, Quant::F32],
    );
}

#[test]
fn past_the_memory_it_is_refused_with_what_would_fit() {
    let path = root().join("models/cache/smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf");
    let header = Gguf::parse(&std::fs::read(path).unwrap()).unwrap();
    let memory = |bytes: u64| Limits {
        memory_bytes: Some(bytes),
        ..Default::default()
    };
    // A device whose engine holds 300 MB: SmolLM2 at f32 (about 540 MB of weights) cannot fit;
    // as stored (Q4_1) and q8 can; q4 cannot (re-encoding the tied table holds its f32 copy,
    // 113 MB, and the table is kept beside the q4 classifier).
    let f = fit(&header, Quant::F32, 512, false, &memory(300_000_000)).unwrap();
    assert!(!f.fits, "{f:?}");
    let expected = "but the engine holds at most 300.0 MB (wasm32's memory): choose stored \
                    (202.5 MB) or q8 (245.9 MB); only its header was downloaded";
    assert!(f.sentence.contains(expected), "{}", f.sentence);
    let q8 = fit(&header, Quant::Q8, 512, false, &memory(300_000_000)).unwrap();
    assert!(q8.fits, "{}", q8.sentence);
    // Keys and values at a long context are what does not fit: fewer positions would.
    let kv = fit(&header, Quant::Q4, 1 << 20, false, &memory(400_000_000)).unwrap();
    assert_eq!(
        kv.positions, 8192,
        "the model's context bounds the positions"
    );
    let most = kv.positions_that_fit.expect("fewer positions fit");
    assert!(most > 64 && most < 8192, "{most}");
    let fewer = format!("ask for fewer tokens (at most {most} positions fit)");
    assert!(kv.sentence.contains(&fewer), "{}", kv.sentence);
    let at_most = fit(&header, Quant::Q4, most, false, &memory(400_000_000)).unwrap();
    assert!(at_most.fits, "{}", at_most.sentence);
    // On a GPU whose bindings hold 8 MiB, a layer at f32 (14.2 MB: one buffer) cannot be bound;
    // at q8 (4.0 MB) it can.
    let gpu = Limits {
        max_binding_bytes: Some(8 << 20),
        ..Default::default()
    };
    let g = fit(&header, Quant::F32, 512, true, &gpu).unwrap();
    let expected = "a layer (14.2 MB) is more than this GPU binds at once (8.4 MB): choose";
    assert!(!g.fits && g.sentence.contains(expected), "{}", g.sentence);
    assert!(fit(&header, Quant::Q8, 512, true, &gpu).unwrap().fits);
}
