//! One request's meter: its conditions, the events it reads, and the report they make (the
//! module's definitions, in meter/mod.rs).

use serde::Serialize;

use crate::decode::{Event, ModelInfo, Sampling, StopReason};
use crate::meter::ceiling::{BandwidthCeiling, DispatchFloor};
use crate::meter::cold::{ColdPart, ColdStart};
use crate::meter::phases::PhaseFigures;
use crate::meter::source::Source;
use crate::meter::speculation::{SpeculationFigures, Verification};
use crate::meter::stats::{Percentiles, percentiles, rate};
use crate::meter::timings::LlamaTimings;
use crate::meter::words::count_words;
use crate::model::phases::StepPhases;

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
    /// The batch the run's steps actually ran in, where a server batched it with others
    /// ([`Meter::ran_in_batch`]): the mean over its decode steps (`batch_size` is then the
    /// largest).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub batch_mean: Option<f64>,
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
            batch_mean: None,
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
        let batch = match self.batch_mean {
            Some(mean) => format!("batch up to {} (mean {mean:.1} a step)", self.batch_size),
            None => format!("batch {}", self.batch_size),
        };
        format!(
            "{}, {batch}, prompt {} tok{}, output {} tok{}, {}{}",
            self.source.describe(),
            self.prompt_tokens,
            match (&self.prompt_template, &self.source) {
                (Some(t), _) => format!(" ({t})"),
                (None, Source::Engine(m)) if m.unrecognized_chat_template.is_some() => {
                    " (as given: the file's chat template is not one tokenometer follows)".into()
                }
                _ => String::new(),
            },
            self.output_tokens,
            context,
            self.sampling.describe(true),
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
    /// The page's own: from opening the page to this run's first token (the engine's compile,
    /// the download, loading, warm-up and this run's TTFT), for the page's first run only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub page_open_to_first_token_ms: Option<f64>,
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
    /// Decode against the ceiling this machine's memory bandwidth allows, where the caller
    /// measured it (`bench` on the CPU).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bandwidth_ceiling: Option<BandwidthCeiling>,
    /// On a GPU: decode against what its dispatches cost, where the caller measured it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dispatch_floor: Option<DispatchFloor>,
    /// Where a decode step's time went, by the engine's own timers, where it timed them
    /// (`bench --profile`, the page's phase bar; the CPU engine).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phases: Option<PhaseFigures>,
    /// The page's first run: from opening the page to its first token, part by part (the sum of
    /// the parts and what is between them is `page_open_to_first_token_ms`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cold_start: Option<ColdStart>,
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

/// A point of the chart of rates by output token ([`Meter::rate_points`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RatePoint {
    pub token: usize,
    pub rate: Option<f64>,
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
    /// The text's bytes once the first output arrival was in: decode's words are those after it.
    first_text_bytes: Option<usize>,
    done_ms: Option<f64>,
    /// Each verification of a speculative run.
    verifications: Vec<Verification>,
    /// The page's: from opening the page to this run's request ([`Meter::page_opened`]).
    page_open_ms: Option<f64>,
    /// The memory's read bandwidth (GB/s) measured apart from the run, and the keys and values a
    /// position adds: the report then holds the ceiling ([`Meter::read_bandwidth`]).
    read: Option<(f64, u64)>,
    /// The batches this run's steps ran in: their sum, count and largest.
    batches: (usize, usize, usize),
    /// On a GPU: dispatches a token and one dispatch's cost in us ([`Meter::dispatch_cost`]).
    dispatch: Option<(f64, f64)>,
    /// Each generated token's step by phase, where the engine timed it.
    phases: Vec<Option<StepPhases>>,
    /// The page's parts of its cold start, before this run's request ([`Meter::cold_start`]).
    cold_parts: Vec<ColdPart>,
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
            first_text_bytes: None,
            done_ms: None,
            verifications: Vec::new(),
            page_open_ms: None,
            read: None,
            batches: (0, 0, 0),
            dispatch: None,
            phases: Vec::new(),
            cold_parts: Vec::new(),
        }
    }

    /// The page was opened `ms` before this run's request (the page measures it, and the report
    /// adds the run's TTFT: `page_open_to_first_token_ms`).
    pub fn page_opened(&mut self, ms: f64) {
        self.page_open_ms = Some(ms.max(0.0));
    }

    /// The page's cold start before this run's request, each part in ms since the page opened
    /// (with [`page_opened`](Self::page_opened)): the report then holds the waterfall.
    pub fn cold_start(&mut self, parts: Vec<ColdPart>) {
        self.cold_parts = parts;
    }

    /// On a GPU: a decode token takes `dispatches_per_token` dispatches and one costs
    /// `dispatch_us` (measured apart): each report holds the dispatch floor.
    pub fn dispatch_cost(&mut self, dispatches_per_token: f64, dispatch_us: f64) {
        self.dispatch = (dispatches_per_token > 0.0 && dispatch_us > 0.0)
            .then_some((dispatches_per_token, dispatch_us));
    }

    /// The memory read `gb_per_s` (measured apart, by the engine's threads) and a position's keys
    /// and values take `kv_bytes_per_position`: each report holds the decode's bandwidth ceiling.
    pub fn read_bandwidth(&mut self, gb_per_s: f64, kv_bytes_per_position: u64) {
        self.read =
            (gb_per_s > 0.0 && gb_per_s.is_finite()).then_some((gb_per_s, kv_bytes_per_position));
    }

    /// One of this run's steps decoded `n` sequences together (a server's batch): the conditions
    /// then say the batch it actually ran in, the largest and the mean, not the most allowed.
    pub fn ran_in_batch(&mut self, n: usize) {
        let (sum, steps, most) = &mut self.batches;
        *sum += n;
        *steps += 1;
        *most = (*most).max(n);
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
            Event::Token {
                text, t_ms, phases, ..
            } => {
                self.phases.push(phases.as_deref().copied());
                self.token_times.push(*t_ms);
                self.chunks.push((*t_ms, 1));
                self.text.push_str(text);
                self.conditions.output_tokens = self.token_times.len();
                self.first_text_bytes.get_or_insert(self.text.len());
            }
            Event::Chunk {
                tokens,
                text,
                t_ms,
                reasoning,
                ..
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
                    self.token_times.extend(std::iter::repeat_n(*t_ms, *tokens));
                    self.chunks.push((*t_ms, *tokens));
                    self.conditions.output_tokens = self.token_times.len();
                    self.first_text_bytes.get_or_insert(self.text.len());
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

    /// How many arrivals of tokens so far: one a token for the engine, a stream's chunks that
    /// brought tokens.
    pub fn arrivals(&self) -> usize {
        self.chunks.len()
    }

    /// The rate chart's points from arrival `from` on: each arrival's last output token (from
    /// 0) and its rate, the tokens it brought over the gap since the arrival before, a second
    /// (`None` for the first arrival, and for tokens stamped at once with the one before).
    pub fn rate_points(&self, from: usize) -> Vec<RatePoint> {
        let mut token: usize = self.chunks[..from.min(self.chunks.len())]
            .iter()
            .map(|c| c.1)
            .sum();
        (from..self.chunks.len())
            .map(|k| {
                let (t, n) = self.chunks[k];
                token += n;
                let gap = k.checked_sub(1).map(|p| t - self.chunks[p].0);
                RatePoint {
                    token: token - 1,
                    rate: gap.filter(|&g| g > 0.0).map(|g| n as f64 * 1e3 / g),
                }
            })
            .collect()
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
        // Decode counts the tokens after the first arrival over the time from it to the last: a
        // server's first chunk of several tokens is not decode (AIPerf's per-chunk usage counts
        // so too), and neither are its words.
        let first_arrival = times
            .first()
            .map_or(0, |&t0| times.iter().take_while(|&&t| t == t0).count());
        let decode_ms =
            (n > first_arrival && first_arrival > 0).then(|| times[times.len() - 1] - times[0]);
        let decode_tps = decode_ms.and_then(|span| rate(n - first_arrival, span));
        let words = count_words(&self.text);
        let first_words = self
            .first_text_bytes
            .and_then(|b| self.text.get(..b))
            .map_or(0, count_words);
        let words_per_s = decode_ms.and_then(|span| rate(words.saturating_sub(first_words), span));
        let reader_words_per_s = self.reading_wpm / 60.0;
        let total_ms = self.done_ms.or(times.last().copied());
        let speculation = self.speculation_figures();
        // Every pass reads the weights once, whatever it verifies.
        let passes_per_token = speculation
            .as_ref()
            .map_or(Some(1.0), |s| s.passes_per_token);
        let mut conditions = self.conditions.clone();
        if let (sum, steps @ 1.., most) = self.batches {
            conditions.batch_size = most;
            conditions.batch_mean = Some(sum as f64 / steps as f64);
        }
        Report {
            summary: conditions.summary(),
            conditions,
            queued_ms: self.queued_ms,
            tokenize_ms: self.tokenize_ms,
            ttft_ms: ttft,
            page_open_to_first_token_ms: self.page_open_ms.zip(ttft).map(|(open, t)| open + t),
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
            bandwidth_ceiling: self.read.zip(self.conditions.source.bytes_per_token()).map(
                |((gb_per_s, kv), weights)| {
                    let tokens = (self.conditions.prompt_tokens, n);
                    BandwidthCeiling::new(gb_per_s, weights, kv, tokens, decode_tps)
                },
            ),
            dispatch_floor: self
                .dispatch
                .map(|(per_token, us)| DispatchFloor::new(per_token, us, decode_tps)),
            cold_start: self
                .page_open_ms
                .zip(ttft)
                .filter(|_| !self.cold_parts.is_empty())
                .map(|(open, ttft)| {
                    let run = (
                        self.queued_ms.unwrap_or(0.0),
                        self.tokenize_ms.unwrap_or(0.0),
                        self.prefill_ms.unwrap_or(0.0),
                        ttft,
                    );
                    ColdStart::new(self.cold_parts.clone(), open, run)
                }),
            phases: PhaseFigures::new(
                &self.phases,
                decode_ms.map(|span| span / (n - first_arrival) as f64),
            ),
        }
    }

    /// Speculation's figures, when the run speculated.
    fn speculation_figures(&self) -> Option<SpeculationFigures> {
        self.conditions.speculation.as_ref()?;
        let decoded = self.token_times.len().saturating_sub(1);
        Some(SpeculationFigures::new(&self.verifications, decoded))
    }
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}
