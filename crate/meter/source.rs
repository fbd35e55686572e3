//! Where a run's tokens came from, for its conditions: this engine (the model as loaded, with its
//! quantization and bytes) or an endpoint elsewhere (what it tells about itself, and no more), and
//! where the token counts came from.

use serde::Serialize;

use crate::decode::ModelInfo;
use crate::meter::format::{human_bytes, human_count};

/// What produced the tokens the meter read. Serialized flat into the conditions: a local run's
/// fields are the model's (`model`, `quant`, `backend`...), an endpoint's are [`EndpointInfo`]'s.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Source {
    /// This engine, on this machine.
    Engine(ModelInfo),
    /// An OpenAI-compatible server, streamed over HTTP.
    Endpoint(EndpointInfo),
}

impl Source {
    /// The model's name as the conditions give it.
    pub fn model_name(&self) -> &str {
        match self {
            Source::Engine(info) => &info.name,
            Source::Endpoint(info) => &info.model,
        }
    }

    /// Weight bytes a decode step reads, where they are known (this engine's).
    pub fn bytes_per_token(&self) -> Option<u64> {
        match self {
            Source::Engine(info) => Some(info.bytes_per_token),
            Source::Endpoint(_) => None,
        }
    }

    /// The model as one phrase: `SmolLM2 (llama 135M params, Q8_0, 138 MB) on cpu [AVX-512 VNNI]`
    /// or `SmolLM2 at http://127.0.0.1:8000/v1 (llama.cpp)`.
    pub fn describe(&self) -> String {
        match self {
            Source::Engine(m) => format!(
                "{} ({} {} params, {}, {}) on {} [{}]{}",
                m.name,
                m.architecture,
                human_count(m.parameters as f64),
                m.quant,
                human_bytes(m.weight_bytes),
                m.backend,
                m.adapter,
                m.backend_note
                    .as_ref()
                    .map_or_else(String::new, |note| format!(" ({note})")),
            ),
            Source::Endpoint(e) => format!(
                "{} at {}{}",
                e.model,
                e.endpoint,
                e.server
                    .as_ref()
                    .map_or_else(String::new, |s| format!(" ({s})"))
            ),
        }
    }
}

/// What an endpoint tells about itself: no quantization, bytes or backend, unless it says them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EndpointInfo {
    /// The API's base URL (`http://127.0.0.1:8080/v1`), without credentials or query.
    pub endpoint: String,
    /// The model name sent in requests (as `/v1/models` lists it, or as the user named it).
    pub model: String,
    /// The server's software, from its `Server` header or `/props` (`llama.cpp`), when it says.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    /// Where the token counts came from.
    pub token_counts: TokenCounts,
}

/// Where a remote run's token counts came from, most trusted first (so the greater of two is the
/// less trusted: a level's counts are the `max` of its requests').
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TokenCounts {
    /// Usage on every chunk (vLLM's `continuous_usage_stats`) or llama.cpp's per-token timings:
    /// each chunk's own count, from the server.
    ChunkUsage,
    /// The final `usage` only: the total is the server's; within the stream its tokens are taken
    /// as spread evenly over the chunks after the first.
    FinalUsage,
    /// The model's tokenizer, given by the user, over each chunk's text (a tokenization of text
    /// that was cut into chunks may differ from the server's by a token here and there).
    Tokenizer,
    /// Nothing better: one token a chunk, which undercounts whenever a chunk carries several.
    Chunks,
}

impl TokenCounts {
    /// The phrase the conditions line uses.
    pub fn describe(self) -> &'static str {
        match self {
            TokenCounts::ChunkUsage => "tokens counted by the server, chunk by chunk",
            TokenCounts::FinalUsage => "tokens counted by the server's final usage",
            TokenCounts::Tokenizer => "tokens counted by the given tokenizer over the text",
            TokenCounts::Chunks => {
                "tokens counted as chunks (the server gave no counts: one token a chunk)"
            }
        }
    }
}
