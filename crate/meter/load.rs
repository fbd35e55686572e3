//! A batch's or load level's meter: every user's own [`Meter`], and the level's figures from
//! them (the module's definitions, in meter/mod.rs).

use serde::Serialize;

use crate::decode::{Event, Sampling, StopReason};
use crate::meter::ceiling::BandwidthCeiling;
use crate::meter::goodput::{Goodput, RequestRecord, Slo};
use crate::meter::products::Products;
use crate::meter::run::{Conditions, Meter, Report};
use crate::meter::source::Source;
use crate::meter::stats::{aggregate_decode_tps, percentiles, rate};

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
            self.sampling.describe(false),
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
    /// Requests that failed; in the TTFT percentiles as never (+infinity: `null` in JSON when a
    /// percentile falls on one).
    pub requests_failed: usize,
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
    /// The aggregate's memory-bandwidth ceiling at this level's batch, where the caller measured
    /// the read bandwidth ([`BatchMeter::read_bandwidth`]): a step reads the weights once for all
    /// its sequences, so a larger batch raises it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bandwidth_ceiling: Option<BandwidthCeiling>,
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
    /// The memory's read bandwidth in GB/s and the KV cache's bytes a position, for the ceiling.
    read: Option<(f64, u64)>,
}

impl BatchMeter {
    pub fn new(conditions: LoadConditions, reading_wpm: f64) -> Self {
        Self {
            conditions,
            reading_wpm,
            users: Vec::new(),
            failed: Vec::new(),
            read: None,
        }
    }

    /// The memory reads `gb_per_s` (measured apart from the level) and the KV cache holds
    /// `kv_bytes_per_position`: the report holds the level's bandwidth ceiling.
    pub fn read_bandwidth(&mut self, gb_per_s: f64, kv_bytes_per_position: u64) {
        self.read = Some((gb_per_s, kv_bytes_per_position));
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
        // Each user's request: when it was made, its report, its meter, and whether it failed.
        let users: Vec<(f64, Report, &Meter, bool)> = self
            .users
            .iter()
            .enumerate()
            .filter_map(|(seq, u)| {
                let (made, m) = u.as_ref()?;
                let failed = self.failed.get(seq).is_some_and(Option::is_some);
                Some((*made, m.final_report(), m, failed))
            })
            .collect();
        let first_request = users.iter().map(|u| u.0).fold(f64::INFINITY, f64::min);
        let last = |pick: &dyn Fn(&Meter) -> Option<f64>| {
            users
                .iter()
                .filter_map(|(made, _, m, _)| pick(m).map(|t| made + t))
                .fold(None, |a: Option<f64>, t| Some(a.map_or(t, |a| a.max(t))))
        };
        let last_token = last(&|m| m.token_times().last().copied());
        let end = last(&|m| m.done_ms().or(m.token_times().last().copied()));
        let output_tokens: usize = users.iter().map(|u| u.1.conditions.output_tokens).sum();
        let per_user: Vec<f64> = users.iter().filter_map(|u| u.1.decode_tps).collect();
        let words: Vec<f64> = users.iter().filter_map(|u| u.1.words_per_s).collect();
        // A failed request never gave its first token: it counts in TTFT's percentiles as never
        // (+infinity), so that failures cannot make them look better.
        let requests_failed = users.iter().filter(|u| u.3).count();
        let mut ttft: Vec<f64> = users
            .iter()
            .filter(|u| !u.3)
            .filter_map(|u| u.1.ttft_ms)
            .collect();
        ttft.extend(std::iter::repeat_n(f64::INFINITY, requests_failed));
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
        let records: Vec<RequestRecord> = users
            .iter()
            .map(|(_, r, _, failed)| RequestRecord {
                completed: !failed
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
        let prompt_tokens = users.iter().map(|u| u.1.conditions.prompt_tokens).sum();
        let aggregate_tps = last_token.and_then(|t| rate(output_tokens, t - first_request));
        // Against the level's decode alone (tokens after each one's first, from the earliest
        // first token to the latest last: no prefill or queueing in it), each request's mean
        // prompt and output setting the keys and values a token reads.
        let streams: Vec<Vec<f64>> = users
            .iter()
            .map(|(made, _, m, _)| m.token_times().iter().map(|t| made + t).collect())
            .collect();
        let streams: Vec<&[f64]> = streams.iter().map(Vec::as_slice).collect();
        let decode_tps = aggregate_decode_tps(&streams);
        let bandwidth_ceiling = self
            .read
            .zip(self.conditions.source.bytes_per_token())
            .filter(|_| !users.is_empty())
            .map(|((gb_per_s, kv), weights)| {
                let mean = |tokens: usize| tokens / users.len();
                BandwidthCeiling::batched(
                    (gb_per_s, weights, kv),
                    (mean(prompt_tokens), mean(output_tokens)),
                    self.conditions.batch_rows(),
                    decode_tps,
                )
            });
        LoadReport {
            summary: self.conditions.summary(),
            conditions: self.conditions.clone(),
            users: self.conditions.users,
            requests: records.len(),
            requests_completed: records.iter().filter(|r| r.completed).count(),
            requests_failed,
            failures,
            prompt_tokens,
            output_tokens,
            aggregate_tps,
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
            bandwidth_ceiling,
        }
    }
}
