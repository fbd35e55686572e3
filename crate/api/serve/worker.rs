//! The engine's own thread: it owns the model and the [`Scheduler`], takes requests and cancels
//! from the HTTP tasks over a channel, steps every running request one token at a time in one
//! batch (continuous batching: a request that arrives while others decode joins the next step),
//! meters each request, and sends each its own events.
//!
//! Between two steps it takes every command that came in, so a cancel (a client that left, a
//! stop string) frees its place and KV cache before the next step, and a request waits at most
//! one step to join. The queue is bounded: past `parallel + queue` requests in the engine a new
//! one is refused (429) at once, before its prompt is tokenized.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Instant;

use tokio::sync::{mpsc as tokio_mpsc, oneshot};

use crate::api::openai::ApiError;
use crate::decode::engine::ms_since;
use crate::decode::{
    Engine, Event, GenerateOptions, ModelInfo, PromptEncoder, Scheduler, SeqEvent, Speculation,
    Tokenized,
};
use crate::error::{Error, contain_panic};
use crate::loading::chat::ChatTemplate;
use crate::meter::{Conditions, DEFAULT_READING_WPM, Meter, Report, Room};

use super::metrics::Metrics;

/// What the engine tells one request.
#[derive(Debug)]
pub enum Update {
    /// An event, as the engine emitted it (its done event included).
    Event(Event),
    /// The request ended (after its done event): the meter's final report.
    Done(Box<Report>),
    /// The engine failed while running this request.
    Failed(ApiError),
}

/// A request for the engine.
pub struct Job {
    /// The prompt's tokens (a chat's in its template), tokenized off the engine's thread.
    pub prompt: Tokenized,
    /// Whether `prompt` is a conversation in the model's chat template (for the conditions).
    pub templated: bool,
    pub options: GenerateOptions,
    /// The `max_tokens` the request asked for (`None`: until the context is full).
    pub max_tokens_asked: Option<usize>,
    pub ignore_eos: bool,
    /// Stop strings: the engine ends the sequence where one begins (`decode/stop.rs`).
    pub stops: Vec<String>,
    /// When the HTTP request came in: the time before it reaches the engine is queue time.
    pub received: Instant,
    pub updates: tokio_mpsc::UnboundedSender<Update>,
    /// How many of its events the HTTP side has taken to send: a client that stops reading
    /// stops this count, and loses its place after [`Limits::write_timeout`].
    pub read: Arc<AtomicU64>,
    /// The request's number, or why it was refused.
    pub accepted: oneshot::Sender<Result<u64, ApiError>>,
}

pub enum Command {
    Submit(Box<Job>),
    /// End request `id` now; `why` is vLLM's finished reason for it: `abort` (the client left).
    Cancel {
        id: u64,
        why: &'static str,
    },
}

/// What the HTTP side reads of the engine: counters, the room, the batch as of the last step.
pub struct Shared {
    pub metrics: Metrics,
    pub room: Room,
    pub running: usize,
    pub waiting: usize,
    /// The running requests' live decode rates, as of the last step.
    pub live_rates: Vec<Option<f64>>,
    /// The clock of the room's times.
    pub clock: Instant,
    /// The KV cache the running requests may hold: positions, and bytes a position.
    pub kv_positions: usize,
    pub kv_bytes_per_position: usize,
    /// The positions the batch has reserved, as of the last step, and the most it ever has.
    pub kv_reserved: usize,
    pub kv_reserved_peak: usize,
    /// Bytes the backend holds for keys and values now, as of the last step: the sequences' own
    /// caches on the CPU, the KV pool on the GPU.
    pub kv_bytes: u64,
    /// The most requests the batch has held at once since the server started.
    pub running_peak: usize,
}

impl Shared {
    pub fn now_ms(&self) -> f64 {
        ms_since(self.clock)
    }
}

/// How the engine serves.
#[derive(Clone)]
pub struct Limits {
    /// The most requests in one step.
    pub parallel: usize,
    /// The most requests waiting for a place.
    pub queue: usize,
    /// The most prompt tokens a step reads while others decode
    /// ([`Scheduler::set_prefill_chunk`]).
    pub prefill_chunk: usize,
    /// The most prompt tokens a step reads over all its prompts
    /// ([`Scheduler::set_step_tokens`]).
    pub step_tokens: usize,
    /// The most bytes of KV cache the running requests hold together: in positions, once the
    /// model says its bytes a position ([`Scheduler::set_kv_positions`]).
    pub kv_memory: u64,
    /// Set at load from `kv_memory`.
    pub kv_positions: Option<usize>,
    /// How long a client may leave its stream's events unread before it loses its place.
    pub write_timeout: std::time::Duration,
    pub speculation: Option<Speculation>,
}

/// A scheduler within `limits`.
fn scheduler(limits: &Limits) -> Scheduler {
    let mut scheduler = Scheduler::new(limits.parallel);
    scheduler.set_prefill_chunk(limits.prefill_chunk);
    scheduler.set_step_tokens(limits.step_tokens);
    scheduler.set_kv_positions(limits.kv_positions);
    scheduler
}

/// One request the engine is running or holding.
struct Live {
    id: u64,
    meter: Meter,
    updates: tokio_mpsc::UnboundedSender<Update>,
    received: Instant,
    /// Events sent to the HTTP side, and how many it has taken ([`Job::read`]).
    sent: u64,
    read: Arc<AtomicU64>,
    /// The count taken when last seen to move, and since when it has stood still with events
    /// waiting.
    last_read: u64,
    stuck: Option<Instant>,
}

struct Worker {
    engine: Engine,
    limits: Limits,
    scheduler: Scheduler,
    /// By the scheduler's sequence id.
    live: HashMap<usize, Live>,
    next_id: u64,
    shared: Arc<Mutex<Shared>>,
}

/// The engine's thread, started: where to send it commands, what it shares, what it loaded, and
/// the model's chat template.
pub type Started = (
    mpsc::Sender<Command>,
    Arc<Mutex<Shared>>,
    ModelInfo,
    Option<ChatTemplate>,
    PromptEncoder,
);

/// Start the engine's thread: `load` makes the engine there (a GPU engine is not `Send`), it is
/// warmed up, and its description comes back once it is ready to serve (or the load's error).
pub fn start(
    load: impl FnOnce() -> Result<Engine, Error> + Send + 'static,
    mut limits: Limits,
) -> Result<Started, Error> {
    let (commands, inbox) = mpsc::channel();
    let (ready, is_ready) = mpsc::channel();
    std::thread::Builder::new()
        .name("tokenometer-engine".into())
        .spawn(move || {
            let engine = match load().and_then(|e| pollster::block_on(e.warm_up()).map(|_| e)) {
                Ok(engine) => engine,
                Err(e) => {
                    let _ = ready.send(Err(e));
                    return;
                }
            };
            let per_position = engine.model.kv_bytes_per_position().max(1);
            let kv_positions = (limits.kv_memory / per_position as u64).min(usize::MAX as u64);
            limits.kv_positions = Some(kv_positions as usize);
            let shared = Arc::new(Mutex::new(Shared {
                kv_positions: kv_positions as usize,
                kv_bytes_per_position: per_position,
                kv_reserved: 0,
                kv_reserved_peak: 0,
                kv_bytes: 0,
                running_peak: 0,
                metrics: Metrics::new(&engine.info.name),
                room: Room::default(),
                running: 0,
                waiting: 0,
                live_rates: Vec::new(),
                clock: Instant::now(),
            }));
            let chat = engine.tokenizer.specials.chat.clone();
            let encoder = engine.prompt_encoder();
            let _ = ready.send(Ok((shared.clone(), engine.info.clone(), chat, encoder)));
            let mut worker = Worker {
                scheduler: scheduler(&limits),
                engine,
                limits,
                live: HashMap::new(),
                next_id: 0,
                shared,
            };
            worker.run(inbox);
        })
        .map_err(|e| Error::Unsupported(format!("cannot start the engine's thread: {e}")))?;
    let (shared, info, chat, encoder) = is_ready.recv().map_err(|_| {
        Error::Unsupported("the engine's thread ended while loading the model".into())
    })??;
    Ok((commands, shared, info, chat, encoder))
}

impl Worker {
    fn run(&mut self, inbox: mpsc::Receiver<Command>) {
        loop {
            if self.scheduler.is_idle() {
                self.publish();
                match inbox.recv() {
                    Ok(command) => self.command(command),
                    // Every sender is gone: the server has stopped.
                    Err(_) => return,
                }
            }
            while let Ok(command) = inbox.try_recv() {
                self.command(command);
            }
            if !self.scheduler.is_idle() {
                self.step();
                self.drop_stalled_readers();
                self.publish();
            }
        }
    }

    fn command(&mut self, command: Command) {
        match command {
            Command::Submit(job) => self.submit(*job),
            Command::Cancel { id, why } => {
                let Some(seq) = self.live.iter().find(|(_, l)| l.id == id).map(|(&s, _)| s) else {
                    return;
                };
                if let Some(done) = self.scheduler.cancel(seq) {
                    self.route(vec![done], why);
                }
            }
        }
    }

    fn submit(&mut self, job: Job) {
        let Limits {
            parallel, queue, ..
        } = self.limits;
        if self.scheduler.running() + self.scheduler.waiting() >= parallel + queue {
            self.shared.lock().unwrap().metrics.rejected();
            let mut full = ApiError::bad_request(format!(
                "the server is full ({parallel} running, {queue} waiting); try again in a moment"
            ))
            .with_status(429, "queue_full");
            full.kind = "rate_limit_error";
            let _ = job.accepted.send(Err(full));
            return;
        }
        let mut options = job.options;
        options.queued_ms = ms_since(job.received);
        let speculation = self.limits.speculation.as_ref();
        // A panic here fails this request alone, as one in a step fails the step's requests.
        let submitted = contain_panic(|| {
            self.scheduler
                .submit_tokens(&self.engine, job.prompt, options, None, speculation)
        });
        let seq = match submitted {
            Ok(Ok(seq)) => seq,
            Ok(Err(e)) => {
                let _ = job.accepted.send(Err(refusal(e)));
                return;
            }
            Err(panic) => {
                let message = format!("the engine failed reading this request ({panic})");
                let _ = job.accepted.send(Err(ApiError::server(message)));
                return;
            }
        };
        // A prompt and the tokens asked for that the context cannot hold together are refused,
        // as OpenAI and vLLM refuse them, not run until the context stops them.
        let context = self.engine.model.config.seq_len;
        if let (Some(asked), Some(prompt)) =
            (job.max_tokens_asked, self.scheduler.waiting_prompt_len(seq))
            && prompt + asked > context
        {
            self.scheduler.cancel(seq);
            let too_long = ApiError::bad_request(format!(
                "the prompt is {} and max_tokens asks for {asked} more, but the context holds \
                 {context}; ask for at most {}",
                crate::error::count(prompt, "token"),
                context - prompt
            ))
            .with_status(400, "context_length_exceeded");
            let _ = job.accepted.send(Err(too_long));
            return;
        }
        // One that the KV budget could never hold would wait forever.
        if let (Some(most), Some(wants), Some(prompt)) = (
            self.limits.kv_positions,
            self.scheduler.waiting_reservation(seq, context),
            self.scheduler.waiting_prompt_len(seq),
        ) && wants > most
        {
            self.scheduler.cancel(seq);
            let too_big = ApiError::bad_request(format!(
                "the prompt and max_tokens need {wants} positions of KV cache but this server \
                 holds at most {most} (--kv-memory); ask for at most {} tokens",
                most.saturating_sub(prompt).max(1)
            ))
            .with_status(400, "kv_budget_exceeded");
            let _ = job.accepted.send(Err(too_big));
            return;
        }
        if job.ignore_eos {
            self.scheduler.ignore_eos(seq);
        }
        if !job.stops.is_empty() {
            self.scheduler.stop_at(seq, job.stops);
        }
        let conditions = Conditions::new(
            &self.engine.info,
            options.sampling,
            self.limits.parallel,
            None,
        )
        .raw_prompt(!job.templated)
        .speculating(speculation.map(Speculation::describe));
        let id = self.next_id;
        self.next_id += 1;
        if job.accepted.send(Ok(id)).is_err() {
            // The client left before its request was taken.
            self.scheduler.cancel(seq);
            return;
        }
        self.live.insert(
            seq,
            Live {
                id,
                meter: Meter::new(conditions, DEFAULT_READING_WPM),
                updates: job.updates,
                received: job.received,
                sent: 0,
                read: job.read,
                last_read: 0,
                stuck: None,
            },
        );
    }

    /// End the requests whose clients have read none of their waiting events for the write
    /// timeout: their places and caches go to others (finished as `abort`).
    fn drop_stalled_readers(&mut self) {
        let now = Instant::now();
        let timeout = self.limits.write_timeout;
        let mut stalled = Vec::new();
        for (&seq, live) in self.live.iter_mut() {
            let read = live.read.load(Ordering::Relaxed);
            if read >= live.sent {
                live.stuck = None;
            } else if read > live.last_read {
                live.last_read = read;
                live.stuck = Some(now);
            } else if now.duration_since(*live.stuck.get_or_insert(now)) >= timeout {
                stalled.push(seq);
            }
        }
        for seq in stalled {
            if let Some(done) = self.scheduler.cancel(seq) {
                self.route(vec![done], "abort");
            }
        }
    }

    /// One step of the batch; a failure (or a panic) fails every request in the engine, running
    /// or waiting (the scheduler's state is not to be trusted after it), and the server goes on.
    fn step(&mut self) {
        let Self {
            scheduler, engine, ..
        } = self;
        match contain_panic(|| pollster::block_on(scheduler.step(engine))) {
            Ok(Ok(events)) => self.route(events, "abort"),
            Ok(Err(e)) => self.fail_all(&e.to_string()),
            Err(panic) => self.fail_all(&format!("the engine panicked ({panic})")),
        }
    }

    /// Hand each event to its request's meter and stream; `cancelled` is the finished reason
    /// counted for a cancelled request.
    fn route(&mut self, events: Vec<SeqEvent>, cancelled: &'static str) {
        let mut tokens = 0;
        let mut first_tokens = Vec::new();
        let mut gone = Vec::new();
        let mut ended = Vec::new();
        // The sequences this step decoded together: the batch each of them ran in.
        let mut decoded: Vec<usize> = events
            .iter()
            .filter(|e| matches!(e.event, Event::Token { .. }))
            .map(|e| e.seq)
            .collect();
        decoded.dedup();
        for &seq in &decoded {
            if let Some(live) = self.live.get_mut(&seq) {
                live.meter.ran_in_batch(decoded.len());
            }
        }
        for SeqEvent { seq, event } in events {
            let Some(live) = self.live.get_mut(&seq) else {
                continue;
            };
            live.meter.observe(&event);
            match &event {
                Event::Token { .. } => {
                    tokens += 1;
                    if let [ttft] = live.meter.token_times() {
                        first_tokens.push(*ttft);
                    }
                }
                Event::Done { reason, .. } => {
                    let why = crate::api::openai::finish_reason(*reason).unwrap_or(cancelled);
                    ended.push((seq, why));
                }
                _ => {}
            }
            if live.updates.send(Update::Event(event)).is_err() {
                gone.push(seq);
            } else {
                live.sent += 1;
            }
        }
        for (seq, why) in ended {
            self.end(seq, why);
        }
        // A client that left: its sequence ends now, its cache freed before the next step.
        for seq in gone {
            if let Some(done) = self.scheduler.cancel(seq) {
                self.route(vec![done], "abort");
            }
        }
        let mut shared = self.shared.lock().unwrap();
        let now = shared.now_ms();
        shared.room.tokens(tokens, now);
        for ttft in first_tokens {
            shared.room.first_token(ttft);
        }
    }

    /// Request `seq` has had its done event: count it, and send its report.
    fn end(&mut self, seq: usize, why: &'static str) {
        let Some(live) = self.live.remove(&seq) else {
            return;
        };
        let report = live.meter.final_report();
        {
            let mut shared = self.shared.lock().unwrap();
            shared
                .metrics
                .finished(why, &report, &live.meter.token_gaps());
            if why != "abort" {
                shared.room.served();
            }
        }
        let _ = live.updates.send(Update::Done(Box::new(report)));
    }

    fn fail_all(&mut self, message: &str) {
        let message = format!("the engine failed while running this request: {message}");
        self.scheduler = scheduler(&self.limits);
        let mut shared = self.shared.lock().unwrap();
        for (_, live) in self.live.drain() {
            shared
                .metrics
                .finished("error", &live.meter.final_report(), &[]);
            let _ = live
                .updates
                .send(Update::Failed(ApiError::server(&message)));
        }
    }

    /// Bytes the backend holds for keys and values now.
    fn kv_bytes(&self) -> u64 {
        #[cfg(feature = "gpu")]
        if let Some((_, pool)) = self.engine.model.gpu_memory() {
            return pool;
        }
        (self.scheduler.held_positions() * self.engine.model.kv_bytes_per_position()) as u64
    }

    /// The batch as the HTTP side sees it.
    fn publish(&mut self) {
        let live_rates = self
            .live
            .values()
            .filter(|l| !l.meter.token_times().is_empty())
            .map(|l| l.meter.live_decode_tps(ms_since(l.received)))
            .collect();
        let mut shared = self.shared.lock().unwrap();
        shared.running = self.scheduler.running();
        shared.running_peak = shared.running_peak.max(shared.running);
        shared.kv_reserved = self
            .scheduler
            .reserved_positions(self.engine.model.config.seq_len);
        shared.kv_reserved_peak = shared.kv_reserved_peak.max(shared.kv_reserved);
        shared.kv_bytes = self.kv_bytes();
        shared.waiting = self.scheduler.waiting();
        shared.live_rates = live_rates;
    }
}

/// A request the engine would not take, as the client should hear it.
pub fn refusal(e: Error) -> ApiError {
    match e {
        Error::BadPrompt(m) if m.contains("context") => {
            ApiError::bad_request(m).with_status(400, "context_length_exceeded")
        }
        Error::BadPrompt(m) => ApiError::bad_request(m),
        Error::Unsupported(m) | Error::BadTokenizer(m) => ApiError::bad_request(m),
        other => ApiError::server(other.to_string()),
    }
}
