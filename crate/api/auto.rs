//! `auto` decided by measurement, and the GPU checked against the CPU before it is trusted.
//!
//! The check ([`compare`]): teacher-forced logits at the first [`CHECK_POSITIONS`] positions of
//! [`CHECK_TEXT`] on both backends. The GPU fails where its argmax differs at a position where the
//! CPU's best two are at least [`CLEAR_NATS`] apart, or where the root mean square of the
//! difference, as a share of the CPU logits' own spread, passes the quantization's bound
//! ([`rms_bound`]). Users of other engines report GPUs that compute wrong (wrong logits in one
//! browser's WebGPU, scrambled text, "@@@@"); nobody can test every GPU, so the engine checks the
//! one it is given.
//!
//! The race ([`timed_decode`], [`Verdict`]): each backend, warm, decodes [`RACE_TOKENS`] greedy
//! tokens after [`RACE_PROMPT`], and the meter's decode tok/s decides; a GPU that failed its check
//! is never chosen.

use serde::{Deserialize, Serialize};

use crate::backend::BackendKind;
use crate::decode::{Engine, GenerateOptions, Sampling};
use crate::error::{Error, Result};
use crate::model::Quant;

/// The text whose first positions the check runs on both backends.
pub const CHECK_TEXT: &str = "The quick brown fox jumps over the lazy dog, and then it counts \
                              the tokens it reads each second.";
/// How many positions the check compares.
pub const CHECK_POSITIONS: usize = 12;
/// A position decides the argmax check only where the CPU's best two logits are this far apart.
pub const CLEAR_NATS: f32 = 0.5;
/// The race's prompt and the tokens each backend decodes after it.
pub const RACE_PROMPT: &str = "Once upon a time";
pub const RACE_TOKENS: usize = 24;

/// The most the GPU's logits may differ from the CPU's, as the rms of the difference over the rms
/// of the CPU logits about their mean. The GPU multiplies f32 activations with the weights as
/// stored; the CPU rounds the activations to int8 where the weights are blocks (as llama.cpp
/// does), so quantized models differ more. Measured on Mesa's lavapipe (2026-11-29,
/// docs/measurements.md, "The GPU's self-check"): f32 3e-7 (stories260K); quantized 0.012-0.014
/// (stories260K q8, q4), 0.070 and 0.090 (SmolLM2-135M q8 and as stored, Q4_1), 0.051 and 0.091
/// (Gemma 3 270M q8 and as stored, Q4_K_M); a GPU whose read-backs are noise gives above 1.
pub fn rms_bound(quant: Quant) -> f64 {
    match quant {
        Quant::F32 => 0.01,
        Quant::Q8 | Quant::Stored | Quant::Q4 => 0.2,
    }
}

/// What the check found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Check {
    pub positions: usize,
    /// Positions where the CPU's best two are [`CLEAR_NATS`] apart, and where the GPU's argmax
    /// differed at one of them.
    pub clear: usize,
    pub disagreed: usize,
    /// The rms of the difference over the CPU logits' own, and the bound it is held to.
    pub rms: f64,
    pub bound: f64,
}

impl Check {
    pub fn passed(&self) -> bool {
        self.disagreed == 0 && self.rms <= self.bound
    }

    /// One sentence: what agreed, or how the GPU disagreed.
    pub fn sentence(&self) -> String {
        let what = format!(
            "argmax {} of {} clear positions, logits rms {:.3} of the CPU's spread, bound {}",
            self.clear - self.disagreed,
            self.clear,
            self.rms,
            self.bound
        );
        if self.passed() {
            format!("GPU check passed: {what}")
        } else {
            format!("this GPU disagrees with the CPU engine: {what}")
        }
    }
}

/// What an explicitly chosen GPU's check says: the conditions' note (the check's sentence) and,
/// where the GPU disagreed, a warning naming it, for the command line to print. The GPU still runs,
/// as asked (the page does the same beside the text).
pub fn chosen_gpu_note(check: &Check, adapter: &str) -> (String, Option<String>) {
    let warning = (!check.passed()).then(|| {
        format!(
            "{adapter}: {}; its text may be wrong: --backend cpu runs the model on the CPU",
            check.sentence()
        )
    });
    (check.sentence(), warning)
}

/// Compare the GPU's logits with the CPU's, both `[positions, vocab]`.
pub fn compare(cpu: &[f32], gpu: &[f32], vocab: usize, quant: Quant) -> Check {
    let positions = cpu.len() / vocab.max(1);
    let (mut clear, mut disagreed) = (0, 0);
    let (mut diff, mut spread) = (0.0f64, 0.0f64);
    for (c, g) in cpu.chunks_exact(vocab).zip(gpu.chunks_exact(vocab)) {
        let (best, second) = top_two(c);
        if c[best] - second >= CLEAR_NATS {
            clear += 1;
            if crate::model::logits::argmax(g) as usize != best {
                disagreed += 1;
            }
        }
        let mean = c.iter().map(|&v| v as f64).sum::<f64>() / vocab as f64;
        for (&a, &b) in c.iter().zip(g) {
            let d = a as f64 - b as f64;
            // A NaN from the GPU is as far off as anything.
            diff += if d.is_finite() {
                d * d
            } else {
                f64::MAX / 1e10
            };
            spread += (a as f64 - mean).powi(2);
        }
    }
    Check {
        positions,
        clear,
        disagreed,
        rms: (diff / spread.max(f64::MIN_POSITIVE)).sqrt(),
        bound: rms_bound(quant),
    }
}

/// The index of the largest value and the second largest value.
fn top_two(row: &[f32]) -> (usize, f32) {
    let best = crate::model::logits::argmax(row) as usize;
    let second = row
        .iter()
        .enumerate()
        .filter(|&(i, _)| i != best)
        .fold(f32::NEG_INFINITY, |m, (_, &v)| m.max(v));
    (best, second)
}

/// The check's logits on `engine`: teacher-forced along [`CHECK_TEXT`]'s first positions.
pub async fn check_logits(engine: &Engine) -> Result<Vec<f32>> {
    let ids = engine.encode_prompt(CHECK_TEXT, false)?;
    let n = ids.len().min(CHECK_POSITIONS);
    engine.logits_along(&ids[..n], 0).await
}

/// Check the GPU engine `gpu` against `cpu` (the same model and quantization on the CPU).
pub async fn check(gpu: &Engine, cpu: &Engine) -> Result<Check> {
    let want = check_logits(cpu).await?;
    let got = check_logits(gpu).await?;
    Ok(compare(
        &want,
        &got,
        cpu.model.config.vocab_size,
        cpu.info.quant,
    ))
}

/// A warm engine's decode tok/s over [`RACE_TOKENS`] greedy tokens after [`RACE_PROMPT`], as the
/// meter computes it (tokens after the first over the time from the first to the last).
pub async fn timed_decode(engine: &Engine) -> Result<f64> {
    let options = GenerateOptions {
        max_tokens: RACE_TOKENS,
        // Greedy (the default): the same work on both.
        sampling: Sampling::default(),
        chat: false,
        ..Default::default()
    };
    let mut run = super::drive::MeteredRun::start(engine, RACE_PROMPT, options, None, 238.0, None)?;
    let report = run
        .run_to_end(engine, &mut |_| crate::decode::Flow::Continue)
        .await?;
    report.decode_tps.ok_or_else(|| {
        Error::Device("the race's decode made fewer than two tokens, so it has no speed".into())
    })
}

/// One backend in the race.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entrant {
    /// As the conditions line names it: "CPU 2 threads", "WebGPU (Apple M2)".
    pub label: String,
    pub decode_tps: f64,
}

/// What the race decided, and the line the conditions carry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    pub choice: BackendKind,
    pub cpu: Entrant,
    pub gpu: Entrant,
    pub check: Option<Check>,
    /// "auto: CPU 2 threads 84 tok/s, WebGPU (Apple M2) 51 tok/s -> CPU".
    pub line: String,
}

impl Verdict {
    /// The faster of the two, the GPU only where its check passed.
    pub fn new(cpu: Entrant, gpu: Entrant, check: Option<Check>) -> Verdict {
        let trusted = check.as_ref().is_none_or(Check::passed);
        let choice = if trusted && gpu.decode_tps > cpu.decode_tps {
            BackendKind::Wgpu
        } else {
            BackendKind::Cpu
        };
        let mut line = format!(
            "auto: {} {:.0} tok/s, {} {:.0} tok/s -> {}",
            cpu.label,
            cpu.decode_tps,
            gpu.label,
            gpu.decode_tps,
            if choice == BackendKind::Wgpu {
                "GPU"
            } else {
                "CPU"
            }
        );
        if !trusted {
            line += " (the GPU failed its check)";
        }
        Verdict {
            choice,
            cpu,
            gpu,
            check,
            line,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(n: usize, vocab: usize) -> Vec<f32> {
        (0..n * vocab)
            .map(|i| {
                ((i * 7919 % 1000) as f32 / 100.0) - 5.0
                    + if i % vocab == i / vocab { 3.0 } else { 0.0 }
            })
            .collect()
    }

    #[test]
    fn the_same_logits_pass_and_noise_or_a_moved_argmax_fails() {
        let cpu = rows(4, 50);
        let same = compare(&cpu, &cpu, 50, Quant::F32);
        assert!(
            same.passed() && same.rms == 0.0 && same.clear > 0,
            "{same:?}"
        );
        // Slightly off everywhere: within the bound.
        let close: Vec<f32> = cpu.iter().map(|v| v + 0.001).collect();
        assert!(compare(&cpu, &close, 50, Quant::F32).passed());
        // Noise: the rms is far past any bound.
        let noise: Vec<f32> = (0..cpu.len())
            .map(|i| (i * 104_729 % 997) as f32 / 50.0 - 10.0)
            .collect();
        let check = compare(&cpu, &noise, 50, Quant::Q8);
        assert!(!check.passed() && check.rms > 1.0, "{check:?}");
        assert!(
            check
                .sentence()
                .starts_with("this GPU disagrees with the CPU engine: ")
        );
        // One clear position's argmax moved, the rest the same: fails on the argmax alone.
        let top_two = |row: &[f32]| {
            let mut sorted = row.to_vec();
            sorted.sort_by(|a, b| b.total_cmp(a));
            (sorted[0], sorted[1])
        };
        let clear = (0..4)
            .find(|r| {
                let (first, second) = top_two(&cpu[r * 50..][..50]);
                first - second >= CLEAR_NATS
            })
            .expect("a clear position");
        let mut moved = cpu.clone();
        let row = &cpu[clear * 50..][..50];
        let best = crate::model::logits::argmax(row) as usize;
        moved[clear * 50 + best] = top_two(row).1 - 0.1;
        let check = compare(&cpu, &moved, 50, Quant::Q4);
        assert_eq!(check.disagreed, 1, "{check:?}");
        assert!(check.rms <= check.bound && !check.passed(), "{check:?}");
        // NaNs are as far off as anything.
        let nan = vec![f32::NAN; cpu.len()];
        assert!(!compare(&cpu, &nan, 50, Quant::F32).passed());
    }

    #[test]
    fn the_race_takes_the_faster_and_never_a_gpu_that_failed() {
        let cpu = Entrant {
            label: "CPU 2 threads".into(),
            decode_tps: 84.0,
        };
        let gpu = Entrant {
            label: "WebGPU (Apple M2)".into(),
            decode_tps: 51.0,
        };
        let v = Verdict::new(cpu.clone(), gpu.clone(), None);
        assert_eq!(v.choice, BackendKind::Cpu);
        assert_eq!(
            v.line,
            "auto: CPU 2 threads 84 tok/s, WebGPU (Apple M2) 51 tok/s -> CPU"
        );
        let fast = Entrant {
            decode_tps: 120.0,
            ..gpu
        };
        assert_eq!(
            Verdict::new(cpu.clone(), fast.clone(), None).choice,
            BackendKind::Wgpu
        );
        let failed = Check {
            positions: 12,
            clear: 6,
            disagreed: 2,
            rms: 1.3,
            bound: 0.2,
        };
        let v = Verdict::new(cpu, fast, Some(failed));
        assert_eq!(v.choice, BackendKind::Cpu);
        assert!(
            v.line.ends_with("-> CPU (the GPU failed its check)"),
            "{}",
            v.line
        );
    }
}
