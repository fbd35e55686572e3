//! Log probabilities in OpenAI's shapes: a chat choice's `logprobs.content` entries (token,
//! logprob, bytes, top_logprobs) and completions' parallel lists, from the engine's
//! [`TokenLogprobs`] (`serve` and the page's `chat.completions.create` answer with them).

use serde::Serialize;

use crate::decode::TokenLogprobs;

/// A choice's (or a chunk's) tokens with their log probabilities, in the endpoint's shape.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum ChoiceLogprobs {
    /// Chat: `{"content": [{token, logprob, bytes, top_logprobs}], "refusal": null}`.
    Chat {
        content: Vec<ChatLogprob>,
        refusal: Option<String>,
    },
    /// Completions: parallel lists, `top_logprobs` a map from token to logprob a position, and
    /// `text_offset` each token's byte offset in the generated text.
    Text {
        tokens: Vec<String>,
        token_logprobs: Vec<f32>,
        top_logprobs: Vec<std::collections::BTreeMap<String, f32>>,
        text_offset: Vec<usize>,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChatLogprob {
    pub token: String,
    pub logprob: f32,
    pub bytes: Vec<u8>,
    pub top_logprobs: Vec<TopLogprob>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TopLogprob {
    pub token: String,
    pub logprob: f32,
    pub bytes: Vec<u8>,
}

impl ChoiceLogprobs {
    /// `tokens` (each with its byte offset in the generated text) in chat's shape (`chat`) or
    /// completions'.
    pub fn new(chat: bool, tokens: &[(usize, TokenLogprobs)]) -> Self {
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        if chat {
            ChoiceLogprobs::Chat {
                content: tokens
                    .iter()
                    .map(|(_, t)| ChatLogprob {
                        token: text(&t.bytes),
                        logprob: t.logprob,
                        bytes: t.bytes.clone(),
                        top_logprobs: t
                            .top
                            .iter()
                            .map(|a| TopLogprob {
                                token: text(&a.bytes),
                                logprob: a.logprob,
                                bytes: a.bytes.clone(),
                            })
                            .collect(),
                    })
                    .collect(),
                refusal: None,
            }
        } else {
            ChoiceLogprobs::Text {
                tokens: tokens.iter().map(|(_, t)| text(&t.bytes)).collect(),
                token_logprobs: tokens.iter().map(|(_, t)| t.logprob).collect(),
                top_logprobs: tokens
                    .iter()
                    .map(|(_, t)| {
                        // Likeliest last, so that of two tokens with one text it is kept.
                        t.top
                            .iter()
                            .rev()
                            .map(|a| (text(&a.bytes), a.logprob))
                            .collect()
                    })
                    .collect(),
                text_offset: tokens.iter().map(|(at, _)| *at).collect(),
            }
        }
    }
}
