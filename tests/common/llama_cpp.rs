//! What the tests against llama.cpp's greedy ids share (`tests/real_models.rs`,
//! `tests/architectures.rs`): running the engine greedily and along llama.cpp's ids, and the
//! files' hashes.

use std::path::Path;

use sha2::{Digest, Sha256};
use tokenometer::cpu::Isa;
use tokenometer::{Engine, Event, Flow, GenerateOptions};

pub fn sha256(path: &Path) -> String {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A prompt for a report line: quoted, at most 60 characters.
pub fn short(prompt: &str) -> String {
    let quoted = format!("{prompt:?}");
    match quoted.char_indices().nth(56) {
        Some((at, _)) => format!("{}...", &quoted[..at]),
        None => quoted,
    }
}

/// Greedy ids; where generation ends on a stop token (which the engine does not stream), the
/// stop token llama.cpp listed there, if it is one of ours.
pub fn greedy(
    engine: &Engine,
    prompt: &str,
    chat: bool,
    steps: usize,
    expected: &[u32],
) -> Vec<u32> {
    let options = GenerateOptions {
        max_tokens: steps,
        chat,
        sampling: tokenometer::Sampling {
            temperature: 0.0,
            ..Default::default()
        },
        ..Default::default()
    };
    let mut ids = Vec::new();
    let mut eos = false;
    pollster::block_on(engine.generate(prompt, &options, &mut |e| {
        match e {
            Event::Token { id, .. } => ids.push(*id),
            Event::Done { reason, .. } => eos = *reason == tokenometer::StopReason::Eos,
            _ => {}
        }
        Flow::Continue
    }))
    .unwrap();
    // The engine ends at a stop token without streaming it; llama.cpp's list has it.
    if eos {
        ids.push(
            expected
                .get(ids.len())
                .copied()
                .filter(|&id| engine.tokenizer.is_stop(id))
                .unwrap_or(u32::MAX),
        );
    }
    ids
}

/// What one run along llama.cpp's ids shows: free-running agreement, and teacher-forced top-1
/// agreement with the largest logit gap where the two differ.
pub struct Along {
    pub free: usize,
    pub forced: usize,
    pub positions: usize,
    pub worst_gap: f32,
    /// Where our choice is not llama.cpp's: the position, and llama.cpp's token's gap below our
    /// best (tests/architectures.rs judges each; tests/real_models.rs the worst).
    #[allow(dead_code)]
    pub parted: Vec<(usize, f32)>,
    /// The teacher-forced logits, a row of the vocabulary's size per position.
    #[allow(dead_code)]
    pub logits: Vec<f32>,
}

/// `steps`: how many ids to run free (the scalar kernels decode slowly: CI's time).
pub fn along(engine: &Engine, run: &serde_json::Value, steps: usize) -> Along {
    let prompt = run["prompt"].as_str().unwrap();
    let prompt_ids: Vec<u32> = serde_json::from_value(run["prompt_ids"].clone()).unwrap();
    let expected: Vec<u32> = serde_json::from_value(run["ids"].clone()).unwrap();
    // A raw prompt (`"chat": false`) is run as it is; a file without a chat template runs every
    // prompt so.
    let chat = run["chat"].as_bool().unwrap_or(true);
    assert_eq!(
        engine.prompt_text(prompt, chat),
        run["text"].as_str().unwrap()
    );
    assert_eq!(
        engine.encode_prompt(prompt, chat).unwrap(),
        prompt_ids,
        "{prompt:?} tokenized unlike llama.cpp"
    );
    // Free-running for the first `steps` tokens.
    let got = greedy(engine, prompt, chat, expected.len().min(steps), &expected);
    let free = got
        .iter()
        .zip(&expected)
        .take_while(|(a, b)| a == b)
        .count();
    // Teacher-forced along llama.cpp's sequence: at each output position, our argmax, and how far
    // llama.cpp's choice is below it.
    let all: Vec<u32> = prompt_ids.iter().chain(&expected).copied().collect();
    let from = prompt_ids.len() - 1;
    let logits = pollster::block_on(engine.logits_along(&all[..all.len() - 1], from)).unwrap();
    let vocab = logits.len() / expected.len();
    let (mut forced, mut worst_gap, mut parted) = (0, 0.0f32, Vec::new());
    for (k, &next) in expected.iter().enumerate() {
        let row = &logits[k * vocab..][..vocab];
        let best = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let gap = best - row[next as usize];
        if gap == 0.0 {
            forced += 1;
        } else {
            parted.push((k, gap));
        }
        worst_gap = worst_gap.max(gap);
    }
    Along {
        free,
        forced,
        positions: expected.len(),
        worst_gap,
        parted,
        logits,
    }
}

/// The vector instruction sets among `available`. A CPU with none fails here: the check would
/// otherwise run no kernel at all and pass (and Gemma's 1,110-token window, checked only here,
/// would go unchecked).
pub fn vector_isas(available: Vec<Isa>) -> Vec<Isa> {
    let vector: Vec<Isa> = available
        .into_iter()
        .filter(|&i| i != Isa::Scalar)
        .collect();
    assert!(
        !vector.is_empty(),
        "this CPU runs no vector instruction set (AVX2 or better), so the vector kernels' check \
         against llama.cpp would run nothing: run it on a CPU with AVX2"
    );
    vector
}

#[test]
#[should_panic(expected = "runs no vector instruction set")]
fn a_cpu_without_vector_kernels_fails_the_vector_check_instead_of_passing_empty() {
    vector_isas(vec![Isa::Scalar]);
}

/// Print every run's line, then fail with the lines of the runs that failed, if any.
pub fn report_and_judge(report: &[String], failures: &[String]) {
    println!(
        "tokenometer against llama.cpp's greedy ids:\n{}",
        report.join("\n")
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
