//! What a run says as it goes: what was loaded ([`ModelInfo`]), what to generate
//! ([`GenerateOptions`]), the timestamped [`Event`]s and why a run stopped ([`StopReason`]). The
//! meter reads these; nothing here runs a model. They are the seam under the meter: the engine
//! says them, and so does a stream from an endpoint (`api/endpoint`), in [`Event::Chunk`]s.

use serde::{Deserialize, Serialize};

use crate::backend::BackendKind;
use crate::decode::logprobs::TokenLogprobs;
use crate::decode::sampling::Sampling;
use crate::model::Quant;
use crate::model::phases::StepPhases;

/// What was loaded, for the conditions that travel with every figure.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelInfo {
    #[serde(rename = "model")]
    pub name: String,
    /// The architecture, in llama.cpp's words (`llama`, `gemma3`).
    pub architecture: String,
    pub parameters: u64,
    pub quant: Quant,
    /// Bytes of all weights as loaded (device weights plus the host embedding table).
    pub weight_bytes: u64,
    /// Weight bytes one decode step reads: every device weight once, plus one embedding row.
    pub bytes_per_token: u64,
    pub backend: BackendKind,
    pub adapter: String,
    /// How `auto` chose the backend, when it did not take the GPU.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backend_note: Option<String>,
    pub context_length: usize,
    pub vocab_size: usize,
    /// Matrices whose width did not allow blocks of 32 (quantized per tensor or kept f32).
    pub quant_exceptions: Vec<String>,
    /// The chat template a prompt is wrapped in (`ChatML`), if the model's file names one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chat_template: Option<String>,
    /// The model's own chat template when it is not one tokenometer follows, described (its
    /// head and length): prompts then go as they are, unless `--chat-template` picks one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unrecognized_chat_template: Option<String>,
}

impl ModelInfo {
    /// Why this model takes no chat messages, as the head of a sentence: its file has no chat
    /// template, or one tokenometer does not follow (named).
    pub fn no_chat_template(&self) -> String {
        match &self.unrecognized_chat_template {
            Some(template) => format!(
                "{}'s chat template {template} is not one tokenometer follows",
                self.name
            ),
            None => format!("{} has no chat template in its file", self.name),
        }
    }
}

/// Why generation stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The model produced an end-of-text token: EOS, or a chat model's end of turn.
    Eos,
    /// The model produced beginning-of-sequence, which llama2.c treats as the end of a story.
    Bos,
    MaxTokens,
    ContextFull,
    /// One of the request's stop strings was generated (the text ends before it).
    Stop,
    Cancelled,
}

impl StopReason {
    /// The reason as it appears in JSON and reports (`max_tokens`).
    pub fn name(self) -> &'static str {
        match self {
            StopReason::Eos => "eos",
            StopReason::Bos => "bos",
            StopReason::MaxTokens => "max_tokens",
            StopReason::ContextFull => "context_full",
            StopReason::Stop => "stop",
            StopReason::Cancelled => "cancelled",
        }
    }
}

/// The engine's events; times are milliseconds since the request was made (queue time included).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// The prompt has been tokenized and run in one forward pass; the first token is sampled.
    Prefill {
        prompt_tokens: usize,
        queued_ms: f64,
        tokenize_ms: f64,
        prefill_ms: f64,
        t_ms: f64,
        /// The prompt's tokens, each id with its bytes, when the request asked for log
        /// probabilities ([`GenerateOptions::logprobs`]: the page's token inspector draws them).
        #[serde(skip_serializing_if = "Vec::is_empty")]
        prompt: Vec<PromptToken>,
    },
    /// One generated token (`text` may be empty while a multi-byte character is incomplete).
    /// `drafted`: a speculative draft the model kept (said only when true).
    Token {
        pos: usize,
        id: u32,
        text: String,
        t_ms: f64,
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        drafted: bool,
        /// Its log probability and the likeliest alternatives, when the request asked for them
        /// ([`GenerateOptions::logprobs`]).
        #[serde(skip_serializing_if = "Option::is_none")]
        logprobs: Option<Box<TokenLogprobs>>,
        /// Where the step that made it spent its time, while the engine's phase clock is on
        /// (the CPU engine: `bench --profile`, the page's phase bar). Shared by every token of the
        /// step's pass.
        #[serde(skip_serializing_if = "Option::is_none")]
        phases: Option<Box<StepPhases>>,
    },
    /// Part of a stream from elsewhere (a server's chunk): `tokens` tokens that arrived together
    /// at `t_ms` (a server may send several in one chunk; counted as the run's conditions say),
    /// `text` their text. `reasoning`: a thinking model's reasoning, which is output (its tokens
    /// count) but not the answer, so the answer's first token is the first chunk without it.
    Chunk {
        tokens: usize,
        text: String,
        t_ms: f64,
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        reasoning: bool,
        /// Its tokens with their log probabilities, where the request asked for them and the
        /// server sent them (the page's token inspector draws them).
        #[serde(skip_serializing_if = "Vec::is_empty")]
        logprobs: Vec<ChunkToken>,
    },
    /// A speculative step's verification: one forward pass of the model over the input token and
    /// `drafted` drafts, of which it kept `accepted` (its own next token follows them);
    /// `draft_passes` is what drafting cost a draft model (0 for lookup); `step_ms` the step's
    /// time, drafting and verifying (what the drafter weighs lengths by). Its tokens follow.
    Verify {
        drafted: usize,
        accepted: usize,
        draft_passes: usize,
        step_ms: f64,
        t_ms: f64,
    },
    /// The end, always with a reason. `trailing_text` holds bytes that never completed a
    /// character (as U+FFFD), normally empty. After [`Event::Chunk`]s, `output_tokens` is the
    /// stream's own final count (a server's `usage`) when it has one, and the meter takes it.
    Done {
        reason: StopReason,
        prompt_tokens: usize,
        output_tokens: usize,
        t_ms: f64,
        trailing_text: String,
    },
}

/// One token of a server's chunk, as its `logprobs` gave it: the token's text (an endpoint sends
/// no ids), its log probability and the likeliest alternatives at its step, likeliest first.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChunkToken {
    pub text: String,
    pub logprob: f32,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub top: Vec<ChunkAlternative>,
}

/// One of the likeliest tokens at a server's step.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChunkAlternative {
    pub text: String,
    pub logprob: f32,
}

/// One token of a prompt: its id and the bytes it stands for (none for a special).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PromptToken {
    pub id: u32,
    pub bytes: Vec<u8>,
}

/// How many tokens a run generates unless told otherwise (the CLI's and the wasm API's default too).
pub const DEFAULT_MAX_TOKENS: usize = 256;

/// What to generate.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct GenerateOptions {
    pub max_tokens: usize,
    pub sampling: Sampling,
    /// Time the request waited before reaching the engine (the page measures it across the worker).
    pub queued_ms: f64,
    /// Wrap the prompt as a user's turn in the model's chat template, when it has one (a model
    /// without one takes the prompt as it is either way).
    pub chat: bool,
    /// Each token's log probability and this many likeliest alternatives
    /// ([`TokenLogprobs`], at most [`crate::decode::MAX_TOP_LOGPROBS`]); `None`: none.
    #[serde(default)]
    pub logprobs: Option<usize>,
}

impl Default for GenerateOptions {
    fn default() -> Self {
        Self {
            max_tokens: DEFAULT_MAX_TOKENS,
            sampling: Sampling::default(),
            queued_ms: 0.0,
            chat: true,
            logprobs: None,
        }
    }
}

/// Whether a listener wants generation to go on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    Continue,
    Stop,
}
