//! An OpenAI-compatible stream, read into the meter's events: each Server-Sent Event's JSON chunk
//! becomes an [`Event::Chunk`] (its text and how many tokens it carried), the end an
//! [`Event::Done`] with the server's own counts. Pure (no clock, no I/O): the caller stamps each
//! read with the time its bytes arrived, so the CLI and the page read streams the same way.
//!
//! Token counts, most trusted first ([`TokenCounts`]): each chunk's own count from the server
//! (vLLM's `continuous_usage_stats` puts a cumulative `usage` on every chunk, llama.cpp's
//! `timings_per_token` a cumulative `timings.predicted_n`), the final `usage`, the model's
//! tokenizer over the chunks' text when the user gave it, else one token a chunk.

use serde_json::Value;

use crate::api::endpoint::sse::{SseEvent, SseParser};
use crate::decode::{ChunkAlternative, ChunkToken, Event, MAX_TOP_LOGPROBS, StopReason};
use crate::error::{clip, clip_to};
use crate::loading::tokenizer::Tokenizer;
use crate::meter::{LlamaTimings, TokenCounts};

/// What one chunk's JSON says, read leniently: every field may be absent, and one of the wrong
/// type counts as absent. Read from a `serde_json::Value` by hand: derived readers for these
/// shapes added 26 kB (gzipped) to the page's wasm, past its size budget.
#[derive(Debug, Default)]
struct Chunk {
    /// Whether `choices` had any (OpenAI's usage chunk has none).
    has_choices: bool,
    choice: ChunkChoice,
    usage: Option<ChunkUsage>,
    timings: Option<LlamaTimings>,
    /// An error object's message.
    error: Option<String>,
}

#[derive(Debug, Default)]
struct ChunkChoice {
    /// `delta.content`, or `/v1/completions`'s `text`.
    content: Option<String>,
    /// `delta.reasoning_content` (DeepSeek's, vLLM's and llama.cpp's name for a thinking model's
    /// reasoning) or `delta.reasoning` (OpenRouter's and newer vLLM's).
    reasoning: Option<String>,
    finish_reason: Option<String>,
    /// The tokens its `logprobs` lists, where there are any.
    logprobs: Vec<ChunkToken>,
}

#[derive(Debug, Clone, Copy, Default)]
struct ChunkUsage {
    prompt_tokens: usize,
    completion_tokens: usize,
}

impl Chunk {
    fn read(v: &Value) -> Chunk {
        let text = |v: &Value, key: &str| v.get(key).and_then(Value::as_str).map(str::to_string);
        let count = |v: &Value, key: &str| v.get(key).and_then(Value::as_u64).unwrap_or(0) as usize;
        let ms = |v: &Value, key: &str| v.get(key).and_then(Value::as_f64).unwrap_or(0.0);
        let choices = v.get("choices").and_then(Value::as_array);
        let choice = choices
            .and_then(|c| c.first())
            .map_or_else(ChunkChoice::default, |c| {
                let delta = c.get("delta").unwrap_or(&Value::Null);
                ChunkChoice {
                    content: text(delta, "content").or_else(|| text(c, "text")),
                    reasoning: text(delta, "reasoning_content")
                        .or_else(|| text(delta, "reasoning")),
                    finish_reason: text(c, "finish_reason"),
                    logprobs: read_logprobs(c),
                }
            });
        Chunk {
            has_choices: choices.is_some_and(|c| !c.is_empty()),
            choice,
            usage: v
                .get("usage")
                .filter(|u| u.is_object())
                .map(|u| ChunkUsage {
                    prompt_tokens: count(u, "prompt_tokens"),
                    completion_tokens: count(u, "completion_tokens"),
                }),
            timings: v.get("timings").filter(|t| t.is_object()).map(|t| {
                LlamaTimings::new(
                    count(t, "prompt_n"),
                    ms(t, "prompt_ms"),
                    count(t, "predicted_n"),
                    ms(t, "predicted_ms"),
                )
            }),
            error: v.get("error").filter(|e| !e.is_null()).map(|e| {
                error_message(e).unwrap_or_else(|| "an error object with no message".to_string())
            }),
        }
    }
}

/// The tokens a choice's `logprobs` lists: a chat answer's `content` (each `{token, logprob,
/// top_logprobs: [{token, logprob}]}`) or a completion's parallel lists (`tokens`,
/// `token_logprobs`, and `top_logprobs` as `{token: logprob}` maps). Entries of another shape are
/// left out; a log probability above 0 is read as 0, and at most [`MAX_TOP_LOGPROBS`]
/// alternatives are kept.
fn read_logprobs(choice: &Value) -> Vec<ChunkToken> {
    let Some(l) = choice.get("logprobs").filter(|l| l.is_object()) else {
        return Vec::new();
    };
    let logprob = |v: &Value| v.as_f64().map(|x| x.min(0.0) as f32);
    let alternative = |text: &str, v: &Value| {
        Some(ChunkAlternative {
            text: text.to_string(),
            logprob: logprob(v)?,
        })
    };
    // Likeliest first, by insertion (a generic sort would add kilobytes to the page's wasm for
    // lists of a few).
    let keep = |listed: Vec<ChunkAlternative>| {
        let mut top: Vec<ChunkAlternative> = Vec::with_capacity(listed.len());
        for a in listed {
            let at = top.iter().position(|b| b.logprob < a.logprob);
            top.insert(at.unwrap_or(top.len()), a);
        }
        top.truncate(MAX_TOP_LOGPROBS);
        top
    };
    if let Some(content) = l.get("content").and_then(Value::as_array) {
        return content
            .iter()
            .filter_map(|t| {
                let top = t.get("top_logprobs").and_then(Value::as_array);
                Some(ChunkToken {
                    text: t.get("token")?.as_str()?.to_string(),
                    logprob: logprob(t.get("logprob")?)?,
                    top: keep(top.map_or_else(Vec::new, |top| {
                        top.iter()
                            .filter_map(|a| {
                                alternative(a.get("token")?.as_str()?, a.get("logprob")?)
                            })
                            .collect()
                    })),
                })
            })
            .collect();
    }
    let list = |key: &str| l.get(key).and_then(Value::as_array);
    let (Some(tokens), Some(logprobs)) = (list("tokens"), list("token_logprobs")) else {
        return Vec::new();
    };
    let tops = list("top_logprobs");
    tokens
        .iter()
        .zip(logprobs)
        .enumerate()
        .filter_map(|(i, (t, p))| {
            let top = tops.and_then(|t| t.get(i)).and_then(Value::as_object);
            Some(ChunkToken {
                text: t.as_str()?.to_string(),
                logprob: logprob(p)?,
                top: keep(top.map_or_else(Vec::new, |top| {
                    top.iter().filter_map(|(k, v)| alternative(k, v)).collect()
                })),
            })
        })
        .collect()
}

/// A stream being read: its parser, its counts so far, and what its end will report.
pub struct StreamReader<'a> {
    sse: SseParser,
    tokenizer: Option<&'a Tokenizer>,
    /// The server's cumulative count at the last chunk that had one.
    last_count: usize,
    /// Chunks with text, and of them those that carried the server's own count.
    text_chunks: usize,
    counted_chunks: usize,
    /// Tokens the chunks were counted as, all told.
    counted: usize,
    final_usage: Option<ChunkUsage>,
    timings: Option<LlamaTimings>,
    finish_reason: Option<String>,
    /// `[DONE]` came.
    done: bool,
    /// Tokens whose log probabilities the server sent.
    logprob_tokens: usize,
    /// The most tokens the request asked for (0: no bound), and the bytes read so far: a server
    /// that streams on past either bound is cut off, so that no stream can run forever (natively;
    /// see `feed`).
    #[cfg_attr(target_arch = "wasm32", allow(dead_code))]
    max_tokens: usize,
    #[cfg_attr(target_arch = "wasm32", allow(dead_code))]
    bytes: usize,
}

/// The most a stream may send in all: far past any answer a metered request asks for.
pub const MAX_STREAM_BYTES: usize = 256 << 20;

/// What a read of the stream gave: events for the meter, and whether the stream has ended.
#[derive(Debug, Default)]
pub struct Read {
    pub events: Vec<Event>,
    pub ended: bool,
}

impl<'a> StreamReader<'a> {
    /// A reader that counts with `tokenizer` when the server gives no counts of its own, for a
    /// request of at most `max_tokens` (0: no bound).
    pub fn new(tokenizer: Option<&'a Tokenizer>, max_tokens: usize) -> Self {
        Self {
            sse: SseParser::new(),
            tokenizer,
            last_count: 0,
            text_chunks: 0,
            counted_chunks: 0,
            counted: 0,
            final_usage: None,
            timings: None,
            finish_reason: None,
            done: false,
            logprob_tokens: 0,
            max_tokens,
            bytes: 0,
        }
    }

    /// Read `bytes` that arrived at `t_ms`. A server's error object mid-stream, or bytes that are
    /// not a stream, are an error in one sentence.
    pub fn feed(&mut self, bytes: &[u8], t_ms: f64) -> Result<Read, String> {
        let events = self.sse.feed(bytes)?;
        let read = self.read_events(events, t_ms)?;
        // Natively only: nobody watches a load test, so a server that never ends its stream would
        // hang it; the page has its Stop button, and its wasm no bytes to spare (this check cost
        // 1.2 kB gzipped there).
        #[cfg(not(target_arch = "wasm32"))]
        {
            self.bytes += bytes.len();
            // Twice the tokens asked for, and some: a count from chunks or a tokenizer may
            // differ a little from the server's; a server that ignores max_tokens does not.
            if self.bytes > MAX_STREAM_BYTES
                || (self.max_tokens > 0 && self.counted > self.max_tokens * 2 + 16)
            {
                return Err(
                    "the server sent far more than the request asked for (twice its \
                            max_tokens, or 256 MiB); the stream was cut off"
                        .to_string(),
                );
            }
        }
        Ok(read)
    }

    /// The connection closed at `t_ms`: whatever was left unended. A stream that closed without
    /// a finish reason or `[DONE]` was cut off: an error, so that its request never counts as
    /// completed.
    pub fn finish(&mut self, t_ms: f64) -> Result<Read, String> {
        let last: Vec<SseEvent> = self.sse.finish().into_iter().collect();
        let read = self.read_events(last, t_ms)?;
        if !self.is_complete() {
            return Err(
                "the stream closed without a finish reason or [DONE]: the answer was cut off"
                    .to_string(),
            );
        }
        Ok(read)
    }

    fn read_events(&mut self, events: Vec<SseEvent>, t_ms: f64) -> Result<Read, String> {
        let mut read = Read::default();
        for e in events {
            if self.done {
                break;
            }
            let data = e.data.trim();
            if data == "[DONE]" {
                self.done = true;
                break;
            }
            if data.is_empty() {
                continue;
            }
            // From bytes, as the tokenizer loader reads JSON: one copy of the reader in the wasm.
            let value: Value = serde_json::from_slice(data.as_bytes()).map_err(|err| {
                format!(
                    "the stream sent {} where a JSON chunk belongs ({err})",
                    clip(data)
                )
            })?;
            let mut chunk = Chunk::read(&value);
            // An error object, or an event named `error` (its data as it came).
            if e.event.as_deref() == Some("error") && chunk.error.is_none() {
                chunk.error = Some(clip_to(data, 240));
            }
            if let Some(error) = &chunk.error {
                return Err(format!("the server reported an error mid-stream: {error}"));
            }
            self.read_chunk(chunk, t_ms, &mut read.events);
        }
        read.ended = self.done;
        Ok(read)
    }

    fn read_chunk(&mut self, chunk: Chunk, t_ms: f64, events: &mut Vec<Event>) {
        // The server's cumulative count, where this chunk has one.
        let cumulative = chunk
            .usage
            .map(|u| u.completion_tokens)
            .or(chunk.timings.as_ref().map(|t| t.predicted_n));
        // OpenAI's usage chunk (no choices) has the whole request's counts; a usage on a chunk
        // with choices, the counts so far (the last one is the total).
        if chunk.usage.is_some() {
            self.final_usage = chunk.usage;
        }
        if chunk.timings.is_some() {
            self.timings = chunk.timings;
        }
        if !chunk.has_choices {
            return;
        }
        let choice = chunk.choice;
        if choice.finish_reason.is_some() {
            self.finish_reason = choice.finish_reason;
        }
        let reasoning = choice.reasoning.unwrap_or_default();
        let content = choice.content.unwrap_or_default();
        // The log probabilities go with the answer's text (or the reasoning's, without any).
        let mut logprobs = choice.logprobs;
        let answered = !content.is_empty();
        for (text, is_reasoning) in [(reasoning, true), (content, false)] {
            if text.is_empty() {
                continue;
            }
            self.text_chunks += 1;
            let tokens = match cumulative {
                Some(n) => {
                    self.counted_chunks += 1;
                    let new = n.saturating_sub(self.last_count);
                    self.last_count = n;
                    new
                }
                None => self
                    .tokenizer
                    .and_then(|t| t.tokens(&text).ok())
                    .map_or(1, |ids| ids.len()),
            };
            self.counted += tokens;
            let listed = match is_reasoning && answered {
                true => Vec::new(),
                false => std::mem::take(&mut logprobs),
            };
            self.logprob_tokens += listed.len();
            events.push(Event::Chunk {
                tokens,
                text,
                t_ms,
                reasoning: is_reasoning,
                logprobs: listed,
            });
        }
    }

    /// Where this stream's counts came from.
    pub fn token_counts(&self) -> TokenCounts {
        if self.text_chunks > 0 && self.counted_chunks == self.text_chunks {
            TokenCounts::ChunkUsage
        } else if self.final_usage.is_some()
            || self.timings.as_ref().is_some_and(|t| t.predicted_n > 0)
        {
            TokenCounts::FinalUsage
        } else if self.tokenizer.is_some() {
            TokenCounts::Tokenizer
        } else {
            TokenCounts::Chunks
        }
    }

    /// llama.cpp's `timings`, when the server sent them.
    pub fn server_timings(&self) -> Option<&LlamaTimings> {
        self.timings.as_ref()
    }

    /// How many tokens the server sent log probabilities for.
    pub fn logprob_tokens(&self) -> usize {
        self.logprob_tokens
    }

    /// Whether `[DONE]` came.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Whether the stream said it was complete: `[DONE]`, or a finish reason (some servers close
    /// after it without `[DONE]`). A stream closed without either was cut off.
    pub fn is_complete(&self) -> bool {
        self.done || self.finish_reason.is_some()
    }

    /// Bytes of the stream that were not comments: what counts as progress.
    pub fn progress(&self) -> u64 {
        self.sse.progress()
    }

    /// The done event at `t_ms`: why it ended (as the server said; `cancelled` when `cancelled`)
    /// and the server's own counts where it gave them.
    pub fn done_event(&self, t_ms: f64, cancelled: bool) -> Event {
        let reason = if cancelled {
            StopReason::Cancelled
        } else {
            match self.finish_reason.as_deref() {
                Some("length") => StopReason::MaxTokens,
                _ => StopReason::Eos,
            }
        };
        let timings = self.timings.as_ref();
        Event::Done {
            reason,
            prompt_tokens: self
                .final_usage
                .map(|u| u.prompt_tokens)
                .or(timings.map(|t| t.prompt_n))
                .unwrap_or(0),
            output_tokens: self
                .final_usage
                .map(|u| u.completion_tokens)
                .or(timings.map(|t| t.predicted_n))
                .filter(|&n| n > 0)
                .unwrap_or(self.counted),
            t_ms,
            trailing_text: String::new(),
        }
    }
}

/// A server's error object's words: OpenAI's `{"message": ...}`, or a string; `None` for other shapes.
pub fn error_message(error: &serde_json::Value) -> Option<String> {
    // Not the object's JSON text: serializing a `Value` would add its serializer to the page's wasm.
    let text = error.get("message").unwrap_or(error).as_str()?;
    Some(clip_to(text, 240))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The answer's text (reasoning apart) the events carry.
    fn answer(events: &[Event]) -> String {
        chunks(events)
            .into_iter()
            .filter(|c| !c.2)
            .map(|c| c.1)
            .collect()
    }

    fn chunks(events: &[Event]) -> Vec<(usize, &str, bool)> {
        events
            .iter()
            .filter_map(|e| match e {
                Event::Chunk {
                    tokens,
                    text,
                    reasoning,
                    ..
                } => Some((*tokens, text.as_str(), *reasoning)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_chat_stream_with_a_role_chunk_empty_deltas_and_final_usage() {
        let mut r = StreamReader::new(None, 0);
        let stream = concat!(
            ": keep-alive\n\n",
            r#"data: {"choices":[{"delta":{"role":"assistant","content":""}}]}"#,
            "\n\n",
            r#"data: {"choices":[{"delta":{"content":"Hello"}}]}"#,
            "\r\n\r\n",
            r#"data: {"choices":[{"delta":{}}]}"#,
            "\n\n",
            r#"data: {"choices":[{"delta":{"content":" world"},"finish_reason":"length"}]}"#,
            "\n\n",
            r#"data: {"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":5}}"#,
            "\n\ndata: [DONE]\n\ndata: {\"ignored\": true}\n\n"
        );
        let read = r.feed(stream.as_bytes(), 10.0).unwrap();
        assert!(read.ended);
        assert_eq!(
            chunks(&read.events),
            vec![(1, "Hello", false), (1, " world", false)]
        );
        assert_eq!(answer(&read.events), "Hello world");
        assert_eq!(r.token_counts(), TokenCounts::FinalUsage);
        match r.done_event(12.0, false) {
            Event::Done {
                reason,
                prompt_tokens,
                output_tokens,
                ..
            } => assert_eq!(
                (reason, prompt_tokens, output_tokens),
                (StopReason::MaxTokens, 7, 5)
            ),
            e => panic!("{e:?}"),
        }
    }

    #[test]
    fn per_chunk_counts_give_each_chunk_its_tokens() {
        // vLLM's continuous usage, one chunk carrying three tokens; then llama.cpp's per-token
        // timings for a completion, with reasoning first.
        let mut r = StreamReader::new(None, 0);
        let s = concat!(
            r#"data: {"choices":[{"delta":{"content":"a"}}],"usage":{"prompt_tokens":3,"completion_tokens":1}}"#,
            "\n\n",
            r#"data: {"choices":[{"delta":{"content":"bcd"}}],"usage":{"prompt_tokens":3,"completion_tokens":4}}"#,
            "\n\n"
        );
        let read = r.feed(s.as_bytes(), 1.0).unwrap();
        assert_eq!(
            chunks(&read.events),
            vec![(1, "a", false), (3, "bcd", false)]
        );
        assert_eq!(r.token_counts(), TokenCounts::ChunkUsage);
        assert!(!read.ended);

        let mut r = StreamReader::new(None, 0);
        let s = concat!(
            r#"data: {"choices":[{"delta":{"reasoning_content":"hmm"}}],"timings":{"prompt_n":4,"predicted_n":2}}"#,
            "\n\n",
            r#"data: {"choices":[{"text":"ok","finish_reason":"stop"}],"timings":{"prompt_n":4,"predicted_n":3}}"#,
            "\n\n"
        );
        let read = r.feed(s.as_bytes(), 1.0).unwrap();
        assert_eq!(
            chunks(&read.events),
            vec![(2, "hmm", true), (1, "ok", false)]
        );
        assert_eq!(r.token_counts(), TokenCounts::ChunkUsage);
        assert_eq!(answer(&read.events), "ok");
        assert!(matches!(
            r.done_event(2.0, false),
            Event::Done {
                reason: StopReason::Eos,
                prompt_tokens: 4,
                output_tokens: 3,
                ..
            }
        ));
    }

    #[test]
    #[cfg(not(target_arch = "wasm32"))]
    fn a_stream_that_goes_on_past_its_request_is_cut_off() {
        let mut r = StreamReader::new(None, 4);
        let chunk = b"data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n";
        let mut result = Ok(Read::default());
        for _ in 0..30 {
            result = r.feed(chunk, 1.0);
            if result.is_err() {
                break;
            }
        }
        let e = result.unwrap_err();
        assert!(
            e.starts_with("the server sent far more than the request asked for"),
            "{e}"
        );
    }

    #[test]
    fn an_error_mid_stream_or_a_foreign_body_is_one_sentence() {
        let mut r = StreamReader::new(None, 0);
        let s = "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: {\"error\":{\"message\":\"out of memory\",\"code\":500}}\n\n";
        let e = r.feed(s.as_bytes(), 1.0).unwrap_err();
        assert_eq!(e, "the server reported an error mid-stream: out of memory");
        let mut r = StreamReader::new(None, 0);
        let e = r.feed(b"data: <html>\n\n", 1.0).unwrap_err();
        assert!(
            e.starts_with("the stream sent <html> where a JSON chunk belongs"),
            "{e}"
        );
        // Without counts of any kind, chunks are counted, and the done event says as many.
        let mut r = StreamReader::new(None, 0);
        r.feed(
            b"data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n",
            1.0,
        )
        .unwrap();
        // Closed with neither a finish reason nor [DONE]: cut off.
        let e = r.finish(2.0).unwrap_err();
        assert!(e.contains("the answer was cut off"), "{e}");
        assert_eq!(r.token_counts(), TokenCounts::Chunks);
        assert!(matches!(
            r.done_event(2.0, true),
            Event::Done {
                reason: StopReason::Cancelled,
                output_tokens: 1,
                ..
            }
        ));
    }

    /// The log probabilities each API sends (chat: `logprobs.content`; completions: the parallel
    /// lists), on the chunk of the answer's text, alternatives likeliest first.
    #[test]
    fn log_probabilities_go_with_their_chunk() {
        let logprobs = |events: &[Event]| -> Vec<Vec<ChunkToken>> {
            events
                .iter()
                .filter_map(|e| match e {
                    Event::Chunk { logprobs, .. } => Some(logprobs.clone()),
                    _ => None,
                })
                .collect()
        };
        let mut r = StreamReader::new(None, 0);
        let chat = concat!(
            r#"data: {"choices":[{"delta":{"content":"Hi there"},"logprobs":{"content":["#,
            r#"{"token":"Hi","logprob":-0.1,"top_logprobs":[{"token":"Hello","logprob":-2.5},{"token":"Hi","logprob":-0.1}]},"#,
            r#"{"token":" there","logprob":-1.5,"top_logprobs":[]},{"token":7,"logprob":-1}]}}]}"#,
            "\n\n",
            r#"data: {"choices":[{"delta":{"content":"!"},"finish_reason":"stop"}]}"#,
            "\n\ndata: [DONE]\n\n"
        );
        let read = r.feed(chat.as_bytes(), 5.0).unwrap();
        let hi = ChunkToken {
            text: "Hi".into(),
            logprob: -0.1,
            top: vec![
                ChunkAlternative {
                    text: "Hi".into(),
                    logprob: -0.1,
                },
                ChunkAlternative {
                    text: "Hello".into(),
                    logprob: -2.5,
                },
            ],
        };
        let there = ChunkToken {
            text: " there".into(),
            logprob: -1.5,
            top: vec![],
        };
        assert_eq!(logprobs(&read.events), vec![vec![hi, there], vec![]]);
        assert_eq!(r.logprob_tokens(), 2);

        let mut r = StreamReader::new(None, 0);
        let completion = concat!(
            r#"data: {"choices":[{"text":" upon","logprobs":{"tokens":[" upon"],"token_logprobs":[0.5],"#,
            r#""top_logprobs":[{" a":-3.0," upon":-0.2}]},"finish_reason":"length"}]}"#,
            "\n\ndata: [DONE]\n\n"
        );
        let read = r.feed(completion.as_bytes(), 5.0).unwrap();
        assert_eq!(
            logprobs(&read.events),
            vec![vec![ChunkToken {
                text: " upon".into(),
                logprob: 0.0,
                top: vec![
                    ChunkAlternative {
                        text: " upon".into(),
                        logprob: -0.2,
                    },
                    ChunkAlternative {
                        text: " a".into(),
                        logprob: -3.0,
                    },
                ],
            }]]
        );
    }
}
