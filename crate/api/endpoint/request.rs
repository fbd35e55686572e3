//! What a request to an endpoint sends, and what its HTTP failures say: pure, so that the CLI's
//! client and the page's worker (which fetches in JavaScript) send the same body and say the same
//! sentence.

use serde::Serialize;
use serde_json::Value;

use crate::api::endpoint::stream::error_message;
use crate::decode::Sampling;
use crate::error::clip_to;

/// A request's JSON, as the protocol spells it (a struct rather than `json!`: the page's wasm is
/// on a size budget, and this shares the serializer every report uses).
#[derive(Serialize)]
struct Body<'a> {
    model: &'a str,
    stream: bool,
    max_tokens: usize,
    temperature: f32,
    top_p: f32,
    seed: u64,
    stream_options: StreamOptions,
    #[serde(skip_serializing_if = "Option::is_none")]
    messages: Option<[Message<'a>; 1]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    prompt: Option<&'a str>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    ignore_eos: bool,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    timings_per_token: bool,
    /// Chat: `true`, with `top_logprobs` the alternatives; a completion: the alternatives' count.
    #[serde(skip_serializing_if = "Option::is_none")]
    logprobs: Option<Logprobs>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_logprobs: Option<usize>,
}

/// `logprobs` as each API spells it.
#[derive(Serialize)]
#[serde(untagged)]
enum Logprobs {
    Chat(bool),
    Completion(usize),
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    continuous_usage_stats: bool,
}

#[derive(Serialize)]
struct Message<'a> {
    role: &'a str,
    content: &'a str,
}

/// What one request asks for.
#[derive(Debug, Clone)]
pub struct EndpointRequest {
    pub prompt: String,
    /// `/v1/chat/completions` with the prompt as the user's message; otherwise `/v1/completions`
    /// with the prompt as it is.
    pub chat: bool,
    pub max_tokens: usize,
    pub sampling: Sampling,
    /// Ask the server to go on past end-of-text (vLLM, llama.cpp and `tokenometer serve` take it).
    pub ignore_eos: bool,
    /// Ask for each token's log probability and this many likeliest alternatives (the page's
    /// token inspector); `None`: none.
    pub logprobs: Option<usize>,
}

impl EndpointRequest {
    /// The JSON body for `model`: streamed, with the final usage, and with `counts` the fields
    /// that ask for each chunk's count (vLLM's `continuous_usage_stats`, llama.cpp's
    /// `timings_per_token`), which a strict server may refuse (then ask again without).
    pub fn body(&self, model: &str, counts: bool) -> String {
        let body = Body {
            model,
            stream: true,
            max_tokens: self.max_tokens,
            temperature: self.sampling.temperature,
            top_p: self.sampling.top_p,
            seed: self.sampling.seed,
            stream_options: StreamOptions {
                include_usage: true,
                continuous_usage_stats: counts,
            },
            messages: self.chat.then(|| {
                [Message {
                    role: "user",
                    content: &self.prompt,
                }]
            }),
            prompt: (!self.chat).then_some(self.prompt.as_str()),
            ignore_eos: self.ignore_eos,
            timings_per_token: counts,
            logprobs: self.logprobs.map(|n| match self.chat {
                true => Logprobs::Chat(true),
                false => Logprobs::Completion(n),
            }),
            top_logprobs: self.logprobs.filter(|_| self.chat),
        };
        serde_json::to_string(&body).expect("a request body serializes")
    }

    /// The path under the API's base this request goes to.
    pub fn path(&self) -> &'static str {
        if self.chat {
            "chat/completions"
        } else {
            "completions"
        }
    }
}

/// An HTTP failure as one sentence: what the status means for the user, and the server's words.
pub fn http_failure(url: &str, status: u16, body: &str) -> String {
    let said = serde_json::from_slice::<Value>(body.as_bytes())
        .ok()
        .and_then(|v| v.get("error").and_then(error_message))
        .unwrap_or_else(|| clip_to(body.trim(), 240));
    let separator = if said.is_empty() { "" } else { ": " };
    // One sentence shape, its ending chosen by status (one format keeps the page's wasm smaller).
    let (what, then) = match status {
        401 | 403 => (
            "refused the request",
            "; give the key in the environment variable --api-key-env names (the page: its key \
             field)",
        ),
        404 => (
            "was not found",
            "; is the URL the API's base (ending in /v1), and the model's name one it serves?",
        ),
        429 => (
            "was refused: the server is busy",
            "; use fewer users or a slower arrival",
        ),
        500..=599 => ("failed on the server's side", ""),
        _ => ("answered", ""),
    };
    format!("{url} {what} ({status}{separator}{said}){then}")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Log probabilities as each API asks for them: chat `logprobs: true` with `top_logprobs`, a
    /// completion `logprobs: N`; none unless asked.
    #[test]
    fn logprobs_are_asked_as_each_api_spells_them() {
        let mut r = EndpointRequest {
            prompt: "Hi".into(),
            chat: true,
            max_tokens: 4,
            sampling: Sampling::default(),
            ignore_eos: false,
            logprobs: Some(5),
        };
        let body =
            |r: &EndpointRequest| -> Value { serde_json::from_str(&r.body("m", false)).unwrap() };
        let chat = body(&r);
        assert_eq!(
            (&chat["logprobs"], &chat["top_logprobs"]),
            (&Value::Bool(true), &Value::from(5))
        );
        r.chat = false;
        let completion = body(&r);
        assert_eq!(completion["logprobs"], Value::from(5));
        assert!(completion.get("top_logprobs").is_none());
        r.logprobs = None;
        assert!(body(&r).get("logprobs").is_none());
    }
}
