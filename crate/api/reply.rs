//! One request's answer in OpenAI's shapes, built from a run's events: the server's (`serve/`,
//! streamed as Server-Sent Events or sent whole) and the page's `chat.completions.create`
//! (`web/chat.rs`) build theirs here, so both give the same chunks for the same run.

use crate::api::openai::{Checked, ChoiceLogprobs, Completion, Kind, Usage, finish_reason};
use crate::decode::{Event, TokenLogprobs};
use crate::meter::Report;

/// An answer in the making: what has been sent, and what the request asked for.
pub struct Reply {
    pub kind: Kind,
    pub stream: bool,
    include_usage: bool,
    /// Usage on every chunk: the prompt's tokens and those generated so far.
    continuous_usage: bool,
    /// The meter's report under `usage.extra` at the end (the page's API, as web-llm puts its
    /// own figures there).
    meter_in_usage: bool,
    prompt_tokens: usize,
    generated: usize,
    id: String,
    model: String,
    created: u64,
    /// The text so far (a whole answer's).
    text: String,
    /// Whether chat's first chunk, with the role, has been made.
    role_sent: bool,
    /// Whether the request asked for log probabilities.
    logprobs: bool,
    /// Bytes of text so far (a token's `text_offset`).
    text_bytes: usize,
    /// A whole answer's tokens' log probabilities, each with its text's byte offset.
    kept: Vec<(usize, TokenLogprobs)>,
}

impl Reply {
    /// The answer to request `number` for `model`, made at `created` (seconds since the epoch).
    pub fn new(kind: Kind, checked: &Checked, number: u64, model: String, created: u64) -> Self {
        let prefix = match kind {
            Kind::Chat => "chatcmpl",
            Kind::Text => "cmpl",
        };
        Self {
            kind,
            stream: checked.stream,
            include_usage: checked.include_usage,
            continuous_usage: checked.continuous_usage,
            meter_in_usage: false,
            prompt_tokens: 0,
            generated: 0,
            id: format!("{prefix}-{number}"),
            model,
            created,
            text: String::new(),
            role_sent: false,
            logprobs: checked.logprobs.is_some(),
            text_bytes: 0,
            kept: Vec::new(),
        }
    }

    /// Put the meter's report under `usage.extra` in the end's usage.
    pub fn with_meter_in_usage(mut self) -> Self {
        self.meter_in_usage = true;
        self
    }

    fn completion(&self, choices: Vec<crate::api::openai::Choice>) -> Completion {
        let usage = (self.continuous_usage && self.stream)
            .then(|| Usage::new(self.prompt_tokens, self.generated));
        Completion {
            id: self.id.clone(),
            object: self.kind.object(self.stream),
            created: self.created,
            model: self.model.clone(),
            system_fingerprint: concat!("tokenometer-", env!("CARGO_PKG_VERSION")).into(),
            choices,
            usage,
            timings: None,
        }
    }

    /// The stream's chunks for `event`: chat's first chunk names the role (as OpenAI's does), and
    /// each token's text is a chunk of its own (the engine has cut the text at a stop string and
    /// sends only the tokens whose text goes out: `decode/stop.rs`). A whole answer keeps the text
    /// for [`end`](Self::end) and gives none.
    pub fn event(&mut self, event: &Event) -> Vec<Completion> {
        let mut out = self.opening();
        let (text, logprobs) = match event {
            Event::Prefill { prompt_tokens, .. } => {
                self.prompt_tokens = *prompt_tokens;
                return out;
            }
            Event::Token { text, logprobs, .. } => {
                self.generated += 1;
                (text, logprobs.as_deref().filter(|_| self.logprobs))
            }
            Event::Done { trailing_text, .. } => (trailing_text, None),
            _ => return out,
        };
        if text.is_empty() && logprobs.is_none() {
            return out;
        }
        let tokens: Vec<(usize, TokenLogprobs)> = logprobs
            .map(|l| (self.text_bytes, l.clone()))
            .into_iter()
            .collect();
        self.text_bytes += text.len();
        if self.stream {
            let mut choice = self.kind.choice(true, false, Some(text.clone()), None);
            if self.logprobs {
                choice.logprobs = Some(ChoiceLogprobs::new(self.kind == Kind::Chat, &tokens));
            }
            out.push(self.completion(vec![choice]));
        } else {
            self.text.push_str(text);
            self.kept.extend(tokens);
        }
        out
    }

    /// Chat's first chunk, once, before anything else in a stream.
    pub fn opening(&mut self) -> Vec<Completion> {
        if !(self.stream && self.kind == Kind::Chat) || self.role_sent {
            return Vec::new();
        }
        self.role_sent = true;
        let role = self.kind.choice(true, true, Some(String::new()), None);
        vec![self.completion(vec![role])]
    }

    /// The end, from the run's final report: a stream's last chunk (its finish reason and
    /// llama.cpp's timings) and, where `stream_options.include_usage` asked, the usage chunk
    /// (no choices); a whole answer's one response with its usage.
    pub fn end(&mut self, report: Report) -> Vec<Completion> {
        let finish = report.conditions.stop_reason.and_then(finish_reason);
        let mut usage = Usage::new(
            report.conditions.prompt_tokens,
            report.conditions.output_tokens,
        );
        let timings = report.llama_timings();
        if self.meter_in_usage {
            usage.extra = Some(Box::new(report));
        }
        if !self.stream {
            let text = std::mem::take(&mut self.text);
            let mut choice = self.kind.choice(false, true, Some(text), finish);
            if self.logprobs {
                choice.logprobs = Some(ChoiceLogprobs::new(self.kind == Kind::Chat, &self.kept));
            }
            let mut whole = self.completion(vec![choice]);
            whole.usage = Some(usage);
            whole.timings = Some(timings);
            return vec![whole];
        }
        let mut out = self.opening();
        let content = (self.kind == Kind::Text).then(String::new);
        let mut last = self.completion(vec![self.kind.choice(true, false, content, finish)]);
        last.timings = Some(timings.clone());
        out.push(last);
        if self.include_usage {
            let mut tail = self.completion(Vec::new());
            tail.usage = Some(usage);
            tail.timings = Some(timings);
            out.push(tail);
        }
        out
    }
}
