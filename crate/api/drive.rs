//! The two drivers every front end shares: a metered run ([`MeteredRun`]: one request, stepped
//! to its end, its meter fed every event) and a load-test level ([`LoadLevel`]: many users'
//! requests arriving into one batch, the batch meter fed, and the level's ceiling measured once
//! every user has ended). The CLI runs them to the end; the wasm API pumps them a slice of time
//! at a time (`slice`, in the state `pumping` holds) so that the worker hears a cancel between
//! pumps. Neither computes a figure: the meter does.

use crate::decode::{
    Arrival, Engine, Event, Flow, GenerateOptions, Request, Scheduler, SeqEvent, Speculation,
};
use crate::error::{Error, Result};
use crate::meter::{
    BatchMeter, Conditions, LoadConditions, LoadReport, Meter, Products, Report, Slo, Source,
};

/// One request, metered from its start to its end.
pub struct MeteredRun {
    scheduler: Scheduler,
    meter: Meter,
    seq: usize,
    /// The wait before the engine (`options.queued_ms`), which every event time includes.
    queued_ms: f64,
}

impl MeteredRun {
    /// Submit `prompt`; the conditions name the engine's model, the sampling, batch 1, how it
    /// speculates (if it does) and the warm-up that came before (reported apart). A bad prompt or
    /// setting is an error here. (Not inlined: the page's run and its chat API both start one,
    /// and a copy each cost its wasm download.)
    #[inline(never)]
    pub fn start(
        engine: &Engine,
        prompt: &str,
        options: GenerateOptions,
        speculation: Option<&Speculation>,
        reading_wpm: f64,
        warm_up_ms: Option<f64>,
    ) -> Result<MeteredRun> {
        let mut scheduler = Scheduler::new(1);
        let request = Request {
            prompt: prompt.to_string(),
            options,
        };
        let seq = scheduler.submit_speculative(engine, &request, None, speculation)?;
        let conditions = Conditions::new(&engine.info, options.sampling, 1, warm_up_ms)
            .raw_prompt(!options.chat)
            .speculating(speculation.map(Speculation::describe));
        Ok(MeteredRun {
            scheduler,
            meter: Meter::new(conditions, reading_wpm),
            seq,
            queued_ms: options.queued_ms,
        })
    }

    /// End the run where one of `stops` begins in its text (OpenAI's `stop`), before its first
    /// step.
    pub fn stop_at(&mut self, stops: Vec<String>) {
        self.scheduler.stop_at(self.seq, stops);
    }

    /// One step (the prefill, or one decode token); its events, each already metered.
    pub async fn step(&mut self, engine: &Engine) -> Result<Vec<Event>> {
        let events = self.scheduler.step(engine).await?;
        let events: Vec<Event> = events.into_iter().map(|e| e.event).collect();
        for event in &events {
            self.meter.observe(event);
        }
        Ok(events)
    }

    /// Whether the run has ended (its done event has been metered).
    pub fn is_done(&self) -> bool {
        self.scheduler.is_idle()
    }

    /// End the run now; its done event (metered), or `None` when it had ended.
    pub fn cancel(&mut self) -> Option<Event> {
        let done = self.scheduler.cancel(self.seq)?;
        self.meter.observe(&done.event);
        Some(done.event)
    }

    /// Milliseconds since the request, as the events count them.
    pub fn now_ms(&self) -> f64 {
        self.queued_ms + self.scheduler.now_ms()
    }

    /// The meter's report: the final one once the run is done, otherwise as of now.
    pub fn report(&self) -> Report {
        if self.is_done() {
            self.meter.final_report()
        } else {
            self.meter.report(self.now_ms())
        }
    }

    /// The run's meter, as of the last step.
    pub fn meter(&self) -> &Meter {
        &self.meter
    }

    /// The page was opened `ms` before the request ([`Meter::page_opened`]).
    pub fn page_opened(&mut self, ms: f64) {
        self.meter.page_opened(ms);
    }

    /// On a GPU: dispatches a token and one's cost ([`Meter::dispatch_cost`]).
    pub fn dispatch_cost(&mut self, dispatches_per_token: f64, dispatch_us: f64) {
        self.meter.dispatch_cost(dispatches_per_token, dispatch_us);
    }

    /// The page's cold start before this request ([`Meter::cold_start`]).
    pub fn cold_start(&mut self, parts: Vec<crate::meter::ColdPart>) {
        self.meter.cold_start(parts);
    }

    /// The memory read `gb_per_s`, measured apart: the reports hold the ceiling
    /// ([`Meter::read_bandwidth`]).
    pub fn read_bandwidth(&mut self, gb_per_s: f64, kv_bytes_per_position: u64) {
        self.meter.read_bandwidth(gb_per_s, kv_bytes_per_position);
    }

    /// The text generated so far.
    pub fn text(&self) -> &str {
        self.meter.text()
    }

    /// Step to the end, handing every event to `on_event`; `Flow::Stop` cancels the run. Returns
    /// the final report.
    pub async fn run_to_end(
        &mut self,
        engine: &Engine,
        on_event: &mut dyn FnMut(&Event) -> Flow,
    ) -> Result<Report> {
        'steps: while !self.is_done() {
            for event in self.step(engine).await? {
                if on_event(&event) == Flow::Stop && !matches!(event, Event::Done { .. }) {
                    if let Some(done) = self.cancel() {
                        on_event(&done);
                    }
                    break 'steps;
                }
            }
        }
        Ok(self.meter.final_report())
    }
}

#[cfg(any(target_arch = "wasm32", test))]
/// A driver as a pump advances it, a slice of time at a time: a run or a load-test level.
pub(crate) trait Stepped {
    type Event;
    /// One step: its events, or how long until something can run when nothing can yet.
    async fn step_or_wait(&mut self, engine: &Engine) -> Result<LevelStep<Self::Event>>;
    fn now_ms(&self) -> f64;
    fn is_done(&self) -> bool;
    /// Whether these events end the slice at once (a run's prefill: the first token shows
    /// without waiting out the slice).
    fn ends_slice(_events: &[Self::Event]) -> bool {
        false
    }
}

#[cfg(any(target_arch = "wasm32", test))]
/// What a slice of steps gave: the events in order, and the wait it stopped for, if it did.
pub(crate) struct Slice<E> {
    pub events: Vec<E>,
    pub wait_ms: Option<f64>,
}

#[cfg(any(target_arch = "wasm32", test))]
/// Steps of `driver` for about `budget_ms` (at least one), until it ends, must wait or a step
/// ends the slice. A failed step's error is returned, the events before it with it lost; the
/// driver is as its last good step left it.
pub(crate) async fn slice<D: Stepped>(
    driver: &mut D,
    engine: &Engine,
    budget_ms: f64,
) -> Result<Slice<D::Event>> {
    let start = driver.now_ms();
    let mut events = Vec::new();
    while !driver.is_done() {
        match driver.step_or_wait(engine).await? {
            LevelStep::Wait(ms) => {
                return Ok(Slice {
                    events,
                    wait_ms: Some(ms),
                });
            }
            LevelStep::Events(step) => {
                let ends = D::ends_slice(&step);
                events.extend(step);
                if ends || driver.now_ms() - start >= budget_ms {
                    break;
                }
            }
        }
    }
    Ok(Slice {
        events,
        wait_ms: None,
    })
}

#[cfg(any(target_arch = "wasm32", test))]
/// Run `pump` on the state `cell` holds, taken out meanwhile so that a second pump, a cancel or a
/// report is refused with `busy`, and put back whatever `pump` returns, an error included: the
/// next pump, cancel or report finds it.
pub(crate) async fn pumping<S, T, E>(
    cell: &std::cell::RefCell<Option<S>>,
    busy: impl FnOnce() -> E,
    pump: impl AsyncFnOnce(&mut S) -> std::result::Result<T, E>,
) -> std::result::Result<T, E> {
    let mut state = cell.borrow_mut().take().ok_or_else(busy)?;
    let out = pump(&mut state).await;
    *cell.borrow_mut() = Some(state);
    out
}

#[cfg(any(target_arch = "wasm32", test))]
impl Stepped for MeteredRun {
    type Event = Event;
    async fn step_or_wait(&mut self, engine: &Engine) -> Result<LevelStep<Event>> {
        self.step(engine).await.map(LevelStep::Events)
    }
    fn now_ms(&self) -> f64 {
        MeteredRun::now_ms(self)
    }
    fn is_done(&self) -> bool {
        MeteredRun::is_done(self)
    }
    fn ends_slice(events: &[Event]) -> bool {
        events.iter().any(|e| matches!(e, Event::Prefill { .. }))
    }
}

#[cfg(any(target_arch = "wasm32", test))]
impl Stepped for LoadLevel {
    type Event = SeqEvent;
    async fn step_or_wait(&mut self, engine: &Engine) -> Result<LevelStep<SeqEvent>> {
        self.step(engine).await
    }
    fn now_ms(&self) -> f64 {
        LoadLevel::now_ms(self)
    }
    fn is_done(&self) -> bool {
        LoadLevel::is_done(self)
    }
}

/// What a load-test level simulates.
#[derive(Debug, Clone)]
pub struct Level {
    pub users: usize,
    /// How the users' requests arrive.
    pub arrival: Arrival,
    /// The most sequences one step decodes (the rest wait).
    pub max_batch: usize,
    /// The most prompt tokens a step reads ([`Scheduler::set_step_tokens`]).
    pub step_tokens: usize,
    /// Given to the users in turn.
    pub prompts: Vec<String>,
    pub options: GenerateOptions,
    pub reading_wpm: f64,
    /// The warm-up before the level, reported apart.
    pub warm_up_ms: Option<f64>,
    /// Objectives to count goodput against.
    pub slo: Option<Slo>,
}

/// What a step of a level (or a run) gave.
pub enum LevelStep<E = SeqEvent> {
    /// Its events, each already metered.
    Events(Vec<E>),
    /// Nothing could run: no user is running and the next arrives in this many milliseconds.
    Wait(f64),
}

/// One load-test level: every user's request submitted at the start, to arrive as the level's
/// arrival says, stepped in one scheduler and metered per user and as a whole.
pub struct LoadLevel {
    scheduler: Scheduler,
    meter: BatchMeter,
    users: usize,
    /// The step's ceiling at the level's batch size, measured once every user has ended
    /// ([`LoadLevel::measure_ceiling`]); `None` before then, on a GPU, and after a cancel.
    products_alone: Option<Products>,
    /// Whether [`LoadLevel::cancel_all`] ended the level: then it ends at once, with no ceiling
    /// to time.
    cancelled: bool,
}

impl LoadLevel {
    /// Submit every user's request. A prompt that does not fit is an error naming it.
    pub fn start(engine: &Engine, level: &Level) -> Result<LoadLevel> {
        let users = level.users;
        let conditions = LoadConditions {
            source: Source::Engine(engine.info.clone()),
            users,
            max_batch: Some(level.max_batch),
            arrival: level.arrival.to_string(),
            max_tokens: level.options.max_tokens,
            sampling: level.options.sampling,
            warm_up_ms: level.warm_up_ms,
            slo: level.slo,
        };
        let mut meter = BatchMeter::new(conditions, level.reading_wpm);
        let mut scheduler = Scheduler::new(level.max_batch);
        scheduler.set_step_tokens(level.step_tokens);
        for (i, at) in level.arrival.times(users).into_iter().enumerate() {
            let prompt = &level.prompts[i % level.prompts.len()];
            let request = Request {
                prompt: prompt.clone(),
                options: level.options,
            };
            let seq = scheduler
                .submit(engine, &request, Some(at))
                .map_err(|e| Error::BadPrompt(format!("prompt {} ({prompt:?}): {e}", i + 1)))?;
            meter.arrive(seq, at);
        }
        Ok(LoadLevel {
            scheduler,
            meter,
            users,
            products_alone: None,
            cancelled: false,
        })
    }

    /// One scheduler step, or how long until the next user arrives when nothing can run.
    pub async fn step(&mut self, engine: &Engine) -> Result<LevelStep> {
        let events = self.scheduler.step(engine).await?;
        if events.is_empty()
            && self.scheduler.running() == 0
            && let Some(at) = self.scheduler.next_arrival_ms()
        {
            return Ok(LevelStep::Wait((at - self.scheduler.now_ms()).max(0.0)));
        }
        for e in &events {
            self.meter.observe(e.seq, &e.event);
        }
        Ok(LevelStep::Events(events))
    }

    /// Whether every user has ended.
    pub fn is_done(&self) -> bool {
        self.scheduler.is_idle()
    }

    /// Milliseconds on the level's clock.
    pub fn now_ms(&self) -> f64 {
        self.scheduler.now_ms()
    }

    /// Once every user has ended (and the level was not cancelled), time the step's matrix
    /// products alone at the level's batch size: about 0.2 s, after the level's own figures are
    /// fixed. Nothing on a GPU.
    pub fn measure_ceiling(&mut self, engine: &Engine) {
        if self.is_done() && self.products_alone.is_none() && !self.cancelled {
            self.products_alone = engine
                .products_alone(self.meter.conditions().batch_rows())
                .and_then(|passes| Products::from_passes(&passes));
        }
    }

    /// The memory reads `gb_per_s` (measured apart): the report holds the level's bandwidth
    /// ceiling at its batch ([`BatchMeter::read_bandwidth`]).
    pub fn read_bandwidth(&mut self, gb_per_s: f64, engine: &Engine) {
        let kv = engine.model.kv_bytes_per_position() as u64;
        self.meter.read_bandwidth(gb_per_s, kv);
    }

    /// End every user's request now; their done events (metered).
    pub fn cancel_all(&mut self) -> Vec<SeqEvent> {
        self.cancelled = true;
        let mut events = Vec::new();
        for seq in 0..self.users {
            if let Some(done) = self.scheduler.cancel(seq) {
                self.meter.observe(seq, &done.event);
                events.push(done);
            }
        }
        events
    }

    /// The level's report so far, with its ceiling once measured.
    pub fn report(&self) -> LoadReport {
        LoadReport {
            products_alone: self.products_alone,
            ..self.meter.report()
        }
    }

    /// User `seq`'s meter, once the user has arrived.
    pub fn user(&self, seq: usize) -> Option<&Meter> {
        self.meter.user(seq)
    }

    /// How many users the level simulates.
    pub fn users(&self) -> usize {
        self.users
    }

    /// Step to the end, handing every event to `on_event` and sleeping while no user has
    /// arrived yet. Returns the report (without a ceiling: see
    /// [`measure_ceiling`](Self::measure_ceiling)).
    #[cfg(not(target_arch = "wasm32"))]
    pub async fn run_to_end(
        &mut self,
        engine: &Engine,
        on_event: &mut dyn FnMut(&SeqEvent, &LoadLevel),
    ) -> Result<LoadReport> {
        while !self.is_done() {
            match self.step(engine).await? {
                LevelStep::Wait(ms) => {
                    // A wait that is not a finite number of seconds is no wait (`from_secs_f64`
                    // panics on it); arrival rates are bounded (`MIN_RATE`), so none comes.
                    let wait = std::time::Duration::try_from_secs_f64(ms / 1e3).unwrap_or_default();
                    std::thread::sleep(wait)
                }
                LevelStep::Events(events) => {
                    for e in &events {
                        on_event(e, self);
                    }
                }
            }
        }
        Ok(self.report())
    }
}

// Natively: it reads a model file and blocks on the pump.
#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::*;
    use std::cell::RefCell;

    /// A driver whose steps give their number, the third failing once; 1 ms a step.
    struct Counting {
        steps: usize,
        failed: bool,
    }

    impl Stepped for Counting {
        type Event = usize;
        async fn step_or_wait(&mut self, _: &Engine) -> Result<LevelStep<usize>> {
            if self.steps == 2 && !self.failed {
                self.failed = true;
                return Err(Error::Device("the device was lost".into()));
            }
            self.steps += 1;
            Ok(LevelStep::Events(vec![self.steps]))
        }
        fn now_ms(&self) -> f64 {
            self.steps as f64
        }
        fn is_done(&self) -> bool {
            self.steps == 5
        }
    }

    /// A failed step leaves the state where the pump found it, for the next pump (the lab's pump
    /// returned before putting it back, so every later pump, cancel or report said "busy").
    #[test]
    fn a_pump_keeps_its_state_when_a_step_fails() {
        let engine = crate::Engine::load(
            crate::ModelFiles::llama2c(
                "stories260K",
                std::fs::read("models/stories260K/stories260K.bin").unwrap(),
            ),
            Some(&std::fs::read("models/stories260K/tok512.bin").unwrap()),
            crate::Quant::F32,
            &crate::Backend::cpu(),
        )
        .unwrap();
        let cell = RefCell::new(Some(Counting {
            steps: 0,
            failed: false,
        }));
        let pump = |budget_ms| {
            pollster::block_on(pumping(
                &cell,
                || "busy".to_string(),
                async |d| {
                    slice(d, &engine, budget_ms)
                        .await
                        .map(|s| {
                            assert_eq!(s.wait_ms, None);
                            s.events
                        })
                        .map_err(|e| e.to_string())
                },
            ))
        };
        assert_eq!(pump(1.0), Ok(vec![1]));
        let failed = pump(10.0).unwrap_err();
        assert!(failed.contains("lost"), "{failed}");
        // The state is back: the next pump goes on from the last good step.
        assert_eq!(pump(10.0), Ok(vec![3, 4, 5]));
        assert!(cell.borrow().as_ref().is_some_and(|d| d.is_done()));
    }
}
