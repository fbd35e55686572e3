//! A load level against an endpoint: `users` concurrent streams arriving as the level says, each
//! metered on its own and all together by the batch meter, as a local level is. With a duration,
//! each user sends its next request as soon as its last one ends, until the time is up (a closed
//! loop, as AIPerf's and guidellm's concurrency modes do); without one, each user sends one.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::api::endpoint::client::Endpoint;
use crate::api::endpoint::request::EndpointRequest;
use crate::decode::{Arrival, Flow};
use crate::loading::tokenizer::Tokenizer;
use crate::meter::{BatchMeter, LoadConditions, LoadReport, Slo, TokenCounts};

/// What an endpoint level sends.
#[derive(Debug, Clone)]
pub struct EndpointLevel {
    pub users: usize,
    pub arrival: Arrival,
    /// Given to the requests in turn.
    pub prompts: Vec<String>,
    /// The request each user sends (its prompt replaced by theirs).
    pub request: EndpointRequest,
    /// Keep each user sending until this much time has passed since the level began.
    pub duration: Option<Duration>,
    pub slo: Option<Slo>,
    pub reading_wpm: f64,
}

/// Run `level` against `endpoint`; every request's failure is kept in the report, in a sentence.
pub async fn run_level(
    endpoint: Arc<Endpoint>,
    level: &EndpointLevel,
    tokenizer: Option<Arc<Tokenizer>>,
) -> LoadReport {
    let conditions = LoadConditions {
        source: endpoint.source(TokenCounts::Chunks),
        users: level.users,
        max_batch: None,
        arrival: match level.duration {
            Some(d) => format!(
                "{}, then closed loop for {:.0} s",
                level.arrival,
                d.as_secs_f64()
            ),
            None => level.arrival.to_string(),
        },
        max_tokens: level.request.max_tokens,
        sampling: level.request.sampling,
        warm_up_ms: None,
        slo: level.slo,
    };
    let meter = Arc::new(Mutex::new(BatchMeter::new(conditions, level.reading_wpm)));
    // The least trusted way any request's tokens were counted.
    let counts = Arc::new(Mutex::new(TokenCounts::ChunkUsage));
    let next_seq = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(level.users);
    for at in level.arrival.times(level.users) {
        let (endpoint, meter, counts, next_seq) = (
            endpoint.clone(),
            meter.clone(),
            counts.clone(),
            next_seq.clone(),
        );
        let tokenizer = tokenizer.clone();
        let level = level.clone();
        tasks.push(tokio::spawn(async move {
            tokio::time::sleep_until((start + Duration::from_secs_f64(at / 1e3)).into()).await;
            loop {
                let seq = next_seq.fetch_add(1, Ordering::Relaxed);
                let mut request = level.request.clone();
                request.prompt = level.prompts[seq % level.prompts.len()].clone();
                let made = Instant::now();
                let made_ms = (made - start).as_secs_f64() * 1e3;
                meter.lock().unwrap().arrive(seq, made_ms);
                let outcome = endpoint
                    .stream(&request, tokenizer.as_deref(), made, &mut |event| {
                        meter.lock().unwrap().observe(seq, event);
                        Flow::Continue
                    })
                    .await;
                match outcome {
                    Ok(outcome) => {
                        let mut meter = meter.lock().unwrap();
                        if let Some(m) = meter.user_mut(seq) {
                            m.set_server_timings(outcome.server_timings);
                        }
                        let mut least = counts.lock().unwrap();
                        *least = (*least).max(outcome.token_counts);
                    }
                    Err(e) => meter.lock().unwrap().fail(seq, e.to_string()),
                }
                let more = level.duration.is_some_and(|d| start.elapsed() < d);
                if !more {
                    break;
                }
            }
        }));
    }
    for task in tasks {
        // A task that panicked leaves its request failed in the meter; the others go on.
        let _ = task.await;
    }
    let mut meter = meter.lock().unwrap();
    let counts = *counts.lock().unwrap();
    meter.set_source(endpoint.source(counts));
    meter.report()
}
