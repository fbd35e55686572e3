//! One request being generated: its prompt, its KV cache, its sampler, its text stream and its
//! stop rules (end-of-text tokens, lengths, and stop strings, matched here so that a stop ends the
//! sequence and only tokens whose text was sent are counted). A [`Scheduler`](crate::decode::scheduler::Scheduler) advances sequences a step at a time;
//! each step hands a sequence the id the model picked for it, and the sequence turns that into
//! its own events.

use std::collections::VecDeque;

use serde::Serialize;

use crate::backend::KvCache;
use crate::decode::events::{Event, GenerateOptions, PromptToken, StopReason};
use crate::decode::logprobs::TokenLogprobs;
use crate::decode::sampling::Sampler;
use crate::decode::speculate::{Drafter, Speculation};
use crate::decode::stop::StopText;
use crate::loading::tokenizer::{TextStream, Tokenizer};

/// An event of one sequence, named by its id (ids count from 0 in the order requests were
/// submitted to a scheduler).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SeqEvent {
    pub seq: usize,
    #[serde(flatten)]
    pub event: Event,
}

/// Where a picked token goes: its position, whether it was a draft the model kept, and its log
/// probabilities when asked for.
pub struct Position {
    pub pos: usize,
    pub drafted: bool,
    pub logprobs: Option<Box<TokenLogprobs>>,
}

/// A request's state while it is generated.
pub struct Sequence {
    pub id: usize,
    pub options: GenerateOptions,
    /// When the request was made, in ms on the scheduler's clock. Event times are measured from
    /// here, plus the time it waited before reaching the scheduler (`options.queued_ms`).
    pub made_ms: f64,
    pub prompt_ids: Vec<u32>,
    pub tokenize_ms: f64,
    pub cache: KvCache,
    pub sampler: Sampler,
    text: TextStream,
    /// The token the next step feeds: the prompt's last, then each picked one.
    pub input: u32,
    pub generated: usize,
    /// The prompt and every token generated so far (a drafter reads them).
    pub ids: Vec<u32>,
    /// Speculative decoding's drafter, when the request speculates.
    pub drafter: Option<Drafter>,
    /// Go on past an end-of-text token (kept as a token, as vLLM's `ignore_eos` does), so that a
    /// load test gets the output lengths it asked for.
    pub ignore_eos: bool,
    /// The request's stop strings ([`Scheduler::stop_at`](crate::decode::Scheduler::stop_at)):
    /// text that could begin one is held back, and the sequence ends where one begins.
    pub(crate) stop: StopText,
    /// Token events held back with their text (or part of it), each with its text's offset in
    /// the generated text: they go out once their text is released, in order.
    held: VecDeque<(usize, Event)>,
    /// Bytes of token text generated, and of it released past the stop strings.
    generated_bytes: usize,
    released_bytes: usize,
    /// Tokens whose text, or some of it, was released: what the done event counts.
    sent: usize,
}

impl Sequence {
    /// A draft model reads the prompt in the prefill, as the model does: its time is the
    /// prefill's (TTFT), not the first draft's. (Counted in the first draft's step, SmolLM2's
    /// Q4_1 file drafting for its Q8_0 one took 115-200 ms there against 8-9 ms for a plain step.)
    pub(crate) async fn prefill_draft(&mut self) -> crate::error::Result<()> {
        match self.drafter.as_mut() {
            Some(drafter) => drafter.prefill(&self.prompt_ids).await,
            None => Ok(()),
        }
    }

    pub fn new(
        id: usize,
        options: GenerateOptions,
        made_ms: f64,
        prompt_ids: Vec<u32>,
        tokenize_ms: f64,
        cache: KvCache,
        speculation: Option<&Speculation>,
    ) -> Self {
        Self {
            id,
            sampler: Sampler::new(options.sampling).with_logprobs(options.logprobs),
            // A speculative step reads each kept token's log probabilities from the logits its
            // verifying pass made at that token.
            drafter: speculation.map(|s| Drafter::new(s.clone(), options.sampling)),
            ids: prompt_ids.clone(),
            options,
            made_ms,
            input: *prompt_ids.last().expect("a prompt has at least one token"),
            prompt_ids,
            tokenize_ms,
            cache,
            text: TextStream::default(),
            generated: 0,
            ignore_eos: false,
            stop: StopText::default(),
            held: VecDeque::new(),
            generated_bytes: 0,
            released_bytes: 0,
            sent: 0,
        }
    }

    /// Milliseconds since the request was made, at `now_ms` on the scheduler's clock.
    pub fn t_ms(&self, now_ms: f64) -> f64 {
        self.options.queued_ms + (now_ms - self.made_ms)
    }

    /// Take the id the model picked at `now_ms`: a token event, then a done event when this
    /// was the sequence's last. Returns whether it ended.
    pub fn accept(
        &mut self,
        tokenizer: &Tokenizer,
        (id, logprobs): (u32, Option<Box<TokenLogprobs>>),
        now_ms: f64,
        context: usize,
        out: &mut Vec<SeqEvent>,
    ) -> bool {
        let pos = self.cache.len();
        let at = Position {
            pos,
            drafted: false,
            logprobs,
        };
        self.accept_at(tokenizer, id, at, now_ms, context, out)
    }

    /// [`accept`](Self::accept) for a token at `at` (a speculative step keeps several at once).
    pub fn accept_at(
        &mut self,
        tokenizer: &Tokenizer,
        id: u32,
        at: Position,
        now_ms: f64,
        context: usize,
        out: &mut Vec<SeqEvent>,
    ) -> bool {
        let Position {
            pos,
            drafted,
            logprobs,
        } = at;
        let logprobs = logprobs.map(|mut l| {
            l.bytes = tokenizer.piece_bytes(id).to_vec();
            for a in &mut l.top {
                a.bytes = tokenizer.piece_bytes(a.id).to_vec();
            }
            l
        });
        // With `ignore_eos` an end-of-text token is kept as a token and generation goes on.
        let stops = tokenizer.is_stop(id) && !self.ignore_eos;
        let reason = match id {
            id if stops && Some(id) == tokenizer.specials.bos => Some(StopReason::Bos),
            _ if stops => Some(StopReason::Eos),
            _ => {
                self.generated += 1;
                let piece = self.text.push(tokenizer, Some(self.input), id);
                let token = Event::Token {
                    pos,
                    id,
                    text: piece,
                    t_ms: self.t_ms(now_ms),
                    drafted,
                    logprobs,
                    phases: None,
                };
                self.release(token, out);
                self.input = id;
                self.ids.push(id);
                if self.stop.stopped() {
                    Some(StopReason::Stop)
                } else if self.generated >= self.options.max_tokens {
                    Some(StopReason::MaxTokens)
                } else if pos >= context {
                    Some(StopReason::ContextFull)
                } else {
                    None
                }
            }
        };
        if let Some(reason) = reason {
            // The text held back goes out now (the end of the text, not a stop string).
            let trailing = self.text.finish();
            let mut tail = self.stop.push(&trailing);
            tail.push_str(&self.stop.finish());
            let start = self.generated_bytes;
            self.generated_bytes += trailing.len();
            self.released_bytes += tail.len();
            self.flush(out);
            let trailing = trailing[..self
                .released_bytes
                .saturating_sub(start)
                .min(trailing.len())]
                .to_string();
            let reason = if self.stop.stopped() {
                StopReason::Stop
            } else {
                reason
            };
            out.push(self.done_with(reason, now_ms, trailing));
        }
        reason.is_some()
    }

    /// A token goes out as much as the stop strings release: at once where there are none; else
    /// once its whole text is released, or, when a stop string begins inside it, with the part
    /// before the stop. Tokens after a stop never go out.
    fn release(&mut self, token: Event, out: &mut Vec<SeqEvent>) {
        // Without stop strings every token goes out at once: nothing to hold or match.
        if self.stop.is_empty() {
            self.sent += 1;
            return self.emit(out, token);
        }
        let Event::Token { text, .. } = &token else {
            return self.emit(out, token);
        };
        let released = self.stop.push(text).len();
        let len = text.len();
        self.held.push_back((self.generated_bytes, token));
        self.generated_bytes += len;
        self.released_bytes += released;
        self.flush(out);
    }

    /// Send every held token whose text is released; after a stop, the one it cut with the part
    /// before it, and none after.
    fn flush(&mut self, out: &mut Vec<SeqEvent>) {
        while let Some((start, Event::Token { text, .. })) = self.held.front_mut() {
            let end = *start + text.len();
            if end > self.released_bytes {
                if !self.stop.stopped() || *start >= self.released_bytes {
                    break;
                }
                text.truncate(self.released_bytes - *start);
            }
            let (_, token) = self.held.pop_front().expect("a held token");
            self.sent += 1;
            self.emit(out, token);
        }
        if self.stop.stopped() {
            self.held.clear();
        }
    }

    /// The sequence's done event, ending it for `reason` at `now_ms` (cancelled: text held back
    /// for a stop string is not sent).
    pub fn done(&mut self, reason: StopReason, now_ms: f64) -> SeqEvent {
        self.held.clear();
        let trailing = self.text.finish();
        let trailing = match self.stop.is_empty() {
            true => trailing,
            false => String::new(),
        };
        self.done_with(reason, now_ms, trailing)
    }

    fn done_with(&mut self, reason: StopReason, now_ms: f64, trailing_text: String) -> SeqEvent {
        SeqEvent {
            seq: self.id,
            event: Event::Done {
                reason,
                prompt_tokens: self.prompt_ids.len(),
                output_tokens: self.sent,
                t_ms: self.t_ms(now_ms),
                trailing_text,
            },
        }
    }

    /// This sequence's prefill event: its pass ran from `start` to `now`; it was ready to join at
    /// `ready_ms`, so the wait between is queue time.
    pub(crate) fn prefilled(
        &self,
        tokenizer: &Tokenizer,
        (ready_ms, start, now): (f64, f64, f64),
        out: &mut Vec<SeqEvent>,
    ) {
        // The prompt's tokens go with the event only when the request asked for log probabilities.
        let prompt = match self.options.logprobs {
            Some(_) => self
                .prompt_ids
                .iter()
                .map(|&id| PromptToken {
                    id,
                    bytes: tokenizer.piece_bytes(id).to_vec(),
                })
                .collect(),
            None => Vec::new(),
        };
        self.emit(
            out,
            Event::Prefill {
                prompt_tokens: self.prompt_ids.len(),
                queued_ms: self.options.queued_ms + (start - ready_ms).max(0.0),
                tokenize_ms: self.tokenize_ms,
                prefill_ms: now - start,
                t_ms: self.t_ms(now),
                prompt,
            },
        );
    }

    pub fn emit(&self, out: &mut Vec<SeqEvent>, event: Event) {
        out.push(SeqEvent {
            seq: self.id,
            event,
        });
    }
}
