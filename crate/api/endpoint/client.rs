//! The HTTP client: one request streamed from an endpoint, each read stamped with the time its
//! bytes arrived (before they are parsed) and handed to the meter as events. Every failure is one
//! sentence naming what to do.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::api::endpoint::request::{EndpointRequest, http_failure};
use crate::api::endpoint::stream::StreamReader;
use crate::api::endpoint::url::base_url;
use crate::decode::{Event, Flow};
use crate::error::{Error, clip, clip_to};
use crate::loading::tokenizer::Tokenizer;
use crate::meter::{EndpointInfo, LlamaTimings, Source, TokenCounts};

/// An endpoint to meter: its base URL, the model asked for, and how to reach it.
pub struct Endpoint {
    base: String,
    model: String,
    key: Option<String>,
    http: reqwest::Client,
    /// The server's software, as its `Server` header names it.
    server: Option<String>,
    /// The longest wait for the next bytes of a stream (or for the answer to start), and for the
    /// next bytes that are not comments (a server's pings).
    stall: Duration,
    /// The longest a whole request may take.
    request_timeout: Duration,
    /// Whether to ask for per-chunk counts (vLLM's `continuous_usage_stats`, llama.cpp's
    /// `timings_per_token`); off once a server refused them.
    ask_counts: AtomicBool,
}

/// How a streamed request ended (its text is in its events, and so in the meter).
#[derive(Debug, Clone)]
pub struct Outcome {
    pub token_counts: TokenCounts,
    pub server_timings: Option<LlamaTimings>,
}

impl Endpoint {
    /// Reach the endpoint at `url` (the API's base): ask `/models` for the model (the one named,
    /// or the first it lists), with the key from the environment variable `key_env` names.
    pub async fn connect(
        url: &str,
        model: Option<String>,
        key_env: Option<&str>,
        stall: Duration,
        request_timeout: Duration,
    ) -> Result<Endpoint, Error> {
        let base = base_url(url).map_err(Error::Endpoint)?;
        let key = match key_env {
            None => None,
            Some(var) => match std::env::var(var) {
                Ok(key) if !key.trim().is_empty() => Some(key.trim().to_string()),
                _ => {
                    return Err(Error::Endpoint(format!(
                        "--api-key-env names {var}, which is not set (export {var}=YOUR_KEY)"
                    )));
                }
            },
        };
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .pool_max_idle_per_host(256)
            .build()
            .map_err(|e| Error::Endpoint(format!("cannot make an HTTP client: {e}")))?;
        let mut endpoint = Endpoint {
            base,
            model: model.clone().unwrap_or_default(),
            key,
            http,
            server: None,
            stall,
            request_timeout,
            ask_counts: AtomicBool::new(true),
        };
        let url = format!("{}/models", endpoint.base);
        let response = endpoint
            .with_key(endpoint.http.get(&url))
            .timeout(stall)
            .send()
            .await
            .map_err(|e| Error::Endpoint(endpoint.unreachable(&e)))?;
        endpoint.server = server_name(response.headers());
        let status = response.status();
        let body = response.text().await.unwrap_or_default();
        if !status.is_success() {
            // Some servers have no /models; a named model does without it.
            if status.as_u16() == 404 && model.is_some() {
                return Ok(endpoint);
            }
            return Err(Error::Endpoint(http_failure(&url, status.as_u16(), &body)));
        }
        let listed: Vec<String> = serde_json::from_str::<Value>(&body)
            .ok()
            .and_then(|v| {
                v.get("data")?.as_array().map(|models| {
                    models
                        .iter()
                        .filter_map(|m| m.get("id")?.as_str().map(str::to_string))
                        .collect()
                })
            })
            .unwrap_or_default();
        endpoint.model = match model {
            Some(name) => name,
            None => listed.into_iter().next().ok_or_else(|| {
                Error::Endpoint(format!(
                    "{url} lists no model; name one with --endpoint-model"
                ))
            })?,
        };
        Ok(endpoint)
    }

    /// What the conditions say of this endpoint, counting as `counts` says.
    pub fn source(&self, counts: TokenCounts) -> Source {
        Source::Endpoint(EndpointInfo {
            endpoint: self.base.clone(),
            model: self.model.clone(),
            server: self.server.clone(),
            token_counts: counts,
        })
    }

    fn with_key(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.key {
            Some(key) => request.bearer_auth(key),
            None => request,
        }
    }

    fn unreachable(&self, e: &reqwest::Error) -> String {
        if e.is_timeout() {
            format!(
                "{} did not answer within {:.0} s; is it the right address, and is the server \
                 up?",
                self.base,
                self.stall.as_secs_f64()
            )
        } else if e.is_connect() {
            format!(
                "cannot connect to {}: nothing answered there (is the server running, on that \
                 host and port?)",
                self.base
            )
        } else {
            format!(
                "cannot reach {}: {}",
                self.base,
                clip_to(&e.to_string(), 240)
            )
        }
    }

    /// Stream one request, handing each event to `on_event` with times in ms since `made`
    /// (`Flow::Stop` cancels it: the connection is dropped, which cancels it on the server);
    /// counts with `tokenizer` where the server gives none. The done event always comes last,
    /// unless the request fails, which is an error in one sentence.
    pub async fn stream(
        &self,
        request: &EndpointRequest,
        tokenizer: Option<&Tokenizer>,
        made: Instant,
        on_event: &mut (dyn FnMut(&Event) -> Flow + Send),
    ) -> Result<Outcome, Error> {
        let whole = self.stream_unbounded(request, tokenizer, made, on_event);
        tokio::time::timeout(self.request_timeout, whole)
            .await
            .map_err(|_| {
                Error::Endpoint(format!(
                    "{}/{} did not finish the request within {:.0} s (--request-timeout)",
                    self.base,
                    request.path(),
                    self.request_timeout.as_secs_f64()
                ))
            })?
    }

    /// [`stream`](Self::stream) without the bound on the whole request.
    async fn stream_unbounded(
        &self,
        request: &EndpointRequest,
        tokenizer: Option<&Tokenizer>,
        made: Instant,
        on_event: &mut (dyn FnMut(&Event) -> Flow + Send),
    ) -> Result<Outcome, Error> {
        let url = format!("{}/{}", self.base, request.path());
        let mut resent = false;
        let mut response = loop {
            let counts = self.ask_counts.load(Ordering::Relaxed);
            let send = self
                .with_key(self.http.post(&url))
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(request.body(&self.model, counts))
                .send();
            let response = tokio::time::timeout(self.stall, send).await.map_err(|_| {
                Error::Endpoint(format!(
                    "{url} did not start answering within {:.0} s",
                    self.stall.as_secs_f64()
                ))
            })?;
            let response = match response {
                Ok(response) => response,
                // A pooled connection the server had just closed (llama.cpp's server closes a
                // keep-alive connection after a few requests): the request never reached it, so
                // it is sent once more, on a new connection; its wait counts in TTFT. Measured
                // against llama-server at 4 users: 2 of 26 requests failed this way before.
                Err(e) if !resent && e.is_request() && !e.is_timeout() => {
                    resent = true;
                    continue;
                }
                Err(e) => return Err(Error::Endpoint(self.unreachable(&e))),
            };
            let status = response.status().as_u16();
            let kind = content_type(response.headers());
            if status == 200 && kind.starts_with("text/event-stream") {
                break response;
            }
            let body = read_capped(response, MAX_ERROR_BYTES, self.stall).await;
            if status == 200 {
                // A whole JSON answer, an HTML page: not the stream that was asked for.
                let shown = clip_to(body.trim(), 120);
                return Err(Error::Endpoint(format!(
                    "{url} answered 200 with {} where an event stream was asked for (it began \
                     {shown:?}); is it an OpenAI-compatible server that streams?",
                    if kind.is_empty() {
                        "no content type"
                    } else {
                        &kind
                    }
                )));
            }
            // A server that refuses the per-chunk counting fields is asked again without them,
            // once (OpenAI's API refuses arguments it does not know), when its error names one.
            let names_a_counting_field = [
                "timings_per_token",
                "continuous_usage_stats",
                "stream_options",
            ]
            .iter()
            .any(|field| body.contains(field));
            if (status == 400 || status == 422) && counts && names_a_counting_field {
                self.ask_counts.store(false, Ordering::Relaxed);
                continue;
            }
            return Err(Error::Endpoint(http_failure(&url, status, &body)));
        };
        let mut reader = StreamReader::new(tokenizer, request.max_tokens);
        let ms = |made: Instant| made.elapsed().as_secs_f64() * 1e3;
        let mut cancelled = false;
        // The last time bytes other than comments came: pings keep a connection open, but a
        // server that sends nothing else for the stall limit has stalled.
        let (mut progress, mut progressed) = (0, Instant::now());
        'read: loop {
            let bytes = tokio::time::timeout(self.stall, response.chunk())
                .await
                .map_err(|_| {
                    Error::Endpoint(format!(
                        "the stream from {url} stalled: no bytes for {:.0} s",
                        self.stall.as_secs_f64()
                    ))
                })?
                .map_err(|e| {
                    Error::Endpoint(format!(
                        "the stream from {url} broke: {}",
                        clip_to(&e.to_string(), 240)
                    ))
                })?;
            // The time the bytes arrived, before any parsing.
            let t_ms = ms(made);
            let closed = bytes.is_none();
            let read = match bytes {
                Some(bytes) => reader.feed(&bytes, t_ms),
                None => reader.finish(t_ms),
            }
            .map_err(Error::Endpoint)?;
            for event in &read.events {
                if on_event(event) == Flow::Stop {
                    cancelled = true;
                    break 'read;
                }
            }
            if read.ended {
                break;
            }
            // Some servers close after the finish reason without `[DONE]` (a stream closed with
            // neither is an error from `finish`).
            if closed {
                break;
            }
            if reader.progress() > progress {
                (progress, progressed) = (reader.progress(), Instant::now());
            } else if progressed.elapsed() > self.stall {
                return Err(Error::Endpoint(format!(
                    "the stream from {url} stalled: only keep-alive comments for {:.0} s",
                    self.stall.as_secs_f64()
                )));
            }
        }
        let end = reader.done_event(ms(made), cancelled);
        on_event(&end);
        Ok(Outcome {
            token_counts: reader.token_counts(),
            server_timings: reader.server_timings().cloned(),
        })
    }
}

/// The most of an error's (or an unexpected answer's) body that is read.
pub const MAX_ERROR_BYTES: usize = 64 << 10;

/// The response's content type, lower case (empty when it sends none).
fn content_type(headers: &reqwest::header::HeaderMap) -> String {
    headers
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase()
}

/// At most `most` bytes of `response`'s body, read within `within` (a body that never ends, or
/// never stops, is cut there): what came, as text.
async fn read_capped(mut response: reqwest::Response, most: usize, within: Duration) -> String {
    let mut body = Vec::new();
    let read = async {
        while body.len() < most {
            match response.chunk().await {
                Ok(Some(bytes)) => body.extend_from_slice(&bytes),
                _ => break,
            }
        }
    };
    let _ = tokio::time::timeout(within, read).await;
    body.truncate(most);
    String::from_utf8_lossy(&body).into_owned()
}

/// The server's software from its `Server` header (`llama.cpp`, `uvicorn` for vLLM), if any.
fn server_name(headers: &reqwest::header::HeaderMap) -> Option<String> {
    let server = headers.get(reqwest::header::SERVER)?.to_str().ok()?;
    Some(clip(server))
}
