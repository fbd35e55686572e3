//! `GET /metrics`: Prometheus text, with vLLM's metric names under the `tokenometer:` prefix
//! (`vllm:time_to_first_token_seconds` is `tokenometer:time_to_first_token_seconds`), so that a
//! dashboard made for vLLM needs only the prefix changed. docs/serve.md lists them.

use std::collections::BTreeMap;
use std::fmt::Write;

use crate::meter::Report;

/// vLLM's buckets for time to first token, in seconds.
const TTFT_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0,
];
/// vLLM's buckets for the gap between tokens, with 1, 2.5 and 5 ms added below them: a small model
/// on a CPU decodes a token in a few milliseconds.
const ITL_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
    5.0, 7.5, 10.0,
];
/// vLLM's buckets for a request's whole time, in seconds.
const E2E_BUCKETS: &[f64] = &[
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
    480.0,
];

#[derive(Debug, Clone)]
struct Histogram {
    bounds: &'static [f64],
    /// Observations at most each bound (not yet cumulative).
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Self {
        Self {
            bounds,
            counts: vec![0; bounds.len()],
            sum: 0.0,
            count: 0,
        }
    }

    fn observe(&mut self, seconds: f64) {
        if let Some(i) = self.bounds.iter().position(|&b| seconds <= b) {
            self.counts[i] += 1;
        }
        self.sum += seconds;
        self.count += 1;
    }

    fn write(&self, out: &mut String, name: &str, help: &str, labels: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        let mut cumulative = 0;
        for (bound, count) in self.bounds.iter().zip(&self.counts) {
            cumulative += count;
            let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{bound}\"}} {cumulative}");
        }
        let _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {}", self.count);
        let _ = writeln!(out, "{name}_sum{{{labels}}} {}", self.sum);
        let _ = writeln!(out, "{name}_count{{{labels}}} {}", self.count);
    }
}

/// The server's counters since it started.
#[derive(Debug, Clone)]
pub struct Metrics {
    model: String,
    prompt_tokens: u64,
    generation_tokens: u64,
    /// Requests ended, by vLLM's `finished_reason`: stop, length, abort (the client left), error.
    finished: BTreeMap<&'static str, u64>,
    rejected: u64,
    ttft: Histogram,
    inter_token: Histogram,
    e2e: Histogram,
    queue: Histogram,
    prefill: Histogram,
}

impl Metrics {
    pub fn new(model: &str) -> Self {
        Self {
            // A label value escapes backslash, quote and newline.
            model: model
                .replace('\\', "\\\\")
                .replace('"', "\\\"")
                .replace('\n', "\\n"),
            prompt_tokens: 0,
            generation_tokens: 0,
            finished: BTreeMap::new(),
            rejected: 0,
            ttft: Histogram::new(TTFT_BUCKETS),
            inter_token: Histogram::new(ITL_BUCKETS),
            e2e: Histogram::new(E2E_BUCKETS),
            queue: Histogram::new(E2E_BUCKETS),
            prefill: Histogram::new(E2E_BUCKETS),
        }
    }

    /// A request that ended (`finished`: stop, length, abort or error), with its meter's report
    /// and the gaps between its tokens (ms).
    pub fn finished(&mut self, finished: &'static str, report: &Report, gaps_ms: &[f64]) {
        *self.finished.entry(finished).or_default() += 1;
        self.prompt_tokens += report.conditions.prompt_tokens as u64;
        self.generation_tokens += report.conditions.output_tokens as u64;
        let seconds = |ms: f64| ms / 1e3;
        if let Some(ms) = report.ttft_ms {
            self.ttft.observe(seconds(ms));
        }
        if let Some(ms) = report.queued_ms {
            self.queue.observe(seconds(ms));
        }
        if let Some(ms) = report.prefill_ms {
            self.prefill.observe(seconds(ms));
        }
        if let Some(ms) = report.total_ms {
            self.e2e.observe(seconds(ms));
        }
        for &gap in gaps_ms {
            self.inter_token.observe(seconds(gap));
        }
    }

    /// A request turned away because the queue was full (429).
    pub fn rejected(&mut self) {
        self.rejected += 1;
    }

    /// The Prometheus text, with the gauges as they are now.
    pub fn render(
        &self,
        running: [usize; 2],
        waiting: usize,
        kv: [usize; 3],
        kv_bytes: u64,
    ) -> String {
        let labels = format!("model_name=\"{}\"", self.model);
        let mut out = String::new();
        let mut scalar = |name: &str, kind: &str, help: &str, value: u64| {
            let _ = writeln!(
                out,
                "# HELP tokenometer:{name} {help}\n# TYPE tokenometer:{name} {kind}\n\
                 tokenometer:{name}{{{labels}}} {value}"
            );
        };
        scalar(
            "num_requests_running",
            "gauge",
            "Requests in the batch now.",
            running[0] as u64,
        );
        scalar(
            "num_requests_running_peak",
            "gauge",
            "The most requests the batch has held at once since the server started.",
            running[1] as u64,
        );
        scalar(
            "num_requests_waiting",
            "gauge",
            "Requests waiting for a place in the batch.",
            waiting as u64,
        );
        scalar(
            "kv_cache_positions_reserved",
            "gauge",
            "KV cache positions the requests in the batch may come to hold (prompt and max tokens).",
            kv[0] as u64,
        );
        scalar(
            "kv_cache_positions_reserved_peak",
            "gauge",
            "The most KV cache positions the batch has reserved at once since the server started.",
            kv[1] as u64,
        );
        scalar(
            "kv_cache_positions_budget",
            "gauge",
            "The most KV cache positions the batch may reserve (--kv-memory over the bytes a position).",
            kv[2] as u64,
        );
        scalar(
            "kv_cache_bytes",
            "gauge",
            "Bytes the backend holds for keys and values now (the requests' caches on the CPU, the KV pool on the GPU).",
            kv_bytes,
        );
        scalar(
            "prompt_tokens_total",
            "counter",
            "Prompt tokens of ended requests.",
            self.prompt_tokens,
        );
        scalar(
            "generation_tokens_total",
            "counter",
            "Tokens generated for ended requests.",
            self.generation_tokens,
        );
        scalar(
            "requests_rejected_total",
            "counter",
            "Requests answered 429 because the queue was full.",
            self.rejected,
        );
        let _ = writeln!(
            out,
            "# HELP tokenometer:request_success_total Requests ended, by why they ended.\n\
             # TYPE tokenometer:request_success_total counter"
        );
        for reason in ["stop", "length", "abort", "error"] {
            let n = self.finished.get(reason).copied().unwrap_or(0);
            let _ = writeln!(
                out,
                "tokenometer:request_success_total{{{labels},finished_reason=\"{reason}\"}} {n}"
            );
        }
        let histograms = [
            (
                &self.ttft,
                "time_to_first_token_seconds",
                "From the request to its first token: queue, tokenizing, prefill, first pick.",
            ),
            (
                &self.inter_token,
                "inter_token_latency_seconds",
                "Gaps between a request's consecutive tokens.",
            ),
            (
                &self.e2e,
                "e2e_request_latency_seconds",
                "From the request to its end.",
            ),
            (
                &self.queue,
                "request_queue_time_seconds",
                "Time a request waited before its prompt's first chunk.",
            ),
            (
                &self.prefill,
                "request_prefill_time_seconds",
                "The prompt's passes, from its first chunk's step, and the first pick.",
            ),
        ];
        for (histogram, name, help) in histograms {
            histogram.write(&mut out, &format!("tokenometer:{name}"), help, &labels);
        }
        out
    }
}
