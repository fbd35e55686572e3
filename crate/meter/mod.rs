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
mod room;
mod speculation;
mod stats;
mod timings;
mod words;

pub use format::{human_bytes, human_count};
pub use room::{ROOM_WINDOW_MS, Room, RoomFigures};
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
    /// The model as loaded: name, parameters, quantization, bytes, backend and adapter, context.
    #[serde(flatten)]
    pub model: ModelInfo,
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
        Self {
            model: info.clone(),
            batch_size,
            prompt_tokens: 0,
            prompt_template: info.chat_template.clone(),
            output_tokens: 0,
            sampling,
            stop_reason: None,
            warm_up_ms,
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
        format!(
            "{} ({} {} params, {}, {}) on {} [{}]{}, batch {}, prompt {} tok{}, output {} tok, context {}, {}{}",
            self.model.name,
            self.model.architecture,
            human_count(self.model.parameters as f64),
            self.model.quant,
            human_bytes(self.model.weight_bytes),
            self.model.backend,
            self.model.adapter,
            self.model
                .backend_note
                .as_ref()
                .map_or_else(String::new, |note| format!(" ({note})")),
            self.batch_size,
            self.prompt_tokens,
            self.prompt_template
                .as_ref()
                .map_or_else(String::new, |t| format!(" ({t})")),
            self.output_tokens,
            self.model.context_length,
            if self.sampling.temperature == 0.0 {
                "greedy".to_string()
            } else {
                format!(
                    "T={} top-p={} seed={}",
                    self.sampling.temperature, self.sampling.top_p, self.sampling.seed
                )
            },
            // What quantization and loading did beyond the plain choice (padding, GGUF types),
            // then speculation.
            self.model
                .quant_exceptions
                .iter()
                .chain(&self.speculation)
                .map(|e| format!("; {e}"))
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
    pub inter_token_ms: Option<Percentiles>,
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
    /// When each generated token was on the host.
    token_times: Vec<f64>,
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
                self.text.push_str(text);
                self.conditions.output_tokens = self.token_times.len();
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
                t_ms,
                trailing_text,
                ..
            } => {
                self.conditions.prompt_tokens = *prompt_tokens;
                self.text.push_str(trailing_text);
                self.conditions.stop_reason = Some(*reason);
                self.done_ms = Some(*t_ms);
            }
        }
    }

    /// The generated text so far.
    pub fn text(&self) -> &str {
        &self.text
    }

    pub fn token_times(&self) -> &[f64] {
        &self.token_times
    }

    /// The gaps between consecutive tokens (ms), of which inter-token latency is made.
    pub fn token_gaps(&self) -> Vec<f64> {
        gaps(&self.token_times)
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
        let n = times.len();
        let ttft = times.first().copied();
        let decode_ms = (n >= 2).then(|| times[n - 1] - times[0]);
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
            inter_token_ms: percentiles(&gaps(times)),
            words,
            words_per_s,
            tokens_per_word: (words > 0).then(|| n as f64 / words as f64),
            reading_wpm: self.reading_wpm,
            reading_speed_x: words_per_s.map(|w| w / reader_words_per_s),
            reading_time_s: words as f64 / reader_words_per_s,
            total_ms,
            predicted_total_ms: ttft
                .zip(decode_tps)
                .map(|(ttft, tps)| ttft + n as f64 / tps * 1e3),
            effective_gb_per_s: decode_tps.zip(passes_per_token).map(|(tps, passes)| {
                self.conditions.model.bytes_per_token as f64 * tps * passes / 1e9
            }),
            per_request_tps: decode_tps,
            aggregate_tps: aggregate_decode_tps(&[times]),
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
    #[serde(flatten)]
    pub model: ModelInfo,
    pub users: usize,
    /// The most sequences one step decodes; more users wait in a queue.
    pub max_batch: usize,
    /// How requests arrived: `burst` (all at once) or `poisson:R` (R a second on average).
    pub arrival: String,
    pub max_tokens: usize,
    pub sampling: Sampling,
    pub warm_up_ms: Option<f64>,
}

impl LoadConditions {
    /// The rows of a full step: every user, up to the batch limit.
    pub fn batch_rows(&self) -> usize {
        self.max_batch.min(self.users)
    }

    /// One line for the top of a table or beside the figures.
    pub fn summary(&self) -> String {
        format!(
            "{} ({} {} params, {}, {}) on {} [{}], {} users, batch limit {}, {} arrival, up to {} tokens each, {}",
            self.model.name,
            self.model.architecture,
            human_count(self.model.parameters as f64),
            self.model.quant,
            human_bytes(self.model.weight_bytes),
            self.model.backend,
            self.model.adapter,
            self.users,
            self.max_batch,
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
        )
    }
}

/// The figures of a batch or load test (see the module's definitions), with their conditions.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LoadReport {
    pub conditions: LoadConditions,
    pub summary: String,
    pub users: usize,
    /// Users whose request ended other than by cancel.
    pub requests_completed: usize,
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
}

impl BatchMeter {
    pub fn new(conditions: LoadConditions, reading_wpm: f64) -> Self {
        Self {
            conditions,
            reading_wpm,
            users: Vec::new(),
        }
    }

    /// Sequence `seq`'s request was made at `made_ms` on the test's clock.
    pub fn arrive(&mut self, seq: usize, made_ms: f64) {
        if self.users.len() <= seq {
            self.users.resize(seq + 1, None);
        }
        let c = &self.conditions;
        let conditions = Conditions::new(&c.model, c.sampling, c.max_batch, c.warm_up_ms);
        self.users[seq] = Some((made_ms, Meter::new(conditions, self.reading_wpm)));
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
        let last_token = last(&|m| m.token_times().last().copied());
        let end = last(&|m| m.done_ms().or(m.token_times().last().copied()));
        let output_tokens: usize = users.iter().map(|u| u.1.conditions.output_tokens).sum();
        let per_user: Vec<f64> = users.iter().filter_map(|u| u.1.decode_tps).collect();
        let words: Vec<f64> = users.iter().filter_map(|u| u.1.words_per_s).collect();
        let ttft: Vec<f64> = users.iter().filter_map(|u| u.1.ttft_ms).collect();
        let itl: Vec<f64> = users.iter().flat_map(|u| gaps(u.2.token_times())).collect();
        let words_p50 = percentiles(&words).map(|p| p.p50);
        let reader = self.reading_wpm / 60.0;
        // Tokens per word over every user's text together.
        let all_words: usize = users.iter().map(|u| u.1.words).sum();
        let reading_tps = (all_words > 0).then(|| reader * output_tokens as f64 / all_words as f64);
        let ttft_p = percentiles(&ttft);
        let itl_p = percentiles(&itl);
        let per_user_p = percentiles(&per_user);
        LoadReport {
            summary: self.conditions.summary(),
            conditions: self.conditions.clone(),
            users: users.len(),
            requests_completed: users
                .iter()
                .filter(|u| {
                    u.1.conditions
                        .stop_reason
                        .is_some_and(|r| r != StopReason::Cancelled)
                })
                .count(),
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
            wall_ms: end.map(|t| t - first_request),
            products_alone: None,
        }
    }
}

/// `count` events over `ms` milliseconds, per second; `None` when the span is empty.
fn rate(count: usize, ms: f64) -> Option<f64> {
    (ms > 0.0 && ms.is_finite()).then(|| count as f64 / ms * 1e3)
}

fn gaps(times: &[f64]) -> Vec<f64> {
    times.windows(2).map(|w| w[1] - w[0]).collect()
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
