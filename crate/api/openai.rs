//! OpenAI's chat and text completions protocol, as llama.cpp's server, vLLM and Ollama speak it:
//! the requests we read and the responses, stream chunks and errors we write. One set of types
//! for every front end that speaks it (`tokenometer serve` natively).
//!
//! Reading is lenient where the protocol is: unknown fields are ignored, `content` may be a string
//! or an array of text parts, `stop` a string or an array, `prompt` a string or an array of one.
//! Everything else that is wrong is an [`ApiError`] naming the field, in one sentence.

use serde::{Deserialize, Serialize};

pub use crate::api::logprobs::ChoiceLogprobs;
use crate::decode::{MAX_TOP_LOGPROBS, Sampling, StopReason};
use crate::error::clip;
use crate::meter::LlamaTimings;

/// The most stop strings a request may give (OpenAI's limit).
pub const MAX_STOPS: usize = 4;
/// The most tokens a request generates when it gives no `max_tokens` (within the context): a
/// client that forgets it reserves this much KV cache, not the whole context.
pub const DEFAULT_MAX_TOKENS_SERVED: usize = 1024;
/// The longest stop string, in bytes (a stop string is matched against every token's text).
pub const MAX_STOP_BYTES: usize = 256;

/// `POST /v1/chat/completions`.
#[derive(Debug, Clone, Deserialize)]
pub struct ChatRequest {
    #[serde(default)]
    pub model: Option<String>,
    pub messages: Vec<Message>,
    #[serde(flatten)]
    pub params: Params,
}

/// `POST /v1/completions`.
#[derive(Debug, Clone, Deserialize)]
pub struct CompletionRequest {
    #[serde(default)]
    pub model: Option<String>,
    pub prompt: Prompt,
    #[serde(flatten)]
    pub params: Params,
}

/// A chat message; only its text is read.
#[derive(Debug, Clone, Deserialize)]
pub struct Message {
    pub role: String,
    #[serde(default)]
    pub content: Option<Content>,
}

/// A message's content: a string, or parts of which the text ones are read.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Content {
    Text(String),
    Parts(Vec<Part>),
}

#[derive(Debug, Clone, Deserialize)]
pub struct Part {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub text: Option<String>,
}

/// A completion's prompt: a string, or an array holding one string.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Prompt {
    Text(String),
    Texts(Vec<String>),
}

/// A string or an array of strings (`stop`).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct StreamOptions {
    #[serde(default)]
    pub include_usage: bool,
    /// vLLM's extension: `usage` on every chunk, so a client counts each chunk's tokens.
    #[serde(default)]
    pub continuous_usage_stats: bool,
}

/// The parameters both endpoints take.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Params {
    #[serde(default)]
    pub stream: bool,
    #[serde(default)]
    pub stream_options: Option<StreamOptions>,
    #[serde(default)]
    pub max_tokens: Option<i64>,
    #[serde(default)]
    pub max_completion_tokens: Option<i64>,
    #[serde(default)]
    pub temperature: Option<f32>,
    #[serde(default)]
    pub top_p: Option<f32>,
    #[serde(default)]
    pub seed: Option<i64>,
    #[serde(default)]
    pub stop: Option<OneOrMany>,
    #[serde(default)]
    pub n: Option<i64>,
    /// vLLM's and llama.cpp's extension: go on past end-of-text (load testers ask for it).
    #[serde(default)]
    pub ignore_eos: Option<bool>,
    /// Chat: `true` for each token's log probability; completions: the number of alternatives.
    #[serde(default)]
    pub logprobs: Option<serde_json::Value>,
    /// Chat: how many alternatives each token lists (0 to 20), with `logprobs: true`.
    #[serde(default)]
    pub top_logprobs: Option<serde_json::Value>,
    /// OpenAI's fields this server does not implement: read only to refuse a value that asks for
    /// something (their defaults pass), so a client never gets a 200 that quietly ignored them.
    #[serde(flatten)]
    pub unsupported: Unsupported,
}

/// OpenAI's request fields that this server does not implement (see [`Unsupported::refuse`]).
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Unsupported {
    #[serde(default)]
    pub tools: Option<serde_json::Value>,
    #[serde(default)]
    pub tool_choice: Option<serde_json::Value>,
    #[serde(default)]
    pub functions: Option<serde_json::Value>,
    #[serde(default)]
    pub function_call: Option<serde_json::Value>,
    #[serde(default)]
    pub response_format: Option<serde_json::Value>,
    #[serde(default)]
    pub frequency_penalty: Option<serde_json::Value>,
    #[serde(default)]
    pub presence_penalty: Option<serde_json::Value>,
    #[serde(default)]
    pub logit_bias: Option<serde_json::Value>,
    #[serde(default)]
    pub echo: Option<serde_json::Value>,
    #[serde(default)]
    pub best_of: Option<serde_json::Value>,
    #[serde(default)]
    pub suffix: Option<serde_json::Value>,
}

impl Unsupported {
    /// 400 naming the first field whose value asks for what this server does not do; a field
    /// absent, null, or at OpenAI's default (false, 0, 1 for `best_of`, an empty list or object,
    /// `"none"` or `"auto"` with no tools, a `text` response format, an empty suffix) passes.
    pub fn refuse(&self) -> Result<(), ApiError> {
        use serde_json::Value;
        let default = |v: &Value| match v {
            Value::Null => true,
            Value::Bool(b) => !b,
            Value::Number(n) => n.as_f64() == Some(0.0),
            Value::String(s) => s.is_empty(),
            Value::Array(a) => a.is_empty(),
            Value::Object(o) => o.is_empty(),
        };
        let fields: [(&'static str, &Option<Value>, &str); 11] = [
            ("tools", &self.tools, "this server does not call tools"),
            (
                "tool_choice",
                &self.tool_choice,
                "this server does not call tools",
            ),
            (
                "functions",
                &self.functions,
                "this server does not call functions",
            ),
            (
                "function_call",
                &self.function_call,
                "this server does not call functions",
            ),
            (
                "response_format",
                &self.response_format,
                "this server answers in plain text only",
            ),
            (
                "frequency_penalty",
                &self.frequency_penalty,
                "this server applies no penalties",
            ),
            (
                "presence_penalty",
                &self.presence_penalty,
                "this server applies no penalties",
            ),
            (
                "logit_bias",
                &self.logit_bias,
                "this server applies no logit bias",
            ),
            ("echo", &self.echo, "this server does not echo the prompt"),
            (
                "best_of",
                &self.best_of,
                "this server generates one choice a request",
            ),
            ("suffix", &self.suffix, "this server does not insert text"),
        ];
        for (field, value, why) in fields {
            let Some(value) = value else { continue };
            let passes = default(value)
                || match field {
                    "best_of" => value.as_f64() == Some(1.0),
                    "tool_choice" | "function_call" => {
                        matches!(value.as_str(), Some("none" | "auto"))
                            && self.tools.as_ref().is_none_or(default)
                            && self.functions.as_ref().is_none_or(default)
                    }
                    "response_format" => value.get("type").and_then(Value::as_str) == Some("text"),
                    _ => false,
                };
            if !passes {
                let shown = clip(&value.to_string()).to_string();
                return Err(ApiError::invalid(
                    field,
                    format!("{field} is {shown}: {why}; leave it out"),
                ));
            }
        }
        Ok(())
    }
}

/// What a request asks the engine for, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Checked {
    /// The most tokens to generate, as asked; `None`: [`DEFAULT_MAX_TOKENS_SERVED`] (within the
    /// context).
    pub max_tokens: Option<usize>,
    pub sampling: Sampling,
    pub stops: Vec<String>,
    pub ignore_eos: bool,
    pub stream: bool,
    pub include_usage: bool,
    /// Usage on every chunk (vLLM's `continuous_usage_stats`).
    pub continuous_usage: bool,
    /// Each token's log probability with this many alternatives (`None`: not asked).
    pub logprobs: Option<usize>,
}

impl Params {
    /// The parameters checked against the context served (`context` tokens); `seed` is the
    /// one used when the request gives none. OpenAI's defaults: temperature 1 and top-p 1.
    pub fn check(&self, context: usize, seed: u64) -> Result<Checked, ApiError> {
        if let Some(n) = self.n
            && n != 1
        {
            return Err(ApiError::invalid(
                "n",
                format!("n is {n}; this server generates one choice a request (n: 1)"),
            ));
        }
        let (field, max) = match (self.max_completion_tokens, self.max_tokens) {
            (Some(m), _) => ("max_completion_tokens", Some(m)),
            (None, m) => ("max_tokens", m),
        };
        let max_tokens = match max {
            None => None,
            Some(m) if m < 1 => {
                return Err(ApiError::invalid(
                    field,
                    format!("{field} is {m}; ask for at least 1 token"),
                ));
            }
            Some(m) if m as u64 > context as u64 => {
                return Err(ApiError::invalid(
                    field,
                    format!("{field} is {m} but this server's context holds {context} tokens"),
                ));
            }
            Some(m) => Some(m as usize),
        };
        let temperature = self.temperature.unwrap_or(1.0);
        if !(temperature.is_finite() && (0.0..=2.0).contains(&temperature)) {
            return Err(ApiError::invalid(
                "temperature",
                format!("temperature is {temperature}; use 0 (greedy) to 2"),
            ));
        }
        let top_p = self.top_p.unwrap_or(1.0);
        if !(top_p.is_finite() && top_p > 0.0 && top_p <= 1.0) {
            return Err(ApiError::invalid(
                "top_p",
                format!("top_p is {top_p}; use a number above 0 and at most 1"),
            ));
        }
        let stops = match &self.stop {
            None => Vec::new(),
            Some(OneOrMany::One(s)) => vec![s.clone()],
            Some(OneOrMany::Many(v)) => v.clone(),
        };
        if stops.len() > MAX_STOPS {
            return Err(ApiError::invalid(
                "stop",
                format!("{} stop strings given; at most {MAX_STOPS}", stops.len()),
            ));
        }
        if stops.iter().any(String::is_empty) {
            return Err(ApiError::invalid(
                "stop",
                "a stop string is empty; give text to stop at",
            ));
        }
        if let Some(long) = stops.iter().find(|s| s.len() > MAX_STOP_BYTES) {
            return Err(ApiError::invalid(
                "stop",
                format!(
                    "a stop string is {} bytes; at most {MAX_STOP_BYTES}",
                    long.len()
                ),
            ));
        }
        self.unsupported.refuse()?;
        let logprobs = self.logprobs()?;
        Ok(Checked {
            logprobs,
            max_tokens,
            sampling: Sampling {
                temperature,
                top_p,
                seed: self.seed.map_or(seed, |s| s as u64),
            },
            stops,
            ignore_eos: self.ignore_eos.unwrap_or(false),
            stream: self.stream,
            include_usage: self
                .stream_options
                .as_ref()
                .is_some_and(|o| o.include_usage),
            continuous_usage: self
                .stream_options
                .as_ref()
                .is_some_and(|o| o.continuous_usage_stats),
        })
    }
}

impl Params {
    /// `logprobs` and `top_logprobs` as the number of alternatives a token lists: chat's
    /// `logprobs: true` with `top_logprobs: N` (N from 0 to 20, 0 when absent), completions'
    /// `logprobs: N`; `None` when neither asks.
    fn logprobs(&self) -> Result<Option<usize>, ApiError> {
        use serde_json::Value;
        let count = |field: &'static str, v: &Value| match v.as_u64() {
            Some(n) if n as usize <= MAX_TOP_LOGPROBS => Ok(n as usize),
            _ => Err(ApiError::invalid(
                field,
                format!(
                    "{field} is {}; give a whole number from 0 to {MAX_TOP_LOGPROBS}",
                    clip(&v.to_string())
                ),
            )),
        };
        let top = match &self.top_logprobs {
            None | Some(Value::Null) => None,
            Some(v) => Some(count("top_logprobs", v)?),
        };
        match &self.logprobs {
            None | Some(Value::Null) | Some(Value::Bool(false)) => match top {
                Some(n) if n > 0 => Err(ApiError::invalid(
                    "top_logprobs",
                    format!("top_logprobs is {n} but logprobs is not true; set logprobs: true"),
                )),
                _ => Ok(None),
            },
            Some(Value::Bool(true)) => Ok(Some(top.unwrap_or(0))),
            Some(v) => count("logprobs", v).map(Some),
        }
    }
}

impl ChatRequest {
    /// The conversation as `(role, text)` pairs; roles are `system`, `developer` (read as
    /// system), `user` and `assistant`.
    pub fn turns(&self) -> Result<Vec<(&str, String)>, ApiError> {
        if self.messages.is_empty() {
            return Err(ApiError::invalid(
                "messages",
                "messages is empty; send at least one user message",
            ));
        }
        self.messages
            .iter()
            .enumerate()
            .map(|(i, m)| {
                let role = match m.role.as_str() {
                    "developer" => "system",
                    r @ ("system" | "user" | "assistant") => r,
                    other => {
                        return Err(ApiError::invalid(
                            "messages",
                            format!(
                                "messages[{i}] has role {:?}; use system, user or assistant",
                                clip(other)
                            ),
                        ));
                    }
                };
                let text = match &m.content {
                    // OpenAI refuses a user message without content; an assistant's may have
                    // none (it called a tool).
                    None if role == "user" => {
                        return Err(ApiError::invalid(
                            "messages",
                            format!(
                                "messages[{i}] is a user message without content; give its text"
                            ),
                        ));
                    }
                    None => String::new(),
                    Some(Content::Text(t)) => t.clone(),
                    Some(Content::Parts(parts)) => {
                        if let Some(p) = parts.iter().find(|p| p.kind != "text") {
                            return Err(ApiError::invalid(
                                "messages",
                                format!(
                                    "messages[{i}] has a {:?} part; this model reads text only",
                                    clip(&p.kind)
                                ),
                            ));
                        }
                        parts.iter().filter_map(|p| p.text.as_deref()).collect()
                    }
                };
                Ok((role, text))
            })
            .collect()
    }
}

impl CompletionRequest {
    /// The prompt's text.
    pub fn text(&self) -> Result<&str, ApiError> {
        match &self.prompt {
            Prompt::Text(t) => Ok(t),
            Prompt::Texts(v) if v.len() == 1 => Ok(&v[0]),
            Prompt::Texts(v) => Err(ApiError::invalid(
                "prompt",
                format!(
                    "prompt holds {} strings; send one prompt a request",
                    v.len()
                ),
            )),
        }
    }
}

/// Why a choice ended, in OpenAI's words: `stop` (end of text or a stop string) or `length` (max
/// tokens or a full context).
pub fn finish_reason(reason: StopReason) -> Option<&'static str> {
    match reason {
        StopReason::Eos | StopReason::Bos | StopReason::Stop => Some("stop"),
        StopReason::MaxTokens | StopReason::ContextFull => Some("length"),
        StopReason::Cancelled => None,
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Usage {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    pub total_tokens: usize,
    /// The page's API: the meter's report (every figure, with its conditions), as web-llm puts
    /// its own figures under `usage.extra`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub extra: Option<Box<crate::meter::Report>>,
}

impl Usage {
    pub fn new(prompt_tokens: usize, completion_tokens: usize) -> Self {
        Self {
            prompt_tokens,
            completion_tokens,
            total_tokens: prompt_tokens + completion_tokens,
            extra: None,
        }
    }
}

/// The `message` of a chat choice, or a stream chunk's `delta`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Delta {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
}

/// One choice of a response or chunk: chat's `message` or `delta`, or completions' `text`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Choice {
    pub index: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<Delta>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delta: Option<Delta>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// The choice's tokens' log probabilities, when asked (null otherwise, as OpenAI sends it).
    pub logprobs: Option<ChoiceLogprobs>,
    pub finish_reason: Option<&'static str>,
}

/// A whole response (`chat.completion`, `text_completion`) or a stream chunk
/// (`chat.completion.chunk`, `text_completion`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Completion {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub model: String,
    pub system_fingerprint: String,
    pub choices: Vec<Choice>,
    /// A response's, or the stream's last chunk's when `stream_options.include_usage` asked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// llama.cpp's timings: a response's, and the stream's last chunk's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timings: Option<LlamaTimings>,
}

/// Which endpoint a response answers, for its objects' names and choices' shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Chat,
    Text,
}

impl Kind {
    /// A choice carrying `content` (and the role, for chat's first chunk or a whole message).
    pub fn choice(
        self,
        stream: bool,
        role: bool,
        content: Option<String>,
        finish: Option<&'static str>,
    ) -> Choice {
        let delta = Delta {
            role: role.then_some("assistant"),
            content,
        };
        let (message, delta, text) = match (self, stream) {
            (Kind::Chat, false) => (Some(delta), None, None),
            (Kind::Chat, true) => (None, Some(delta), None),
            (Kind::Text, _) => (None, None, Some(delta.content.unwrap_or_default())),
        };
        Choice {
            index: 0,
            message,
            delta,
            text,
            logprobs: None,
            finish_reason: finish,
        }
    }

    pub fn object(self, stream: bool) -> &'static str {
        match (self, stream) {
            (Kind::Chat, false) => "chat.completion",
            (Kind::Chat, true) => "chat.completion.chunk",
            (Kind::Text, _) => "text_completion",
        }
    }
}

/// `GET /v1/models`.
#[derive(Debug, Clone, Serialize)]
pub struct ModelList {
    pub object: &'static str,
    pub data: Vec<ModelCard>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ModelCard {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub owned_by: &'static str,
    /// The model's context, in tokens (vLLM's `max_model_len`).
    pub max_model_len: usize,
}

/// An error in OpenAI's shape: `{"error": {"message", "type", "param", "code"}}`, with its status.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub status: u16,
    pub message: String,
    pub kind: &'static str,
    pub param: Option<&'static str>,
    pub code: Option<&'static str>,
}

#[derive(Serialize)]
struct ErrorBody<'a> {
    error: ErrorFields<'a>,
}

#[derive(Serialize)]
struct ErrorFields<'a> {
    message: &'a str,
    #[serde(rename = "type")]
    kind: &'a str,
    param: Option<&'a str>,
    code: Option<&'a str>,
}

impl ApiError {
    /// 400: a field's value is wrong.
    pub fn invalid(param: &'static str, message: impl Into<String>) -> Self {
        Self {
            status: 400,
            message: message.into(),
            kind: "invalid_request_error",
            param: Some(param),
            code: None,
        }
    }

    /// 400 about the request as a whole.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self {
            status: 400,
            message: message.into(),
            kind: "invalid_request_error",
            param: None,
            code: None,
        }
    }

    pub fn with_status(mut self, status: u16, code: &'static str) -> Self {
        self.status = status;
        self.code = Some(code);
        self
    }

    /// 500: the engine failed this request.
    pub fn server(message: impl Into<String>) -> Self {
        Self {
            status: 500,
            message: message.into(),
            kind: "server_error",
            param: None,
            code: None,
        }
    }

    /// The JSON body.
    pub fn body(&self) -> String {
        serde_json::to_string(&ErrorBody {
            error: ErrorFields {
                message: &self.message,
                kind: self.kind,
                param: self.param,
                code: self.code,
            },
        })
        .expect("an error serializes")
    }
}
