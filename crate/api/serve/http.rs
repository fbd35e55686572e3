//! The routes: OpenAI's chat and text completions (streamed as Server-Sent Events or whole),
//! `/v1/models`, `/health`, `/metrics`, `/room`, and the page's files. Every error is OpenAI's
//! shape with its status; a request's stream ends its sequence when the client leaves.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderValue, Method, StatusCode, Uri, header};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use tokio::sync::{mpsc as tokio_mpsc, oneshot};

use crate::api::openai::{
    ApiError, ChatRequest, Completion, CompletionRequest, DEFAULT_MAX_TOKENS_SERVED, Kind,
    ModelCard, ModelList, Params,
};
use crate::api::reply::Reply;
use crate::decode::{GenerateOptions, ModelInfo, PromptEncoder, Tokenized};
use crate::error::clip;
use crate::loading::chat::ChatTemplate;
use crate::meter::Report;

use super::worker::{Command, Job, Shared, Update, refusal};

/// The largest request body read (a conversation filling a 128k context is about 512 kB).
pub const MAX_BODY_BYTES: usize = 4 << 20;
/// How long a client may take by default to send its request's headers...
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// ...and its body.
pub const BODY_TIMEOUT: Duration = Duration::from_secs(30);
/// The most connections served at once, where the open file limit allows them
/// ([`super::connection_cap`]).
pub const MAX_CONNECTIONS: usize = 4096;
/// A stream that has nothing to send (its request waits for a place) sends a comment this often,
/// which also finds a client that has left.
pub const KEEP_ALIVE: Duration = Duration::from_secs(5);

/// What every handler shares.
pub struct App {
    pub commands: mpsc::Sender<Command>,
    pub shared: Arc<Mutex<Shared>>,
    pub info: ModelInfo,
    pub chat: Option<ChatTemplate>,
    /// Tokenizes prompts here, on the HTTP side, so that the engine never waits on one.
    pub encoder: Arc<PromptEncoder>,
    /// When the server started (seconds since 1970), for `/v1/models`.
    pub created: u64,
    /// How long a body may take to arrive (for the error that says so).
    pub body_timeout: Duration,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::BAD_REQUEST);
        let mut response = (
            status,
            [(header::CONTENT_TYPE, "application/json")],
            self.body(),
        )
            .into_response();
        if status == StatusCode::TOO_MANY_REQUESTS {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        response
    }
}

/// The API's routes (the page's files are added by the caller).
pub fn api(app: Arc<App>) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(chat).fallback(wrong_method))
        .route("/v1/completions", post(completions).fallback(wrong_method))
        .route("/v1/models", get(models).fallback(wrong_method))
        .route("/v1/{*path}", any(unknown_path))
        .route("/health", get(health).fallback(wrong_method))
        .route("/metrics", get(metrics).fallback(wrong_method))
        .route("/room", get(room).fallback(wrong_method))
        .with_state(app)
}

/// 405 in OpenAI's error shape, never an empty body.
async fn wrong_method(method: Method, uri: Uri) -> ApiError {
    ApiError::bad_request(format!(
        "{} is not a method {} takes",
        clip(method.as_str()),
        clip(uri.path())
    ))
    .with_status(405, "method_not_allowed")
}

/// 404 in OpenAI's error shape for a path of the API that does not exist.
async fn unknown_path(uri: Uri) -> ApiError {
    ApiError::bad_request(format!(
        "{} is not a path of this API (POST /v1/chat/completions, POST /v1/completions, GET \
         /v1/models)",
        clip(uri.path())
    ))
    .with_status(404, "not_found")
}

async fn health() -> impl IntoResponse {
    axum::Json(serde_json::json!({ "status": "ok" }))
}

async fn models(State(app): State<Arc<App>>) -> impl IntoResponse {
    axum::Json(ModelList {
        object: "list",
        data: vec![ModelCard {
            id: app.info.name.clone(),
            object: "model",
            created: app.created,
            owned_by: "tokenometer",
            max_model_len: app.info.context_length,
        }],
    })
}

async fn metrics(State(app): State<Arc<App>>) -> impl IntoResponse {
    let shared = app.shared.lock().unwrap();
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        shared.metrics.render(
            [shared.running, shared.running_peak],
            shared.waiting,
            [
                shared.kv_reserved,
                shared.kv_reserved_peak,
                shared.kv_positions,
            ],
            shared.kv_bytes,
        ),
    )
}

/// The room's figures now (docs/serve.md), with the model's conditions.
async fn room(State(app): State<Arc<App>>) -> impl IntoResponse {
    let mut shared = app.shared.lock().unwrap();
    let now = shared.now_ms();
    let (running, waiting, rates) = (shared.running, shared.waiting, shared.live_rates.clone());
    let figures = shared.room.figures(now, running, waiting, &rates);
    axum::Json(serde_json::json!({
        "room": figures,
        "model": app.info.name,
        "quant": app.info.quant.to_string(),
        "backend": app.info.backend.to_string(),
        "adapter": app.info.adapter,
    }))
}

async fn chat(State(app): State<Arc<App>>, body: Result<Bytes, BytesRejection>) -> Response {
    let received = Instant::now();
    let request: ChatRequest = match parse(body, &app) {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    if let Err(e) = check_model(&app, request.model.as_deref()) {
        return e.into_response();
    }
    // The request's own faults first, then whether this model takes messages at all.
    let turns = match request.turns() {
        Ok(t) => t,
        Err(e) => return e.into_response(),
    };
    let Some(template) = &app.chat else {
        return ApiError::bad_request(format!(
            "{}, so it cannot take messages: send a raw prompt to /v1/completions, or start the \
             server with --chat-template ({})",
            app.info.no_chat_template(),
            crate::loading::tokenizer::ChatTemplate::CHOICES
        ))
        .into_response();
    };
    let turns: Vec<(&str, &str)> = turns.iter().map(|(r, t)| (*r, t.as_str())).collect();
    let prompt = template.render(&turns);
    complete(app, Kind::Chat, prompt, true, &request.params, received).await
}

async fn completions(State(app): State<Arc<App>>, body: Result<Bytes, BytesRejection>) -> Response {
    let received = Instant::now();
    let request: CompletionRequest = match parse(body, &app) {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    if let Err(e) = check_model(&app, request.model.as_deref()) {
        return e.into_response();
    }
    let prompt = match request.text() {
        Ok(p) => p.to_string(),
        Err(e) => return e.into_response(),
    };
    complete(app, Kind::Text, prompt, false, &request.params, received).await
}

/// The body as JSON of type `T`, or the error a client can act on.
fn parse<T: serde::de::DeserializeOwned>(
    body: Result<Bytes, BytesRejection>,
    app: &App,
) -> Result<T, ApiError> {
    let body = body.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::bad_request(format!(
                "the request body is over {} bytes; send a shorter conversation",
                MAX_BODY_BYTES
            ))
            .with_status(413, "body_too_large")
        } else {
            ApiError::bad_request(format!(
                "the request body did not arrive whole within {} s",
                app.body_timeout.as_secs_f64()
            ))
            .with_status(408, "body_timeout")
        }
    })?;
    serde_json::from_slice(&body).map_err(|e| {
        let what = match e.classify() {
            serde_json::error::Category::Data => "a field is missing or has the wrong type",
            _ => "the body is not valid JSON",
        };
        ApiError::bad_request(format!("{what}: {e}"))
    })
}

/// A request for another model than this server's is refused (no name, or an empty one, is this
/// server's).
fn check_model(app: &App, model: Option<&str>) -> Result<(), ApiError> {
    match model {
        Some(m) if !m.is_empty() && m != app.info.name => Err(ApiError::invalid(
            "model",
            format!(
                "model {:?} is not served here; this server serves {:?} (GET /v1/models)",
                clip(m),
                app.info.name
            ),
        )
        .with_status(404, "model_not_found")),
        _ => Ok(()),
    }
}

/// Tokenize `prompt` here, on a blocking thread of the HTTP side, so that the engine's steps never
/// wait on it; a prompt with more bytes than the context could hold in tokens is refused without
/// tokenizing (a 4 MiB prompt took SmolLM2's tokenizer 2.3 s on the engine's thread, stalling
/// every stream, until 2026-11-29).
async fn tokenize(encoder: &Arc<PromptEncoder>, prompt: String) -> Result<Tokenized, ApiError> {
    let most = encoder.max_prompt_bytes();
    if prompt.len() > most {
        return Err(ApiError::bad_request(format!(
            "the prompt is {} bytes, more than the model's context can hold in tokens (at most \
             {most} bytes); send a shorter prompt",
            prompt.len()
        ))
        .with_status(400, "context_length_exceeded"));
    }
    let encoder = encoder.clone();
    let started = Instant::now();
    let encoded = tokio::task::spawn_blocking(move || {
        crate::error::contain_panic(|| encoder.encode(&prompt))
    })
    .await;
    match encoded {
        Ok(Ok(Ok(ids))) => Ok(Tokenized {
            ids,
            tokenize_ms: started.elapsed().as_secs_f64() * 1e3,
        }),
        Ok(Ok(Err(e))) => Err(refusal(e)),
        Ok(Err(panic)) => Err(ApiError::server(format!(
            "the tokenizer failed reading this request ({panic})"
        ))),
        Err(e) => Err(ApiError::server(format!(
            "the tokenizer failed reading this request ({e})"
        ))),
    }
}

async fn complete(
    app: Arc<App>,
    kind: Kind,
    prompt: String,
    templated: bool,
    params: &Params,
    received: Instant,
) -> Response {
    let context = app.info.context_length;
    let seed = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(42, |d| d.as_nanos() as u64);
    let checked = match params.check(context, seed) {
        Ok(c) => c,
        Err(e) => return e.into_response(),
    };
    let prompt = match tokenize(&app.encoder, prompt).await {
        Ok(prompt) => prompt,
        Err(e) => return e.into_response(),
    };
    let (updates, inbox) = tokio_mpsc::unbounded_channel();
    let (accepted, is_accepted) = oneshot::channel();
    let read = Arc::new(AtomicU64::new(0));
    let job = Job {
        read: read.clone(),
        prompt,
        templated,
        options: GenerateOptions {
            max_tokens: checked
                .max_tokens
                .unwrap_or(DEFAULT_MAX_TOKENS_SERVED.min(context)),
            sampling: checked.sampling,
            queued_ms: 0.0,
            chat: false,
            logprobs: checked.logprobs,
        },
        max_tokens_asked: checked.max_tokens,
        ignore_eos: checked.ignore_eos,
        stops: checked.stops.clone(),
        received,
        updates,
        accepted,
    };
    let stopped = || ApiError::server("the engine has stopped").with_status(503, "unavailable");
    if app.commands.send(Command::Submit(Box::new(job))).is_err() {
        return stopped().into_response();
    }
    let id = match is_accepted.await {
        Ok(Ok(id)) => id,
        Ok(Err(e)) => return e.into_response(),
        Err(_) => return stopped().into_response(),
    };
    let created = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let answer = Answer {
        reply: Reply::new(kind, &checked, id, app.info.name.clone(), created).with_meter_in_usage(),
        inbox,
        read,
        guard: CancelGuard {
            id,
            commands: app.commands.clone(),
            armed: true,
        },
        pending: VecDeque::new(),
        opened: false,
        ended: false,
    };
    if checked.stream {
        let stream = futures_lite::stream::unfold(answer, |mut answer| async move {
            answer
                .next_sse()
                .await
                .map(|e| (Ok::<_, Infallible>(e), answer))
        });
        Sse::new(stream)
            .keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
            .into_response()
    } else {
        answer.whole().await
    }
}

/// Ends the request in the engine when the client leaves (the stream or the handler is dropped
/// before the end), so its place and KV cache go to the next.
struct CancelGuard {
    id: u64,
    commands: mpsc::Sender<Command>,
    armed: bool,
}

impl CancelGuard {
    fn cancel(&mut self, why: &'static str) {
        if self.armed {
            self.armed = false;
            let _ = self.commands.send(Command::Cancel { id: self.id, why });
        }
    }
}

impl Drop for CancelGuard {
    fn drop(&mut self) {
        self.cancel("abort");
    }
}

/// One request's answer: the engine's updates, as they come, made into OpenAI's chunks by its
/// [`Reply`] and sent as Server-Sent Events (or whole).
struct Answer {
    reply: Reply,
    inbox: tokio_mpsc::UnboundedReceiver<Update>,
    /// Events taken from `inbox`, for the engine's write timeout ([`Job::read`]).
    read: Arc<AtomicU64>,
    guard: CancelGuard,
    /// Stream events made but not yet sent.
    pending: VecDeque<SseEvent>,
    /// Whether chat's first chunk (the role) has been sent: at once, before the prefill.
    opened: bool,
    ended: bool,
}

/// What the next update came to.
enum Step {
    /// Chunks that may be sent now (none, often).
    Chunks(Vec<Completion>),
    Done(Box<Report>),
    Failed(ApiError),
}

fn sse(completion: &Completion) -> SseEvent {
    SseEvent::default().data(serde_json::to_string(completion).expect("a chunk serializes"))
}

impl Answer {
    async fn next(&mut self) -> Step {
        match self.inbox.recv().await {
            Some(Update::Event(event)) => {
                self.read.fetch_add(1, Ordering::Relaxed);
                Step::Chunks(self.reply.event(&event))
            }
            Some(Update::Done(report)) => {
                self.guard.armed = false;
                Step::Done(report)
            }
            Some(Update::Failed(e)) => {
                self.guard.armed = false;
                Step::Failed(e)
            }
            None => {
                self.guard.armed = false;
                Step::Failed(ApiError::server("the engine stopped while answering"))
            }
        }
    }

    /// The next Server-Sent Event, or `None` after `[DONE]` (or an error).
    async fn next_sse(&mut self) -> Option<SseEvent> {
        if !self.opened {
            // Chat's role chunk goes at once, before the prefill, as OpenAI's does.
            self.opened = true;
            self.pending.extend(self.reply.opening().iter().map(sse));
        }
        loop {
            if let Some(event) = self.pending.pop_front() {
                return Some(event);
            }
            if self.ended {
                return None;
            }
            match self.next().await {
                Step::Chunks(chunks) => self.pending.extend(chunks.iter().map(sse)),
                Step::Done(report) => {
                    self.ended = true;
                    self.pending.extend(self.reply.end(*report).iter().map(sse));
                    self.pending.push_back(SseEvent::default().data("[DONE]"));
                }
                Step::Failed(e) => {
                    self.ended = true;
                    return Some(SseEvent::default().data(e.body()));
                }
            }
        }
    }

    /// The whole answer as one JSON response.
    async fn whole(mut self) -> Response {
        loop {
            match self.next().await {
                Step::Chunks(_) => {}
                Step::Failed(e) => return e.into_response(),
                Step::Done(report) => {
                    let whole = self.reply.end(*report).pop().expect("a whole answer");
                    return axum::Json(whole).into_response();
                }
            }
        }
    }
}

/// The memory the request bodies being read may hold together: each request holds, from its
/// headers to its handler's answer, a share as large as its body may be (its `Content-Length`, or
/// [`MAX_BODY_BYTES`] when it does not say), counted in KiB; a request that does not fit beside
/// the others' gets 503 at once rather than waiting with its connection open. Without it, 4,096
/// connections each sending a 4 MiB body would hold 16 GiB.
#[derive(Clone)]
pub struct BodyBudget {
    kib: Arc<tokio::sync::Semaphore>,
    /// The budget as a person reads it (`64.0 MB`).
    said: String,
}

impl BodyBudget {
    pub fn new(bytes: usize, said: String) -> BodyBudget {
        let kib = (bytes / 1024).clamp(1, tokio::sync::Semaphore::MAX_PERMITS);
        BodyBudget {
            kib: Arc::new(tokio::sync::Semaphore::new(kib)),
            said,
        }
    }

    /// The middleware: a request with a body runs while its share is held.
    pub async fn admit(
        State(budget): State<BodyBudget>,
        request: axum::extract::Request,
        next: axum::middleware::Next,
    ) -> Response {
        let declared = request
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse::<usize>().ok());
        let chunked = request.headers().contains_key(header::TRANSFER_ENCODING);
        let bytes = match declared {
            Some(n) => n.min(MAX_BODY_BYTES),
            None if chunked => MAX_BODY_BYTES,
            None => 0,
        };
        if bytes == 0 {
            return next.run(request).await;
        }
        let kib = u32::try_from(bytes.div_ceil(1024)).unwrap_or(u32::MAX);
        match budget.kib.clone().try_acquire_many_owned(kib) {
            Ok(_held) => next.run(request).await,
            Err(_) => {
                let mut response = ApiError::server(format!(
                    "the server is reading other request bodies and its budget for them ({}, \
                     --body-memory) is in use; send again in a moment",
                    budget.said
                ))
                .with_status(503, "server_busy")
                .into_response();
                response.headers_mut().insert(
                    header::RETRY_AFTER,
                    axum::http::HeaderValue::from_static("1"),
                );
                response
            }
        }
    }
}
