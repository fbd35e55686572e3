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

use serde::Serialize;

use crate::decode::{Event, ModelInfo, ProductPasses, Sampling, StopReason};

mod format;
mod goodput;
mod room;
mod source;
mod speculation;
mod stats;
mod timings;
mod words;

pub use format::{human_bytes, human_count};
pub use goodput::{Goodput, RequestRecord, Slo};
pub use room::{ROOM_WINDOW_MS, Room, RoomFigures};
pub use source::{EndpointInfo, Source, TokenCounts};
pub use speculation::{SpeculationFigures, StepCost, Verification};
pub use stats::{Percentiles, percentiles};
pub use timings::LlamaTimings;
pub use words::{count_words, word_ends_utf16};

/// The usual mean silent-reading speed of adults, in words per minute.
pub const DEFAULT_READING_WPM: f64 = 238.0;
/// The live window: at most this many tokens...
pub const LIVE_WINDOW_TOKENS: usize = 16;
/// ...and at most this long.
pub const LIVE_WINDOW_MS: f64 = 1000.0;

/// Everything a figure depends on; it travels with every report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Conditions {
    /// What produced the tokens: the model as loaded here (name, parameters, quantization, bytes,
    /// backend and adapter, context), or an endpoint (what it says of itself).
    #[serde(flatten)]
    pub source: Source,
    pub batch_size: usize,
    pub prompt_tokens: usize,
    /// The chat template the prompt was wrapped in (its tokens count in `prompt_tokens`), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_template: Option<String>,
    pub output_tokens: usize,
    pub sampling: Sampling,
    pub stop_reason: Option<StopReason>,
    /// The warm-up run's time, reported apart; `None` when this run was not preceded by one.
    pub warm_up_ms: Option<f64>,
    /// How the run speculated, if it did ("speculative: prompt lookup (n-grams up to 3, drafts
    /// up to 8, as measured costs favour)").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub speculation: Option<String>,
}

impl Conditions {
    /// Conditions of a run on the model `info` describes, its prompt in the model's chat template
    /// if it has one (see [`Conditions::raw_prompt`]).
    pub fn new(
        info: &ModelInfo,
        sampling: Sampling,
        batch_size: usize,
        warm_up_ms: Option<f64>,
    ) -> Self {
        let mut conditions = Self::of(Source::Engine(info.clone()), sampling, batch_size);
        conditions.prompt_template = info.chat_template.clone();
        conditions.warm_up_ms = warm_up_ms;
        conditions
    }

    /// Conditions of a run whose tokens came from `source`, before any event.
    pub fn of(source: Source, sampling: Sampling, batch_size: usize) -> Self {
        Self {
            source,
            batch_size,
            prompt_tokens: 0,
            prompt_template: None,
            output_tokens: 0,
            sampling,
            stop_reason: None,
            warm_up_ms: None,
            speculation: None,
        }
    }

    /// The same conditions for a run that speculates as `description` says.
    pub fn speculating(mut self, description: Option<String>) -> Self {
        self.speculation = description;
        self
    }

    /// The same conditions for a prompt given as it is (`chat` off), when `raw`.
    pub fn raw_prompt(mut self, raw: bool) -> Self {
        if raw {
            self.prompt_template = None;
        }
        self
    }

    /// One line for the top of a table or the page.
    pub fn summary(&self) -> String {
        let (context, exceptions, counts) = match &self.source {
            Source::Engine(m) => (
                format!(", context {}", m.context_length),
                m.quant_exceptions.as_slice(),
                None,
            ),
            Source::Endpoint(e) => (String::new(), &[][..], Some(e.token_counts.describe())),
        };
        format!(
            "{}, batch {}, prompt {} tok{}, output {} tok{}, {}{}",
            self.source.describe(),
            self.batch_size,
            self.prompt_tokens,
            self.prompt_template
                .as_ref()
                .map_or_else(String::new, |t| format!(" ({t})")),
            self.output_tokens,
            context,
            if self.sampling.temperature == 0.0 {
                "greedy".to_string()
            } else {
                format!(
                    "T={} top-p={} seed={}",
                    self.sampling.temperature, self.sampling.top_p, self.sampling.seed
                )
            },
            // What quantization and loading did beyond the plain choice (padding, GGUF types),
            // then speculation, then where an endpoint's token counts came from.
            exceptions
                .iter()
                .chain(&self.speculation)
                .map(|e| format!("; {e}"))
                .chain(counts.map(|c| format!("; {c}")))
                .collect::<String>(),
        )
    }
}

/// Every figure of one run, with its conditions. Figures that are undefined so far are `None`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    pub conditions: Conditions,
    /// The conditions as one line, for display next to the figures.
    pub summary: String,
    pub queued_ms: Option<f64>,
    pub tokenize_ms: Option<f64>,
    pub ttft_ms: Option<f64>,
    pub prefill_ms: Option<f64>,
    pub prefill_tps: Option<f64>,
    /// Time from the first token to the last.
    pub decode_ms: Option<f64>,
    pub decode_tps: Option<f64>,
    pub live_decode_tps: Option<f64>,
    /// The gaps between tokens; where a chunk carried several, its gap is shared among them.
    pub inter_token_ms: Option<Percentiles>,
    /// The gaps between a stream's chunks as they arrived (an endpoint's run only; a chunk may
    /// carry several tokens, so this is what vLLM's and AIPerf's ITL measure when they count
    /// chunks).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inter_chunk_ms: Option<Percentiles>,
    /// When the first output of any kind came, where it came before the answer's first token
    /// (a thinking model's reasoning): TTFT is the answer's, this the reasoning's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_output_ms: Option<f64>,
    /// Output tokens that were reasoning (counted in `output_tokens` and decode tok/s).
    #[serde(skip_serializing_if = "is_zero")]
    pub reasoning_tokens: usize,
    /// The server's own figures for this request, where it reports them (llama.cpp's
    /// `timings`), beside ours.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_timings: Option<LlamaTimings>,
    pub words: usize,
    pub words_per_s: Option<f64>,
    pub tokens_per_word: Option<f64>,
    pub reading_wpm: f64,
    pub reading_speed_x: Option<f64>,
    /// How long a reader at `reading_wpm` takes to read the output.
    pub reading_time_s: f64,
    pub total_ms: Option<f64>,
    pub predicted_total_ms: Option<f64>,
    pub effective_gb_per_s: Option<f64>,
    /// Per-request decode tok/s (this sequence's own rate).
    pub per_request_tps: Option<f64>,
    /// All sequences of the batch together; equal to per-request at batch 1.
    pub aggregate_tps: Option<f64>,
    /// What speculative decoding did, when the run speculated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub speculation: Option<SpeculationFigures>,
}

impl Report {
    /// llama.cpp's `timings` for this run: the prefill as `prompt_ms`, every generated token over
    /// the decode span (timings.rs says how that differs from decode tok/s).
    pub fn llama_timings(&self) -> LlamaTimings {
        LlamaTimings::new(
            self.conditions.prompt_tokens,
            self.prefill_ms.unwrap_or(0.0),
            self.conditions.output_tokens,
            self.decode_ms.unwrap_or(0.0),
        )
    }
}

/// Collects one request's events and turns them into a [`Report`].
#[derive(Debug, Clone)]
pub struct Meter {
    conditions: Conditions,
    reading_wpm: f64,
    queued_ms: Option<f64>,
    tokenize_ms: Option<f64>,
    prefill_ms: Option<f64>,
    /// When each generated token was on the host (a chunk's tokens all at its time).
    token_times: Vec<f64>,
    /// Each arrival and how many tokens it brought: one a token for the engine, a stream's chunks.
    chunks: Vec<(f64, usize)>,
    /// Whether the tokens came in [`Event::Chunk`]s (a stream from elsewhere).
    streamed: bool,
    /// The first chunk that was the answer rather than reasoning.
    first_answer_ms: Option<f64>,
    reasoning_tokens: usize,
    /// A stream's own final count (the server's usage), when it differs from the chunks'.
    final_count: Option<usize>,
    /// The server's own figures, where it reported them.
    server_timings: Option<LlamaTimings>,
    text: String,
    done_ms: Option<f64>,
    /// Each verification of a speculative run.
    verifications: Vec<Verification>,
}

impl Meter {
    pub fn new(conditions: Conditions, reading_wpm: f64) -> Self {
        Self {
            conditions,
            reading_wpm,
            queued_ms: None,
            tokenize_ms: None,
            prefill_ms: None,
            token_times: Vec::new(),
            chunks: Vec::new(),
            streamed: false,
            first_answer_ms: None,
            reasoning_tokens: 0,
            final_count: None,
            server_timings: None,
            text: String::new(),
            done_ms: None,
            verifications: Vec::new(),
        }
    }

    pub fn observe(&mut self, event: &Event) {
        match event {
            Event::Prefill {
                prompt_tokens,
                queued_ms,
                tokenize_ms,
                prefill_ms,
                ..
            } => {
                self.conditions.prompt_tokens = *prompt_tokens;
                self.queued_ms = Some(*queued_ms);
                self.tokenize_ms = Some(*tokenize_ms);
                self.prefill_ms = Some(*prefill_ms);
            }
            Event::Token { text, t_ms, .. } => {
                self.token_times.push(*t_ms);
                self.chunks.push((*t_ms, 1));
                self.text.push_str(text);
                self.conditions.output_tokens = self.token_times.len();
            }
            Event::Chunk {
                tokens,
                text,
                t_ms,
                reasoning,
            } => {
                self.streamed = true;
                self.text.push_str(text);
                if *reasoning {
                    self.reasoning_tokens += tokens;
                } else if self.first_answer_ms.is_none() && !text.is_empty() {
                    self.first_answer_ms = Some(*t_ms);
                }
                // A chunk that brought no token (text a server held back) adds no arrival.
                if *tokens > 0 {
                    self.token_times
                        .extend(std::iter::repeat_n(*t_ms, *tokens));
                    self.chunks.push((*t_ms, *tokens));
                    self.conditions.output_tokens = self.token_times.len();
                }
            }
            Event::Verify {
                drafted,
                accepted,
                draft_passes,
                step_ms,
                ..
            } => self.verifications.push(Verification {
                drafted: *drafted,
                accepted: *accepted,
                draft_passes: *draft_passes,
                step_ms: *step_ms,
            }),
            Event::Done {
                reason,
                prompt_tokens,
                output_tokens,
                t_ms,
                trailing_text,
            } => {
                self.conditions.prompt_tokens = *prompt_tokens;
                if self.streamed && *output_tokens > 0 && *output_tokens != self.token_times.len() {
                    self.final_count = Some(*output_tokens);
                    self.conditions.output_tokens = *output_tokens;
                }
                self.text.push_str(trailing_text);
                self.conditions.stop_reason = Some(*reason);
                self.done_ms = Some(*t_ms);
            }
        }
    }

    /// The server's own figures for this request (llama.cpp's `timings`), reported beside ours.
    pub fn set_server_timings(&mut self, timings: Option<LlamaTimings>) {
        self.server_timings = timings;
    }

    /// What produced the tokens, once the stream has said more of it (where its counts came
    /// from).
    pub fn set_source(&mut self, source: Source) {
        self.conditions.source = source;
    }

    /// The generated text so far.
    pub fn text(&self) -> &str {
        &self.text
    }

    pub fn token_times(&self) -> &[f64] {
        &self.token_times
    }

    /// The gaps between consecutive tokens (ms), of which inter-token latency is made. A chunk of
    /// k tokens gives k gaps, each its gap over k; where a stream's final count differs from the
    /// chunks', every chunk after the first is taken to carry its share of the difference.
    pub fn token_gaps(&self) -> Vec<f64> {
        let Some(&(_, first)) = self.chunks.first() else {
            return Vec::new();
        };
        let counted: usize = self.chunks[1..].iter().map(|c| c.1).sum();
        let scale = match self.final_count {
            Some(n) if counted > 0 && n > first => (n - first) as f64 / counted as f64,
            _ => 1.0,
        };
        self.chunks
            .windows(2)
            .flat_map(|w| {
                let gap = (w[1].0 - w[0].0) / (w[1].1 as f64 * scale);
                std::iter::repeat_n(gap, w[1].1)
            })
            .collect()
    }

    /// The gaps between a stream's arrivals (chunks; the tokens' for the engine).
    pub fn chunk_gaps(&self) -> Vec<f64> {
        self.chunks.windows(2).map(|w| w[1].0 - w[0].0).collect()
    }

    /// Output tokens so far: the stream's final count where it gave one, else those counted.
    pub fn output_tokens(&self) -> usize {
        self.final_count.unwrap_or(self.token_times.len())
    }

    /// The answer's first token: the first token, or for a stream the first chunk of the answer
    /// (not reasoning) with text.
    pub fn ttft_ms(&self) -> Option<f64> {
        if self.streamed {
            self.first_answer_ms
        } else {
            self.token_times.first().copied()
        }
    }

    /// When the done event came (ms since the request was made).
    pub fn done_ms(&self) -> Option<f64> {
        self.done_ms
    }

    /// Decode tok/s over the live window ending at `now_ms`.
    pub fn live_decode_tps(&self, now_ms: f64) -> Option<f64> {
        let times = &self.token_times;
        let recent = times
            .iter()
            .rev()
            .take(LIVE_WINDOW_TOKENS)
            .take_while(|&&t| t >= now_ms - LIVE_WINDOW_MS)
            .count();
        if recent < 2 {
            return None;
        }
        let first = times[times.len() - recent];
        rate(recent - 1, now_ms.max(*times.last().unwrap()) - first)
    }

    /// The report at the end of the run (the done event's time, or the last token's).
    pub fn final_report(&self) -> Report {
        let end = self.done_ms.or(self.token_times.last().copied());
        self.report(end.unwrap_or(0.0))
    }

    /// The report as of `now_ms` (pass the done time, or the current time mid-run).
    pub fn report(&self, now_ms: f64) -> Report {
        let times = &self.token_times;
        let n = self.output_tokens();
        let first_output = times.first().copied();
        let ttft = self.ttft_ms();
        let decode_ms = (n >= 2 && !times.is_empty()).then(|| times[times.len() - 1] - times[0]);
        let decode_tps = decode_ms.and_then(|span| rate(n - 1, span));
        let words = count_words(&self.text);
        let words_per_s = decode_ms.and_then(|span| rate(words, span));
        let reader_words_per_s = self.reading_wpm / 60.0;
        let total_ms = self.done_ms.or(times.last().copied());
        let speculation = self.speculation_figures();
        // Every pass reads the weights once, whatever it verifies.
        let passes_per_token = speculation
            .as_ref()
            .map_or(Some(1.0), |s| s.passes_per_token);
        Report {
            conditions: self.conditions.clone(),
            summary: self.conditions.summary(),
            queued_ms: self.queued_ms,
            tokenize_ms: self.tokenize_ms,
            ttft_ms: ttft,
            prefill_ms: self.prefill_ms,
            prefill_tps: self
                .prefill_ms
                .and_then(|ms| rate(self.conditions.prompt_tokens, ms)),
            decode_ms,
            decode_tps,
            live_decode_tps: self.live_decode_tps(now_ms),
            inter_token_ms: percentiles(&self.token_gaps()),
            inter_chunk_ms: self
                .streamed
                .then(|| percentiles(&self.chunk_gaps()))
                .flatten(),
            first_output_ms: first_output.filter(|&t| Some(t) != ttft && self.streamed),
            reasoning_tokens: self.reasoning_tokens,
            server_timings: self.server_timings.clone(),
            words,
            words_per_s,
            tokens_per_word: (words > 0).then(|| n as f64 / words as f64),
            reading_wpm: self.reading_wpm,
            reading_speed_x: words_per_s.map(|w| w / reader_words_per_s),
            reading_time_s: words as f64 / reader_words_per_s,
            total_ms,
            predicted_total_ms: first_output
                .zip(decode_tps)
                .map(|(first, tps)| first + n as f64 / tps * 1e3),
            effective_gb_per_s: decode_tps
                .zip(passes_per_token)
                .zip(self.conditions.source.bytes_per_token())
                .map(|((tps, passes), bytes)| bytes as f64 * tps * passes / 1e9),
            per_request_tps: decode_tps,
            // One request's tokens after its first over its own decode span: its decode rate.
            aggregate_tps: decode_tps,
            speculation,
        }
    }

    /// Speculation's figures, when the run speculated.
    fn speculation_figures(&self) -> Option<SpeculationFigures> {
        self.conditions.speculation.as_ref()?;
        let decoded = self.token_times.len().saturating_sub(1);
        Some(SpeculationFigures::new(&self.verifications, decoded))
    }
}

/// The conditions of a batch or load test: the model's, and how the users came.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LoadConditions {
    /// What produced the tokens (as in [`Conditions`]).
    #[serde(flatten)]
    pub source: Source,
    pub users: usize,
    /// The most sequences one step decodes; more users wait in a queue. Unknown for an endpoint
    /// (its server decides).
    pub max_batch: Option<usize>,
    /// How requests arrived: `burst` (all at once), `poisson:R` (R a second on average) or
    /// `gamma:R:S`.
    pub arrival: String,
    pub max_tokens: usize,
    pub sampling: Sampling,
    pub warm_up_ms: Option<f64>,
    /// The service-level objectives goodput is counted against, when given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slo: Option<Slo>,
}

impl LoadConditions {
    /// The rows of a full step: every user, up to the batch limit.
    pub fn batch_rows(&self) -> usize {
        self.max_batch.unwrap_or(self.users).min(self.users)
    }

    /// One line for the top of a table or beside the figures.
    pub fn summary(&self) -> String {
        format!(
            "{}, {} users, {}{} arrival, up to {} tokens each, {}{}",
            self.source.describe(),
            self.users,
            self.max_batch
                .map_or_else(String::new, |n| format!("batch limit {n}, ")),
            self.arrival,
            self.max_tokens,
            if self.sampling.temperature == 0.0 {
                "greedy".to_string()
            } else {
                format!(
                    "T={} top-p={}",
                    self.sampling.temperature, self.sampling.top_p
                )
            },
            match &self.source {
                Source::Endpoint(e) => format!("; {}", e.token_counts.describe()),
                Source::Engine(_) => String::new(),
            }
        )
    }
}

/// The figures of a batch or load test (see the module's definitions), with their conditions.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LoadReport {
    pub conditions: LoadConditions,
    pub summary: String,
    pub users: usize,
    /// Requests made: one a user, or more where users went on sending for a duration.
    pub requests: usize,
    /// Users whose request ended other than by cancel or failure.
    pub requests_completed: usize,
    /// Requests that failed (an endpoint's HTTP error, a broken stream), each message once with
    /// how many had it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub failures: Vec<(String, usize)>,
    pub prompt_tokens: usize,
    pub output_tokens: usize,
    pub aggregate_tps: Option<f64>,
    pub per_user_tps_p50: Option<f64>,
    pub per_user_tps_min: Option<f64>,
    /// Each user's words/s, median: compare with `reading_wpm / 60`.
    pub per_user_words_per_s_p50: Option<f64>,
    pub reading_wpm: f64,
    /// Reading speed as a decode rate: the reader's words/s times the tokens per word the users'
    /// text showed. A user decoding slower than this falls behind a reader.
    pub reading_tps: Option<f64>,
    /// Whether the median user's text came slower than a reader reads.
    pub per_user_below_reading: Option<bool>,
    pub ttft_ms_p50: Option<f64>,
    pub ttft_ms_p99: Option<f64>,
    pub itl_ms_p50: Option<f64>,
    pub itl_ms_p99: Option<f64>,
    pub wall_ms: Option<f64>,
    /// The server's own decode rate (llama.cpp's `predicted_per_second`, the first token
    /// counted), median across requests, where it reported one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_tps_p50: Option<f64>,
    /// Goodput at the conditions' objectives, when they name any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub goodput: Option<Goodput>,
    /// The ceiling of this level's step (its [`LoadConditions::batch_rows`]), measured apart by the caller once the
    /// level has run (`Engine::products_alone`); `None` until then, and on a GPU.
    pub products_alone: Option<Products>,
}

/// Collects the events of many sequences (each with its own [`Meter`]) and turns them into a
/// [`LoadReport`].
#[derive(Debug, Clone)]
pub struct BatchMeter {
    conditions: LoadConditions,
    reading_wpm: f64,
    /// Per sequence id: when it was made on the test's clock, and its own meter.
    users: Vec<Option<(f64, Meter)>>,
    /// Per sequence id, why it failed, if it did.
    failed: Vec<Option<String>>,
}

impl BatchMeter {
    pub fn new(conditions: LoadConditions, reading_wpm: f64) -> Self {
        Self {
            conditions,
            reading_wpm,
            users: Vec::new(),
            failed: Vec::new(),
        }
    }

    /// Sequence `seq`'s request was made at `made_ms` on the test's clock.
    pub fn arrive(&mut self, seq: usize, made_ms: f64) {
        if self.users.len() <= seq {
            self.users.resize(seq + 1, None);
        }
        let c = &self.conditions;
        let mut conditions = Conditions::of(c.source.clone(), c.sampling, c.batch_rows());
        conditions.warm_up_ms = c.warm_up_ms;
        if let Source::Engine(info) = &c.source {
            conditions.prompt_template = info.chat_template.clone();
        }
        self.users[seq] = Some((made_ms, Meter::new(conditions, self.reading_wpm)));
    }

    /// Sequence `seq`'s request failed, as `why` says (it counts as a request, never as good).
    pub fn fail(&mut self, seq: usize, why: String) {
        if self.failed.len() <= seq {
            self.failed.resize(seq + 1, None);
        }
        self.failed[seq] = Some(why);
    }

    /// What produced the tokens, once the level has ended (where an endpoint's counts came from).
    pub fn set_source(&mut self, source: Source) {
        for (_, meter) in self.users.iter_mut().flatten() {
            meter.set_source(source.clone());
        }
        self.conditions.source = source;
    }

    /// Sequence `seq`'s own meter, to set what only its source knows (the server's timings).
    pub fn user_mut(&mut self, seq: usize) -> Option<&mut Meter> {
        self.users.get_mut(seq)?.as_mut().map(|(_, m)| m)
    }

    /// An event of sequence `seq` (which must have arrived).
    pub fn observe(&mut self, seq: usize, event: &Event) {
        if let Some(Some((_, meter))) = self.users.get_mut(seq) {
            meter.observe(event);
        }
    }

    pub fn conditions(&self) -> &LoadConditions {
        &self.conditions
    }

    /// Sequence `seq`'s own meter.
    pub fn user(&self, seq: usize) -> Option<&Meter> {
        self.users.get(seq)?.as_ref().map(|(_, m)| m)
    }

    pub fn report(&self) -> LoadReport {
        let users: Vec<(f64, Report, &Meter)> = self
            .users
            .iter()
            .flatten()
            .map(|(made, m)| (*made, m.final_report(), m))
            .collect();
        let first_request = users.iter().map(|u| u.0).fold(f64::INFINITY, f64::min);
        let last = |pick: &dyn Fn(&Meter) -> Option<f64>| {
            users
                .iter()
                .filter_map(|(made, _, m)| pick(m).map(|t| made + t))
                .fold(None, |a: Option<f64>, t| Some(a.map_or(t, |a| a.max(t))))
        };
        let failed = |seq: usize| self.failed.get(seq).is_some_and(Option::is_some);
        let last_token = last(&|m| m.token_times().last().copied());
        let end = last(&|m| m.done_ms().or(m.token_times().last().copied()));
        let output_tokens: usize = users.iter().map(|u| u.1.conditions.output_tokens).sum();
        let per_user: Vec<f64> = users.iter().filter_map(|u| u.1.decode_tps).collect();
        let words: Vec<f64> = users.iter().filter_map(|u| u.1.words_per_s).collect();
        let ttft: Vec<f64> = users.iter().filter_map(|u| u.1.ttft_ms).collect();
        let itl: Vec<f64> = users.iter().flat_map(|u| u.2.token_gaps()).collect();
        let words_p50 = percentiles(&words).map(|p| p.p50);
        let reader = self.reading_wpm / 60.0;
        // Tokens per word over every user's text together.
        let all_words: usize = users.iter().map(|u| u.1.words).sum();
        let reading_tps = (all_words > 0).then(|| reader * output_tokens as f64 / all_words as f64);
        let ttft_p = percentiles(&ttft);
        let itl_p = percentiles(&itl);
        let per_user_p = percentiles(&per_user);
        let wall_ms = end.map(|t| t - first_request);
        let records: Vec<RequestRecord> = self
            .users
            .iter()
            .enumerate()
            .filter_map(|(seq, u)| u.as_ref().map(|(_, m)| (seq, m.final_report())))
            .map(|(seq, r)| RequestRecord {
                completed: !failed(seq)
                    && r.conditions
                        .stop_reason
                        .is_some_and(|r| r != StopReason::Cancelled),
                ttft_ms: r.ttft_ms,
                e2e_ms: r.total_ms,
                output_tokens: r.conditions.output_tokens,
            })
            .collect();
        let mut failures: Vec<(String, usize)> = Vec::new();
        for why in self.failed.iter().flatten() {
            match failures.iter_mut().find(|(w, _)| w == why) {
                Some((_, n)) => *n += 1,
                None => failures.push((why.clone(), 1)),
            }
        }
        LoadReport {
            summary: self.conditions.summary(),
            conditions: self.conditions.clone(),
            users: self.conditions.users,
            requests: records.len(),
            requests_completed: records.iter().filter(|r| r.completed).count(),
            failures,
            prompt_tokens: users.iter().map(|u| u.1.conditions.prompt_tokens).sum(),
            output_tokens,
            aggregate_tps: last_token.and_then(|t| rate(output_tokens, t - first_request)),
            per_user_tps_p50: per_user_p.map(|p| p.p50),
            per_user_tps_min: per_user.iter().copied().reduce(f64::min),
            per_user_words_per_s_p50: words_p50,
            reading_wpm: self.reading_wpm,
            reading_tps,
            per_user_below_reading: words_p50.map(|w| w < reader),
            ttft_ms_p50: ttft_p.map(|p| p.p50),
            ttft_ms_p99: ttft_p.map(|p| p.p99),
            itl_ms_p50: itl_p.map(|p| p.p50),
            itl_ms_p99: itl_p.map(|p| p.p99),
            wall_ms,
            server_tps_p50: percentiles(
                &users
                    .iter()
                    .filter_map(|u| u.1.server_timings.as_ref()?.predicted_per_second)
                    .collect::<Vec<f64>>(),
            )
            .map(|p| p.p50),
            goodput: self
                .conditions
                .slo
                .map(|slo| Goodput::new(slo, &records, wall_ms)),
            products_alone: None,
        }
    }
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// `count` events over `ms` milliseconds, per second; `None` when the span is empty.
fn rate(count: usize, ms: f64) -> Option<f64> {
    (ms > 0.0 && ms.is_finite()).then(|| count as f64 / ms * 1e3)
}

/// Aggregate decode tok/s of a batch: every sequence's tokens after its first, over the span from
/// the earliest first token to the latest last token.
pub fn aggregate_decode_tps(streams: &[&[f64]]) -> Option<f64> {
    let live: Vec<&&[f64]> = streams.iter().filter(|s| !s.is_empty()).collect();
    let tokens: usize = live.iter().map(|s| s.len() - 1).sum();
    let start = live.iter().map(|s| s[0]).fold(f64::INFINITY, f64::min);
    let end = live
        .iter()
        .map(|s| s[s.len() - 1])
        .fold(f64::NEG_INFINITY, f64::max);
    if tokens == 0 {
        return None;
    }
    rate(tokens, end - start)
}

/// The ceiling of a decode step's products (see the module's definitions): `passes` timings of
/// the products of `rows` rows alone, their median, and the rates that median gives.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Products {
    pub rows: usize,
    pub passes: usize,
    /// The median pass, in ms.
    pub ms_p50: f64,
    /// Weight bytes one pass reads (each matrix once, whatever `rows`).
    pub weight_bytes: u64,
    /// Multiply-adds of one pass: `rows` times every matrix's rows times its columns.
    pub macs: u64,
    /// `rows` tokens per median pass: the step's tok/s if nothing but the products cost time.
    pub tps: f64,
    /// Weight bytes over the median pass, in GB/s.
    pub gb_per_s: f64,
    /// Multiply-adds over the median pass, in billions a second.
    pub gmac_per_s: f64,
}

impl Products {
    /// The ceiling from an engine's timed passes ([`crate::decode::Engine::products_alone`]).
    pub fn from_passes(p: &ProductPasses) -> Option<Products> {
        Products::new(p.rows, &p.times_ms, p.bytes, p.macs)
    }

    /// The ceiling from timed passes (`times_ms`, each the whole products of `rows` rows);
    /// `None` without a positive, finite median.
    pub fn new(rows: usize, times_ms: &[f64], weight_bytes: u64, macs: u64) -> Option<Self> {
        let ms = percentiles(times_ms)?.p50;
        (ms > 0.0 && ms.is_finite()).then(|| Products {
            rows,
            passes: times_ms.len(),
            ms_p50: ms,
            weight_bytes,
            macs,
            tps: rows as f64 / ms * 1e3,
            gb_per_s: weight_bytes as f64 / ms / 1e6,
            gmac_per_s: macs as f64 / ms / 1e6,
        })
    }
}

/// A handful of repeated measurements of one figure: how many, the median (nearest rank, as
/// [`percentiles`] counts: the lower middle of an even count), the least and the most.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Spread {
    pub n: usize,
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

/// The spread of `values`, ignoring any that are not finite (a figure a run did not have);
/// `None` when none is.
pub fn spread(values: &[f64]) -> Option<Spread> {
    let finite: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    let p = percentiles(&finite)?;
    Some(Spread {
        n: finite.len(),
        median: p.p50,
        min: finite.iter().copied().fold(f64::INFINITY, f64::min),
        max: p.max,
    })
}
