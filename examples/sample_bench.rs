//! The sampler alone: milliseconds a pick at temperature 1 from 49,152 made-up logits (SmolLM2's
//! vocabulary), with top-p 1 (all ids) and 0.95, 400 picks each from one seed. The sum of the
//! picked ids shows whether two builds pick the same. Then a token's log probabilities with 5
//! alternatives (what the page's token inspector keeps every step) from 49,152 and 262,144 logits
//! (Gemma 3's vocabulary): microseconds a token.
//!
//! `cargo run --release --example sample_bench`. Compare two builds in turn, in one run.

use tokenometer::decode::logprobs::logprobs;
use tokenometer::decode::sampling::{Sampler, Sampling};

fn main() {
    let vocab = 49_152;
    let logits: Vec<f32> = tokenometer::cpu::check_values(vocab, 3)
        .iter()
        .map(|v| v * 8.0)
        .collect();
    for top_p in [1.0f32, 0.95] {
        let mut sampler = Sampler::new(Sampling {
            temperature: 1.0,
            top_p,
            seed: 5,
        });
        let picks = 400;
        let start = std::time::Instant::now();
        let ids: u64 = (0..picks)
            .map(|_| sampler.sample_host(&logits) as u64)
            .sum();
        println!(
            "T=1 top-p {top_p}: {:.3} ms a pick ({picks} picks, ids summing to {ids})",
            start.elapsed().as_secs_f64() * 1e3 / picks as f64
        );
    }
    for vocab in [49_152, 262_144] {
        let logits: Vec<f32> = tokenometer::cpu::check_values(vocab, 3)
            .iter()
            .map(|v| v * 8.0)
            .collect();
        let rounds = 400;
        let start = std::time::Instant::now();
        let mut ranks = 0;
        for i in 0..rounds {
            ranks += logprobs(&logits, 0.0, (i * 97 % vocab) as u32, 5).rank;
        }
        println!(
            "logprobs, top 5, vocabulary {vocab}: {:.1} us a token ({rounds} tokens, ranks summing to {ranks})",
            start.elapsed().as_secs_f64() * 1e6 / rounds as f64
        );
    }
}
