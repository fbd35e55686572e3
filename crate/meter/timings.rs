//! llama.cpp's `timings` object (its server's last chunk carries one), made from a run's counts
//! and spans ([`Report::llama_timings`](crate::meter::Report::llama_timings)) so that a client
//! reading our server and llama.cpp's reads the same fields with the same meaning.
//!
//! llama.cpp's definitions, which are not quite the meter's:
//! - `prompt_ms`: the prompt's processing, up to and including the first token's pick (the
//!   meter's prefill; queueing and tokenizing are not in it). `prompt_per_second` is `prompt_n`
//!   over it.
//! - `predicted_n`: every generated token, the first included; `predicted_ms`: from the first
//!   token to the last (the meter's decode span). `predicted_per_second` is `predicted_n` over
//!   `predicted_ms`, so it counts one token more than the span holds: the meter's decode tok/s
//!   (tokens after the first over the same span) times `predicted_n / (predicted_n - 1)`, 1.6%
//!   higher at 64 tokens.

use serde::Serialize;

/// The `timings` object, as llama.cpp's server writes it (a rate is `null` where its time is 0).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LlamaTimings {
    pub prompt_n: usize,
    pub prompt_ms: f64,
    pub prompt_per_token_ms: Option<f64>,
    pub prompt_per_second: Option<f64>,
    pub predicted_n: usize,
    pub predicted_ms: f64,
    pub predicted_per_token_ms: Option<f64>,
    pub predicted_per_second: Option<f64>,
}

impl LlamaTimings {
    /// The timings of `prompt_n` prompt tokens read in `prompt_ms` and `predicted_n` tokens
    /// generated, `predicted_ms` from the first to the last.
    pub fn new(prompt_n: usize, prompt_ms: f64, predicted_n: usize, predicted_ms: f64) -> Self {
        let per_token = |ms: f64, n: usize| (n > 0).then(|| ms / n as f64);
        let per_second = |ms: f64, n: usize| (ms > 0.0).then(|| n as f64 / ms * 1e3);
        Self {
            prompt_n,
            prompt_ms,
            prompt_per_token_ms: per_token(prompt_ms, prompt_n),
            prompt_per_second: per_second(prompt_ms, prompt_n),
            predicted_n,
            predicted_ms,
            predicted_per_token_ms: per_token(predicted_ms, predicted_n),
            predicted_per_second: per_second(predicted_ms, predicted_n),
        }
    }
}
