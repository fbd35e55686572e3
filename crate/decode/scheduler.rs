//! Continuous batching: requests wait in a queue, join the running batch when there is room (their
//! prompts prefilled), and leave it when they end (EOS, max tokens, a full context, cancel).
//!
//! Each [`step`](Scheduler::step) runs every running sequence one token further, and the prompt
//! of the sequence joining (or a chunk of it), through ONE forward pass ([`crate::backend::Llama::forward_batch`]): each weight is
//! read once per step for the whole batch, which is why batching raises aggregate tok/s on
//! memory-bound hardware, while every sequence waits for the whole batch's step, which is why it
//! lowers each one's own tok/s. A step reads as many waiting prompts as its budget of prompt tokens
//! holds ([`STEP_TOKENS`]), a long one in chunks while the others keep decoding
//! ([`PREFILL_CHUNK`]).
//!
//! A single `generate` is the batch-1 case of this same code. The caller drives the steps (the CLI
//! in a loop, the page's worker a few at a time between messages), so cancel is an ordinary call
//! between steps.

use std::ops::Range;

use web_time::Instant;

use crate::backend::Segment;
pub use crate::decode::clock::Clock;
use crate::decode::engine::{Engine, ms_since};
use crate::decode::events::{Event, GenerateOptions, StopReason};
use crate::decode::sampling::Sampler;
use crate::decode::sequence::{Position, SeqEvent, Sequence};
use crate::decode::speculate::{Speculation, accept_greedy, accept_sampled};
use crate::error::{Error, Result};
use crate::model::logits::argmax;
use crate::model::phases::Phase;

/// What to generate.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    pub prompt: String,
    pub options: GenerateOptions,
}

/// A submitted request that has not joined the batch yet.
struct Waiting {
    seq: Sequence,
    /// When it may join: its arrival, or when its tokenization ended if that was later.
    ready_ms: f64,
}

/// A sequence in the batch whose prompt is still being read, a chunk a step.
struct Prefilling {
    seq: Sequence,
    ready_ms: f64,
    /// When the step that admitted it began: its first chunk runs in that step.
    start_ms: f64,
}

/// The most prompt tokens a step reads beside sequences that are decoding, unless set otherwise
/// ([`Scheduler::set_prefill_chunk`]): a longer prompt is read over several steps. (Until
/// 2026-11-29 a step read one prompt at most, the others waiting their turn.) Measured under AIPerf
/// 0.13 on this project's Intel Xeon (SmolLM2 Q8_0, `serve --threads 1`, 8 users, 158 tokens in
/// and 64 out, 2026-11-28), aggregate tok/s, then TTFT and inter-token means:
/// - every waiting prompt in one pass, as before: 138 / 155 / 133 tok/s, 1.3-1.6 s, 32-36 ms.
///   The users joined and ended together: one pass of 8 prompts, then 63 steps of 8 tokens.
/// - this (chunks of 256, so these prompts whole), in the same 3 interleaved rounds: 147 / 172 /
///   168 tok/s, 0.40-0.51 s, 41-47 ms. The others decode in the prompt's pass, where their
///   tokens cost little more than its own rows, and the users drift apart.
/// - chunks of 64, in other rounds: below whole prompts in each (142 / 157 / 151 against 158 /
///   166 / 163 tok/s) and no shorter gaps (44-49 against 42-44 ms): each chunk's pass pays again
///   for what does not depend on its rows (a prompt's products stage every matrix, `cpu::packed`).
///
/// So a chunk holds a usual prompt whole, and a long one no longer stops the others for all of
/// its prefill: a 1,530-token prompt joining 3 decoding streams left a largest gap in them of
/// 1.19 / 1.21 / 1.23 s (its last chunk, whose rows attend over the most keys), where reading it
/// in one pass left 4.7 / 5.2 / 5.2 s (`tests/bench/long_prompt_joins.py`, same host and model).
pub const PREFILL_CHUNK: usize = 256;

/// The most prompt tokens a step reads, over all the prompts in it, unless set otherwise
/// ([`Scheduler::set_step_tokens`]): waiting prompts join the step in arrival order while it has
/// room, the last one cut, as vLLM's `max_num_batched_tokens` with chunked prefill does.
///
/// Measured with `bench --concurrency 8` (burst, greedy, 2 threads, AVX2+VNNI Xeon, 2026-11-29,
/// budgets interleaved with the one-prompt-a-step build, 2 rounds), aggregate tok/s and TTFT
/// p50 / p99 ms:
/// - stories15M (f32, prompts of 10-20 tokens, so any budget from 256 holds the whole burst):
///   one prompt a step 2,054 / 2,400, 14.1-8.6 / 32.8-22.5; a budget of 64: 2,617 / 2,677,
///   7.7 / 11.8-11.6; 512: 2,616 / 2,635, 10.7-10.9 / the same (everyone's first token in one
///   pass).
/// - SmolLM2 Q8_0 (chat prompts of about 45 tokens, 64 tokens each), a sweep while a compiler
///   ran beside it: budgets of 128, 256 and 512 made the same aggregate within the noise, 256 the
///   lowest TTFT p50 of the three. Then, quiet, 256 against one prompt a step, 2 rounds: 8 users
///   517 / 522 against 487 / 476 tok/s, TTFT p50 123 / 121 against 94 / 103 ms, p99 163 / 161
///   against 207 / 244 ms; 2 users p50 48 / 49 against 21 / 22, p99 48 / 49 against 45 / 46.
///
/// A CPU reads a prompt at full arithmetic speed (one prompt 21 ms, eight in one pass about
/// eight times that), so reading prompts together saves the weights' reads but not their
/// arithmetic: the burst's last first token comes sooner, its median one later (one prompt a
/// step serves the median best when prefill is bound by arithmetic). 256 holds a usual burst in
/// one or two passes and is also [`PREFILL_CHUNK`], so a long prompt joining leaves the same
/// largest gap in the others' streams as before.
pub const STEP_TOKENS: usize = 256;

pub struct Scheduler {
    clock: Clock,
    max_batch: usize,
    next_id: usize,
    /// In order of `ready_ms`.
    waiting: Vec<Waiting>,
    /// In the batch, their prompts partly read, in arrival order.
    prefilling: Vec<Prefilling>,
    running: Vec<Sequence>,
    prefill_chunk: usize,
    step_tokens: usize,
    /// The most KV cache positions the batch may hold together ([`set_kv_positions`](Self::set_kv_positions)).
    kv_positions: Option<usize>,
}

/// A prompt's tokens, and the time tokenizing them took.
#[derive(Debug, Clone, PartialEq)]
pub struct Tokenized {
    pub ids: Vec<u32>,
    pub tokenize_ms: f64,
}

/// The options and speculation a request may run with: an error in one sentence otherwise.
fn check_options(options: &GenerateOptions, speculation: Option<&Speculation>) -> Result<()> {
    if let Some(speculation) = speculation {
        speculation.validate()?;
    }
    options.sampling.validate()?;
    if options.max_tokens == 0 {
        return Err(Error::Unsupported(
            "max tokens 0 would generate nothing; ask for at least 1".into(),
        ));
    }
    Ok(())
}

/// The KV cache positions a sequence may come to hold: its prompt and its max tokens, within the
/// context (its cache never grows past that: [`Scheduler::submit`]).
pub fn kv_reservation(prompt_tokens: usize, max_tokens: usize, context: usize) -> usize {
    prompt_tokens.saturating_add(max_tokens).min(context)
}

impl Scheduler {
    /// A scheduler running at most `max_batch` sequences in a step (at least 1). Its clock starts
    /// now.
    pub fn new(max_batch: usize) -> Self {
        Self::with_clock(max_batch, Clock::Real(Instant::now()))
    }

    /// [`new`](Self::new) on `clock`.
    pub fn with_clock(max_batch: usize, clock: Clock) -> Self {
        Self {
            clock,
            max_batch: max_batch.max(1),
            next_id: 0,
            waiting: Vec::new(),
            prefilling: Vec::new(),
            running: Vec::new(),
            prefill_chunk: PREFILL_CHUNK,
            step_tokens: STEP_TOKENS,
            kv_positions: None,
        }
    }

    /// The most prompt tokens a step reads while other sequences decode in it (at least 1): a
    /// longer prompt is read over several steps, a chunk each, so that the others' tokens keep
    /// coming (smaller chunks: shorter steps for them, a later first token for the new one).
    pub fn set_prefill_chunk(&mut self, tokens: usize) {
        self.prefill_chunk = tokens.max(1);
    }

    /// The most prompt tokens a step reads over all its prompts (at least 1): a burst of short
    /// prompts is read in one pass, where each weight is read once for all of them; the prompt
    /// that does not fit whole is cut, the rest of it read in the next steps. With nothing
    /// decoding, the first prompt is read whole whatever the budget.
    pub fn set_step_tokens(&mut self, tokens: usize) {
        self.step_tokens = tokens.max(1);
    }

    /// Hold at most `positions` KV cache positions over the batch (`None`: no bound but the batch
    /// size): a request joins only when its reservation ([`kv_reservation`]) fits beside those of
    /// the requests running, and waits in order until it does. A request whose reservation alone
    /// is past the bound would wait forever: the caller refuses it
    /// ([`waiting_reservation`](Self::waiting_reservation)).
    pub fn set_kv_positions(&mut self, positions: Option<usize>) {
        self.kv_positions = positions;
    }

    /// The KV positions reserved by the sequences in the batch.
    pub fn reserved_positions(&self, context: usize) -> usize {
        let reserve =
            |s: &Sequence| kv_reservation(s.prompt_ids.len(), s.options.max_tokens, context);
        self.batch().map(reserve).sum()
    }

    /// Positions the batch's KV caches have grown to hold (a waiting request holds none).
    pub fn held_positions(&self) -> usize {
        self.batch().map(|s| s.cache.capacity()).sum()
    }

    fn batch(&self) -> impl Iterator<Item = &Sequence> {
        let prefilling = self.prefilling.iter().map(|p| &p.seq);
        self.running.iter().chain(prefilling)
    }

    /// The reservation of sequence `id`, while it waits to join the batch.
    pub fn waiting_reservation(&self, id: usize, context: usize) -> Option<usize> {
        let w = self.waiting.iter().find(|w| w.seq.id == id)?;
        Some(kv_reservation(
            w.seq.prompt_ids.len(),
            w.seq.options.max_tokens,
            context,
        ))
    }

    /// Milliseconds since the scheduler was made.
    pub fn now_ms(&self) -> f64 {
        self.clock.now_ms()
    }

    pub fn max_batch(&self) -> usize {
        self.max_batch
    }

    /// Queue `request`, made at `arrival_ms` on this scheduler's clock (`None`: now; a later time
    /// simulates a user arriving then). The prompt is tokenized and checked now, so a bad one is an
    /// error here and not in the middle of other users' steps. Returns the sequence's id.
    pub fn submit(
        &mut self,
        engine: &Engine,
        request: &Request,
        arrival_ms: Option<f64>,
    ) -> Result<usize> {
        self.submit_speculative(engine, request, arrival_ms, None)
    }

    /// [`submit`](Self::submit), speculating as `speculation` says: a step that runs this
    /// sequence alone drafts and verifies (`speculate.rs`); in a batch with others it decodes one
    /// token as they do.
    pub fn submit_speculative(
        &mut self,
        engine: &Engine,
        request: &Request,
        arrival_ms: Option<f64>,
        speculation: Option<&Speculation>,
    ) -> Result<usize> {
        let options = request.options;
        let start = self.now_ms();
        let made_ms = arrival_ms.unwrap_or(start);
        check_options(&options, speculation)?;
        let prompt_ids = engine.encode_prompt(&request.prompt, options.chat)?;
        let tokenized = self.now_ms();
        // Tokenizing before the request is made (a simulated later arrival) is not its time.
        let tokenize_ms = (tokenized - start.max(made_ms)).max(0.0);
        let prompt = Tokenized {
            ids: prompt_ids,
            tokenize_ms,
        };
        self.submit_tokens(engine, prompt, options, Some(made_ms), speculation)
    }

    /// [`submit_speculative`](Self::submit_speculative) for a prompt tokenized already, elsewhere
    /// ([`crate::decode::PromptEncoder`]: a server's HTTP side), its `ids` checked there.
    pub fn submit_tokens(
        &mut self,
        engine: &Engine,
        prompt: Tokenized,
        options: GenerateOptions,
        arrival_ms: Option<f64>,
        speculation: Option<&Speculation>,
    ) -> Result<usize> {
        check_options(&options, speculation)?;
        let Tokenized {
            ids: prompt_ids,
            tokenize_ms,
        } = prompt;
        if prompt_ids.is_empty() {
            return Err(Error::BadPrompt("the prompt gave no tokens".into()));
        }
        let now = self.now_ms();
        let made_ms = arrival_ms.unwrap_or(now);
        let id = self.next_id;
        self.next_id += 1;
        let mut cache = engine.model.new_cache();
        let context = engine.model.config.seq_len;
        cache.limit_to(kv_reservation(
            prompt_ids.len(),
            options.max_tokens,
            context,
        ));
        let seq = Sequence::new(
            id,
            options,
            made_ms,
            prompt_ids,
            tokenize_ms,
            cache,
            speculation,
        );
        let ready_ms = made_ms.max(now);
        let at = self.waiting.partition_point(|w| w.ready_ms <= ready_ms);
        self.waiting.insert(at, Waiting { seq, ready_ms });
        Ok(id)
    }

    /// Let sequence `id`, still waiting, go on past end-of-text tokens (see
    /// [`Sequence::ignore_eos`]); returns whether it was waiting.
    pub fn ignore_eos(&mut self, id: usize) -> bool {
        match self.waiting.iter_mut().find(|w| w.seq.id == id) {
            Some(w) => {
                w.seq.ignore_eos = true;
                true
            }
            None => false,
        }
    }

    /// End sequence `id`, still waiting, where one of `stops` begins in its text: the text from
    /// there is not sent, and its tokens are not counted (as OpenAI's and llama.cpp's servers
    /// count); returns whether it was waiting.
    pub fn stop_at(&mut self, id: usize, stops: Vec<String>) -> bool {
        match self.waiting.iter_mut().find(|w| w.seq.id == id) {
            Some(w) => {
                w.seq.stop = crate::decode::stop::StopText::new(stops);
                true
            }
            None => false,
        }
    }

    /// End sequence `id` now, running or waiting; returns its done event (`None` when it has
    /// already ended or never existed).
    pub fn cancel(&mut self, id: usize) -> Option<SeqEvent> {
        let now = self.now_ms();
        if let Some(i) = self.running.iter().position(|s| s.id == id) {
            return Some(self.running.remove(i).done(StopReason::Cancelled, now));
        }
        if let Some(i) = self.prefilling.iter().position(|p| p.seq.id == id) {
            return Some(
                self.prefilling
                    .remove(i)
                    .seq
                    .done(StopReason::Cancelled, now),
            );
        }
        let i = self.waiting.iter().position(|w| w.seq.id == id)?;
        Some(self.waiting.remove(i).seq.done(StopReason::Cancelled, now))
    }

    /// The prompt's tokens of sequence `id`, while it waits to join the batch.
    pub fn waiting_prompt_len(&self, id: usize) -> Option<usize> {
        let w = self.waiting.iter().find(|w| w.seq.id == id)?;
        Some(w.seq.prompt_ids.len())
    }

    /// Sequences in the batch (decoding, or their prompts being read).
    pub fn running(&self) -> usize {
        self.running.len() + self.prefilling.len()
    }

    /// Sequences submitted that have not joined the batch.
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }

    /// Nothing running and nothing waiting.
    pub fn is_idle(&self) -> bool {
        self.running.is_empty() && self.prefilling.is_empty() && self.waiting.is_empty()
    }

    /// When the next waiting request may join, on the scheduler's clock: a caller with nothing
    /// running waits until then before its next step.
    pub fn next_arrival_ms(&self) -> Option<f64> {
        self.waiting.first().map(|w| w.ready_ms)
    }

    /// Advance: run one pass over every decoding sequence (one token each) and the prompts being
    /// read. Prompts are read in arrival order, as many as the step's budget of prompt tokens holds
    /// ([`set_step_tokens`](Self::set_step_tokens)) while there is room in the batch, the last one
    /// cut when it does not fit whole; while others decode, one prompt takes at most the prefill
    /// chunk ([`set_prefill_chunk`](Self::set_prefill_chunk)) a step. With nothing decoding, the
    /// first prompt is read whole (as far as one pass may hold:
    /// [`crate::backend::Llama::prefill_chunk`]), since nobody waits on it. A prompt's first token
    /// is sampled after its last chunk. Returns the step's events (empty when nothing could run
    /// yet: see [`next_arrival_ms`](Self::next_arrival_ms)).
    ///
    /// Chunks change no bits: a row's products do not depend on the rows beside it, and attention
    /// takes keys in blocks counted from position 0 (`cpu::attention`).
    pub async fn step(&mut self, engine: &Engine) -> Result<Vec<SeqEvent>> {
        let model = &engine.model;
        let context = model.config.seq_len;
        let tokenizer = &engine.tokenizer;
        let now = self.now_ms();
        let decoding = self.running.len();
        let chunks = self.plan_prompts(engine, now);
        // The prompts in this pass: the first `chunks.len()` of the prefill (any others sit
        // this step out).
        let reading = chunks.len();
        if self.prefilling.is_empty() && decoding == 1 && self.running[0].drafter.is_some() {
            return self.speculative_step(engine).await;
        }
        let mut out = Vec::new();
        if self.running.is_empty() && self.prefilling.is_empty() {
            return Ok(out);
        }
        // While the engine's phase clock is on, the step is timed whole and by phase.
        let phases = model.phases().filter(|clock| clock.begin_step(reading > 0));
        let began = phases.map(|_| Instant::now());
        if let Some(clock) = phases {
            clock.take(0.0);
        }

        // One pass: a token for each decoding sequence, then each prompt's chunk.
        let logits =
            {
                let mut segments: Vec<Segment> =
                    self.running
                        .iter_mut()
                        .map(|s| Segment {
                            tokens: std::slice::from_ref(&s.input),
                            cache: &mut s.cache,
                        })
                        .chain(self.prefilling[..reading].iter_mut().zip(&chunks).map(
                            |(p, chunk)| Segment {
                                tokens: &p.seq.prompt_ids[chunk.clone()],
                                cache: &mut p.seq.cache,
                            },
                        ))
                        .collect();
                model.forward_batch(&mut segments)
            };
        // A sampler for each row whose token is wanted: not after a prompt's earlier chunks (a
        // sampled pick there would use up the seed's randomness).
        let mut samplers: Vec<Option<&mut Sampler>> = self
            .running
            .iter_mut()
            .map(|s| Some(&mut s.sampler))
            .chain(self.prefilling[..reading].iter_mut().map(|p| {
                let read = p.seq.cache.len() == p.seq.prompt_ids.len();
                read.then_some(&mut p.seq.sampler)
            }))
            .collect();
        let sampling = phases.map(|_| Instant::now());
        let picks = Sampler::pick_rows(&mut samplers, logits).await?;
        if let Some((clock, sampling)) = phases.zip(sampling) {
            // Not the time waiting for a GPU (its pick's dispatch is timed on the device).
            let host = sampling.elapsed().as_nanos() as u64;
            clock.add(Phase::Sampling, host.saturating_sub(clock.take_waited()));
        }
        let rows = decoding + chunks.iter().map(|c| c.len()).sum::<usize>();
        self.clock.passed(rows);
        if let Ok(mut costs) = engine.pass_costs.lock() {
            costs.observe(rows, self.now_ms() - now);
        }
        // The prompts read to their end leave the prefill, in order, with their rows' picks.
        let mut read = Vec::new();
        let mut still = Vec::new();
        let rest = self.prefilling.split_off(reading);
        let mut picks = picks.into_iter();
        let decoded: Vec<_> = picks.by_ref().take(decoding).collect();
        for (p, pick) in self.prefilling.drain(..).zip(picks) {
            if p.seq.cache.len() == p.seq.prompt_ids.len() {
                read.push((p, pick));
            } else {
                still.push(p);
            }
        }
        still.extend(rest);
        self.prefilling = still;
        for (p, _) in read.iter_mut() {
            p.seq.prefill_draft().await?;
        }
        let now = self.now_ms();

        let mut running = Vec::with_capacity(self.max_batch);
        for (mut seq, pick) in self.running.drain(..).zip(decoded) {
            if !seq.accept(tokenizer, pick, now, context, &mut out) {
                running.push(seq);
            }
        }
        for (p, pick) in read {
            let Prefilling {
                mut seq,
                ready_ms,
                start_ms,
            } = p;
            seq.prefilled(tokenizer, (ready_ms, start_ms, now), &mut out);
            if !seq.accept(tokenizer, pick, now, context, &mut out) {
                running.push(seq);
            }
        }
        self.running = running;
        if let Some(clock) = phases {
            let step = Box::new(clock.take(began.map_or(0.0, ms_since)));
            for e in &mut out {
                if let Event::Token { phases, .. } = &mut e.event {
                    *phases = Some(step.clone());
                }
            }
        }
        Ok(out)
    }

    /// This step's chunk of each prompt being read (in `self.prefilling`'s order), admitting
    /// waiting requests that have arrived by `now` while the batch has room and the budget of
    /// prompt tokens is not spent. The chunks are for the first prompts of the prefill, in order;
    /// when the pass is full before the last, the others sit this step out (a request admitted
    /// now goes back to the head of the queue).
    fn plan_prompts(&mut self, engine: &Engine, now: f64) -> Vec<Range<usize>> {
        let model = &engine.model;
        let context = model.config.seq_len;
        let decoding = self.running.len();
        let mut reserved = self.reserved_positions(context);
        let mut chunks: Vec<Range<usize>> = Vec::new();
        // Rows in the pass, and the furthest position any of them reaches (what one pass may hold
        // depends on it: `Llama::prefill_chunk`).
        let mut rows = decoding;
        let mut end = self
            .running
            .iter()
            .map(|s| s.cache.len() + 1)
            .max()
            .unwrap_or(0);
        let mut budget = self.step_tokens;
        let costs = engine.pass_costs.lock().map(|c| c.clone());
        let costs = costs.unwrap_or_default();
        let mut i = 0;
        loop {
            let fresh = i == self.prefilling.len();
            if fresh {
                let room = decoding + self.prefilling.len() < self.max_batch;
                let arrived = self.waiting.first().is_some_and(|w| w.ready_ms <= now);
                if !(room && arrived && budget > 0) {
                    break;
                }
                // The first in line waits (and the others behind it) until its cache fits; with
                // nothing in the batch it goes ahead (waiting would not make room).
                let head = &self.waiting[0].seq;
                let wants = kv_reservation(head.prompt_ids.len(), head.options.max_tokens, context);
                let empty = decoding == 0 && self.prefilling.is_empty();
                if self
                    .kv_positions
                    .is_some_and(|most| reserved + wants > most)
                    && !empty
                {
                    break;
                }
                reserved += wants;
                let Waiting { seq, ready_ms } = self.waiting.remove(0);
                self.prefilling.push(Prefilling {
                    seq,
                    ready_ms,
                    start_ms: now,
                });
            }
            let seq = &self.prefilling[i].seq;
            let (at, n) = (seq.cache.len(), seq.prompt_ids.len());
            // Alone in the pass, a prompt is read as far as one pass holds; beside others, a
            // chunk at most, and within what is left of the budget (the first prompt always
            // reads, so a budget below a chunk still moves).
            let mut take = n - at;
            if decoding > 0 || i > 0 {
                take = take.min(self.prefill_chunk);
            }
            if i > 0 || decoding > 0 {
                take = take.min(budget);
            }
            let most = model.prefill_chunk(end.max(at + take));
            take = take.min(most.saturating_sub(rows));
            // A second prompt joins only where it costs the others less than it saves (costs.rs).
            if i > 0 && !costs.worth_joining(i, take) {
                take = 0;
            }
            if take == 0 {
                // The pass is full: a prompt admitted in this step waits for the next.
                if fresh {
                    let p = self.prefilling.pop().expect("just admitted");
                    self.waiting.insert(
                        0,
                        Waiting {
                            seq: p.seq,
                            ready_ms: p.ready_ms,
                        },
                    );
                }
                break;
            }
            budget = budget.saturating_sub(take);
            rows += take;
            end = end.max(at + take);
            chunks.push(at..at + take);
            i += 1;
        }
        chunks
    }
}

impl Scheduler {
    /// A step of the one running sequence, speculating: draft, verify the input and the drafts in
    /// one pass (logits at each), keep what the model would have chosen and its own next token,
    /// and drop the rest from the cache.
    async fn speculative_step(&mut self, engine: &Engine) -> Result<Vec<SeqEvent>> {
        let model = &engine.model;
        let context = model.config.seq_len;
        let vocab = model.config.vocab_size;
        let mut out = Vec::new();
        let seq = &mut self.running[0];
        let mut drafter = seq.drafter.take().expect("a speculating sequence");
        let began = self.clock.now_ms();
        let start = seq.cache.len();
        // Room for the drafts and the model's own token after them: within max tokens, and the
        // input at `start` and the drafts after it within the context.
        let room = (seq.options.max_tokens - seq.generated)
            .saturating_sub(1)
            .min(context.saturating_sub(start + 1));
        let draft = drafter.draft(&seq.ids, room).await?;
        let k = draft.tokens.len();
        let mut tokens = Vec::with_capacity(k + 1);
        tokens.push(seq.input);
        tokens.extend(&draft.tokens);
        let logits = model.forward(&tokens, &mut seq.cache, true);
        // The logits at each kept token, where the sequence reports log probabilities.
        let mut rows = None;
        let (kept, next) = if !seq.sampler.reads_logits() {
            accept_greedy(&draft.tokens, &logits.argmax().await?)
        } else {
            let all = rows.insert(logits.into_vec().await?);
            if seq.sampler.is_greedy() {
                let ids: Vec<u32> = all.chunks_exact(vocab).map(argmax).collect();
                accept_greedy(&draft.tokens, &ids)
            } else {
                let probs = draft.probs.as_deref();
                accept_sampled(&mut seq.sampler, &draft.tokens, probs, all, vocab)
            }
        };
        self.clock.passed(tokens.len());
        let now = self.clock.now_ms();
        seq.cache.truncate(start + 1 + kept);
        let step_ms = now - began;
        drafter.verified(k, kept, step_ms, draft.catch_up_ms);
        seq.drafter = Some(drafter);
        seq.emit(
            &mut out,
            Event::Verify {
                drafted: k,
                accepted: kept,
                draft_passes: draft.passes,
                step_ms,
                t_ms: seq.t_ms(now),
            },
        );
        let tokenizer = &engine.tokenizer;
        let picked = draft.tokens[..kept].iter().map(|&d| (d, true));
        for (i, (id, drafted)) in picked.chain([(next, false)]).enumerate() {
            let row = rows.as_ref().map(|r| &r[i * vocab..(i + 1) * vocab]);
            let at = Position {
                pos: start + 1 + i,
                drafted,
                logprobs: row.and_then(|row| seq.sampler.logprobs_of(row, id)),
            };
            if seq.accept_at(tokenizer, id, at, now, context, &mut out) {
                self.running.clear();
                break;
            }
        }
        Ok(out)
    }
}
