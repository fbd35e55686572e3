//! The throughput meter: what "tokens per second" means, computed once, from the engine's events.
//!
//! Pure: no clock and no I/O. Times come from the events (milliseconds since the request was made)
//! and, for the live figure, from a `now_ms` the caller passes, so tests drive it with a fake clock.
//!
//! The definitions, each in a sentence a student can follow:
//! - **TTFT** (time to first token): from the request to the first generated token: waiting in the
//!   queue, tokenizing the prompt, the prefill pass, and sampling the first token.
//! - **Prefill**: the one batched forward pass over the whole prompt; prefill tok/s is prompt tokens
//!   divided by that time. Its end is when the first token's id is back on the host, because the GPU
//!   finishes the pass and the first pick together.
//! - **Decode tok/s**: tokens after the first, divided by the time from the first token to the last.
//!   It needs at least two tokens; with fewer it is undefined (`None`), never NaN or infinity.
//! - **Live decode tok/s**: the same over a sliding window, the last second or the last 16 tokens,
//!   whichever is shorter, measured up to "now" so that the needle drops when tokens stop coming.
//! - **Inter-token latency**: the gaps between consecutive tokens; p50, p90, p99 (nearest rank) and max.
//! - **Words**: counted in the generated text itself: a word is a run of non-space characters with
//!   at least one letter or digit. Words/s is over the decode span; tokens per word is observed.
//! - **Reading speed**: a reader reads `reading_wpm` words a minute (238 by default, 200-250 is the
//!   usual range); "x reading speed" is words/s over the reader's words/s.
//! - **Total latency**: measured end to end, and predicted as TTFT + output tokens / decode tok/s.
//! - **Effective bandwidth**: weight bytes read per decode step times decode tok/s: decode reads every
//!   weight once per token, so this shows why decode is memory-bound and why quantization helps.
//! - **Warm-up** (shader compilation, autotuning) is timed apart and never mixed into these figures.
//! - **Aggregate vs per-request**: with a batch, aggregate tok/s counts every sequence's tokens over
//!   the batch's span; per-request tok/s is one sequence's own rate. Batching raises the first and
//!   lowers the second.
//!
//! For a batch or a load test of many users ([`BatchMeter`], [`LoadReport`]):
//! - **Aggregate tok/s**: every user's generated tokens, over the span from the first request to
//!   the last token: what the system produced.
//! - **Per-user tok/s**: each user's own decode tok/s (as above); the report gives the median (p50)
//!   and the slowest (min) across users: what each one saw.
//! - **TTFT p50 / p99** across users, each from that user's own request, so time spent waiting for
//!   a place in the batch counts.
//! - **Inter-token p99**: across every user's gaps together; a step that prefills a joining user's
//!   prompt shows up here as a long gap for everyone already running.
//! - **Wall time**: from the first request to the last one's end.
//!
//! Beside a level, a ceiling ([`Products`]), measured apart from the run:
//! - **Products alone**: the matrix products of one decode step of `rows` users (every projection
//!   and the classifier, once each), timed with nothing else running. `rows` over that time is the
//!   aggregate tok/s the step would reach if attention, norms, sampling and the rest were free;
//!   the weight bytes over it are the bandwidth the products reached, and their multiply-adds over
//!   it the arithmetic rate. At 1 user the products are bound by reading memory; with many users
//!   each weight read serves them all and arithmetic binds instead. So the ceiling at N users over
//!   the ceiling at 1 bounds what batching N users can gain on this machine, with this build.

mod ceiling;
mod cold;
mod format;
mod goodput;
mod load;
mod phases;
mod products;
mod room;
mod run;
mod source;
mod speculation;
mod stats;
mod timings;
mod words;

pub use ceiling::{BandwidthCeiling, DispatchFloor};
pub use cold::{ColdPart, ColdStart};
pub use format::{human_bytes, human_count};
pub use goodput::{Goodput, RequestRecord, Slo};
pub use load::{BatchMeter, LoadConditions, LoadReport};
pub use phases::{PHASE_WINDOW_TOKENS, PhaseFigures, PhaseSplit};
pub use products::Products;
pub use room::{ROOM_WINDOW_MS, Room, RoomFigures};
pub use run::{
    Conditions, DEFAULT_READING_WPM, LIVE_WINDOW_MS, LIVE_WINDOW_TOKENS, Meter, RatePoint, Report,
};
pub use source::{EndpointInfo, Source, TokenCounts};
pub use speculation::{SpeculationFigures, StepCost, Verification};
pub use stats::{Percentiles, Spread, aggregate_decode_tps, percentiles, spread, versus};
pub use timings::LlamaTimings;
pub use words::{FEEL_RATES, TYPICAL_TOKENS_PER_WORD, count_words, pace, word_ends_utf16};
