//! `generate --endpoint` and `bench --endpoint`: the same runs, tables and JSON as a local model,
//! with the tokens streamed from an OpenAI-compatible server (crate/api/endpoint).

use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::api::cli::runs::{Output, print_level_header, print_level_row, print_runs, table};
use crate::api::endpoint::level::{EndpointLevel, run_level};
use crate::api::endpoint::{Endpoint, EndpointRequest, Outcome};
use crate::decode::{Arrival, Event, Flow};
use crate::error::Error;
use crate::loading::tokenizer::Tokenizer;
use crate::meter::{Conditions, DEFAULT_READING_WPM, Meter, Report, Slo, TokenCounts};

/// Where the endpoint is and how to reach it (the CLI's `--endpoint` options).
pub(super) struct Target {
    pub url: String,
    pub model: Option<String>,
    pub key_env: Option<String>,
    pub stall: Duration,
    /// The longest a whole request may take.
    pub request_timeout: Duration,
    /// The model's tokenizer, to count tokens where the server gives no counts.
    pub tokenizer: Option<Tokenizer>,
}

/// A runtime for the client (two threads: 64 streams are I/O, not work).
fn runtime() -> Result<tokio::runtime::Runtime, Error> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| Error::Endpoint(format!("cannot start the HTTP client's runtime: {e}")))
}

async fn connect(target: &Target) -> Result<Endpoint, Error> {
    Endpoint::connect(
        &target.url,
        target.model.clone(),
        target.key_env.as_deref(),
        target.stall,
        target.request_timeout,
    )
    .await
}

/// One request streamed and metered; its events written as `output` says.
async fn run_one(
    endpoint: &Endpoint,
    request: &EndpointRequest,
    tokenizer: Option<&Tokenizer>,
    reading_wpm: f64,
    warm_up_ms: Option<f64>,
    output: Output,
) -> Result<Report, Error> {
    let mut conditions = Conditions::of(endpoint.source(TokenCounts::Chunks), request.sampling, 1);
    conditions.warm_up_ms = warm_up_ms;
    let mut meter = Meter::new(conditions, reading_wpm);
    // Stdout is taken for each write: its lock may not be held across the stream's awaits.
    let out = std::io::stdout;
    if output == Output::Text {
        let _ = write!(out(), "{}", request.prompt);
    }
    let mut done = None;
    let outcome: Outcome = endpoint
        .stream(request, tokenizer, Instant::now(), &mut |event| {
            meter.observe(event);
            match (event, output) {
                (Event::Done { .. }, _) => done = Some(event.clone()),
                (_, Output::Json) => {
                    let _ = writeln!(out(), "{}", serde_json::to_string(event).unwrap());
                }
                (Event::Chunk { text, .. }, Output::Text) => {
                    let mut out = out().lock();
                    let _ = write!(out, "{text}");
                    let _ = out.flush();
                }
                _ => {}
            }
            Flow::Continue
        })
        .await?;
    meter.set_source(endpoint.source(outcome.token_counts));
    meter.set_server_timings(outcome.server_timings);
    let report = meter.final_report();
    match output {
        Output::Json => {
            let mut line = serde_json::to_value(&done).unwrap();
            line["report"] = serde_json::to_value(&report).unwrap();
            let _ = writeln!(out(), "{line}");
        }
        Output::Text => {
            let _ = writeln!(out());
        }
        Output::Quiet => {}
    }
    Ok(report)
}

/// A short request before the measured ones (the server's first request warms its caches and
/// kernels, and tells whether it takes the per-chunk counting fields); its time, reported apart.
async fn warm_up(endpoint: &Endpoint, request: &EndpointRequest) -> Result<f64, Error> {
    let start = Instant::now();
    let mut short = request.clone();
    short.max_tokens = short.max_tokens.min(4);
    endpoint
        .stream(&short, None, start, &mut |_| Flow::Continue)
        .await?;
    Ok(start.elapsed().as_secs_f64() * 1e3)
}

/// `generate --endpoint`: stream one request and print the meter's table.
pub(super) fn generate(
    target: &Target,
    request: &EndpointRequest,
    reading_wpm: f64,
    no_warmup: bool,
    json: bool,
) -> Result<(), Error> {
    runtime()?.block_on(async {
        let endpoint = connect(target).await?;
        let warm_up_ms = if no_warmup {
            None
        } else {
            Some(warm_up(&endpoint, request).await?)
        };
        let output = if json { Output::Json } else { Output::Text };
        let report = run_one(
            &endpoint,
            request,
            target.tokenizer.as_ref(),
            reading_wpm,
            warm_up_ms,
            output,
        )
        .await?;
        if !json {
            eprintln!("\n{}", table(&report));
        }
        Ok(())
    })
}

/// `bench --endpoint` without `--concurrency`: `runs` requests one after another, after a warm-up.
pub(super) fn bench(
    target: &Target,
    request: &EndpointRequest,
    runs: usize,
    json: bool,
) -> Result<(), Error> {
    runtime()?.block_on(async {
        let endpoint = connect(target).await?;
        let warm_up_ms = warm_up(&endpoint, request).await?;
        let mut reports = Vec::with_capacity(runs);
        let tokenizer = target.tokenizer.as_ref();
        for _ in 0..runs {
            let wpm = DEFAULT_READING_WPM;
            let quiet = Output::Quiet;
            reports
                .push(run_one(&endpoint, request, tokenizer, wpm, Some(warm_up_ms), quiet).await?);
        }
        // Every run's conditions say how the least trusted of them was counted.
        let counts = reports
            .iter()
            .filter_map(|r| match &r.conditions.source {
                crate::meter::Source::Endpoint(e) => Some(e.token_counts),
                crate::meter::Source::Engine(_) => None,
            })
            .fold(TokenCounts::ChunkUsage, TokenCounts::max);
        for r in &mut reports {
            r.conditions.source = endpoint.source(counts);
            r.summary = r.conditions.summary();
        }
        print_runs(&reports, warm_up_ms, "no untimed run", false, json);
        Ok(())
    })
}

/// `bench --endpoint --concurrency`: one level per number of users.
pub(super) struct Levels {
    pub levels: Vec<usize>,
    pub arrival: Arrival,
    pub prompts: Vec<String>,
    pub duration: Option<Duration>,
    pub slo: Option<Slo>,
}

pub(super) fn bench_concurrency(
    target: Target,
    request: &EndpointRequest,
    load: &Levels,
    json: bool,
) -> Result<(), Error> {
    runtime()?.block_on(async {
        let endpoint = Arc::new(connect(&target).await?);
        let warm_up_ms = warm_up(&endpoint, request).await?;
        let tokenizer = target.tokenizer.map(Arc::new);
        let mut reports = Vec::with_capacity(load.levels.len());
        for (i, &users) in load.levels.iter().enumerate() {
            let level = EndpointLevel {
                users,
                arrival: load.arrival,
                prompts: load.prompts.clone(),
                request: request.clone(),
                duration: load.duration,
                slo: load.slo,
                reading_wpm: DEFAULT_READING_WPM,
            };
            // An untimed run of the level's concurrency first, two tokens each, all at once (as a
            // local level's), so that the server's batch shapes are warm.
            let warm = EndpointLevel {
                arrival: Arrival::Burst,
                request: EndpointRequest {
                    max_tokens: 2,
                    ..request.clone()
                },
                duration: None,
                ..level.clone()
            };
            run_level(endpoint.clone(), &warm, None).await;
            let mut report = run_level(endpoint.clone(), &level, tokenizer.clone()).await;
            report.conditions.warm_up_ms = Some(warm_up_ms);
            if !json {
                if i == 0 {
                    print_level_header(&report, "batched as the server does", warm_up_ms);
                }
                print_level_row(&report);
            }
            reports.push(report);
        }
        if json {
            println!("{}", serde_json::to_string_pretty(&reports).unwrap());
        }
        Ok(())
    })
}
