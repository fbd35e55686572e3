//! Generation: a model and its tokenizer ([`engine`]), requests stepped one token at a time in
//! one batch ([`scheduler`], [`sequence`]), how each next token is picked ([`sampling`]) and its probability read ([`logprobs`]), where a
//! stop string ends a sequence ([`stop`]), what a run says as it goes ([`events`]), how a load
//! test's users arrive ([`arrival`]), and what a quantization costs in quality ([`quality`]).
//! Below: `backend/` and `loading/`; above: `meter/`.

pub mod arrival;
mod clock;
pub mod costs;
pub mod engine;
pub mod events;
mod generate;
mod lanes;
pub mod logprobs;
pub mod quality;
pub mod sampling;
pub mod scheduler;
pub mod sequence;
pub mod speculate;
pub mod stop;

pub use arrival::{Arrival, DEFAULT_PROMPTS};
pub use engine::{Engine, ProductPasses, PromptEncoder};
pub use events::{
    ChunkAlternative, ChunkToken, DEFAULT_MAX_TOKENS, Event, Flow, GenerateOptions, ModelInfo,
    PromptToken, StopReason,
};
pub use logprobs::{Alternative, MAX_TOP_LOGPROBS, TokenLogprobs};
pub use sampling::Sampling;
pub use scheduler::{
    Clock, PREFILL_CHUNK, Request, STEP_TOKENS, Scheduler, Tokenized, kv_reservation,
};
pub use sequence::SeqEvent;
pub use speculate::{DraftSource, Speculation};
