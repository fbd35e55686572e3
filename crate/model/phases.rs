//! Where a step's time goes: the CPU engine times its own operations by kind ([`Phase`]) while a
//! [`PhaseClock`] is on, and each step's totals travel on its token events ([`StepPhases`]) to
//! the meter, which averages them (`meter/phases.rs`) for `bench --profile` and the page's bar.
//!
//! Only the outermost timed operation counts (the classifier's product is the classifier's, not
//! a projection's), so the parts never count one moment twice and their sum is at most the
//! step's time; what is left is the engine's other work (the embedding row, the scheduler's
//! bookkeeping, detokenizing). The clock reads are two a timed operation, about 14 a layer:
//! `bench --profile` against plain `bench` says what they cost (docs/figures.md).
//!
//! The GPU's host calls return before the device has run them, so the GPU times its dispatches
//! by the device's own timestamps (`gpu/timer.rs`) and adds them here, and says how long the host
//! waited for it ([`PhaseClock::waited`]), which the scheduler's sampling leaves out.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};

use serde::Serialize;
use web_time::Instant;

/// A kind of work in a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// The layers' matrix products: q, k, v, o and the feed-forward's three.
    Projections,
    /// RoPE, the cache's writes, scores, softmax and the weighted values.
    Attention,
    /// RMSNorms, the residual adds, biases and the feed-forward's activation.
    Norms,
    /// The final norm and the product with the vocabulary.
    Classifier,
    /// Turning logits into the next token (softmax, top-k or top-p, log probabilities).
    Sampling,
}

const PHASES: usize = 5;

/// The page's CPU engine times one decode step in this many: with every step timed, the clock's
/// reads (`performance.now` through JS, about 800 a SmolLM2 token) cost the page's worker 8% of
/// its decode at 2 threads (94 to 87 tok/s, SmolLM2 Q4_1, tests/bench/page_threads.mjs with the
/// clock on), and a page's column of 16 tokens still holds four timed steps. `bench --profile`
/// times every step (natively the reads cost less than the runs' spread).
pub const PAGE_TIMED_EVERY: u32 = 4;

/// A GPU times one decode step in this many: a timed step's runs of dispatches of one kind each
/// run in a CubeCL profile window of its own (a submit and three small buffers each, `gpu/timer.rs`),
/// which cost lavapipe's decode 3-7% with one step in 8 timed (stories260K Q8_0, `bench --profile`
/// against `bench`, 3 pairs), and a page's column of 16 tokens still holds two timed steps.
pub const GPU_TIMED_EVERY: u32 = 8;

/// Time by [`Phase`], added up while on; shared by the threads that run a model (atomics).
#[derive(Debug, Default)]
pub struct PhaseClock {
    /// Asked for (`set_on`), and timing the step running now (`begin_step`).
    wanted: AtomicBool,
    on: AtomicBool,
    /// Decode steps timed: one in `every` (0 and 1: all), counted by `steps`. A GPU times one in
    /// [`GPU_TIMED_EVERY`]: timing its dispatches slows the step it times.
    every: AtomicU32,
    steps: AtomicU32,
    /// Timed operations running inside each other now: only the outermost adds its time.
    depth: AtomicU32,
    nanos: [AtomicU64; PHASES],
    /// Time the host spent waiting for a device (recording, submitting and reading back a GPU
    /// step), not yet taken.
    waited: AtomicU64,
}

impl PhaseClock {
    /// Time the steps from the next one on (or stop).
    pub fn set_on(&self, on: bool) {
        self.wanted.store(on, Relaxed);
        self.on.store(on, Relaxed);
        self.steps.store(0, Relaxed);
    }

    /// Time one decode step in `every`.
    pub fn set_every(&self, every: u32) {
        self.every.store(every, Relaxed);
    }

    /// Whether the step beginning now is timed: while on, every step that reads a prompt
    /// (`reading`) and one decode step in `every`.
    pub fn begin_step(&self, reading: bool) -> bool {
        let turn = reading
            || self
                .steps
                .fetch_add(1, Relaxed)
                .is_multiple_of(self.every.load(Relaxed).max(1));
        let on = self.wanted.load(Relaxed) && turn;
        self.on.store(on, Relaxed);
        on
    }

    /// Whether the step running now is timed.
    pub fn is_on(&self) -> bool {
        self.on.load(Relaxed)
    }

    /// `f()`, its time added to `phase` when the clock is on and no timed operation encloses it.
    pub fn time<R>(&self, phase: Phase, f: impl FnOnce() -> R) -> R {
        if !self.is_on() {
            return f();
        }
        let outermost = self.depth.fetch_add(1, Relaxed) == 0;
        let start = outermost.then(Instant::now);
        let out = f();
        self.depth.fetch_sub(1, Relaxed);
        if let Some(start) = start {
            self.add(phase, start.elapsed().as_nanos() as u64);
        }
        out
    }

    /// Add `nanos` to `phase` (for work timed where a closure cannot hold it: an `await`).
    pub fn add(&self, phase: Phase, nanos: u64) {
        self.nanos[phase as usize].fetch_add(nanos, Relaxed);
    }

    /// Add `nanos` the host spent waiting for a device.
    pub fn waited(&self, nanos: u64) {
        self.waited.fetch_add(nanos, Relaxed);
    }

    /// The time spent waiting for a device since the last call; from zero again.
    pub fn take_waited(&self) -> u64 {
        self.waited.swap(0, Relaxed)
    }

    /// The times added since the last take, in milliseconds, as a step of `step_ms`; the clock
    /// starts again from zero.
    pub fn take(&self, step_ms: f64) -> StepPhases {
        self.waited.store(0, Relaxed);
        let ms = |p: Phase| self.nanos[p as usize].swap(0, Relaxed) as f64 / 1e6;
        StepPhases {
            projections_ms: ms(Phase::Projections),
            attention_ms: ms(Phase::Attention),
            norms_ms: ms(Phase::Norms),
            classifier_ms: ms(Phase::Classifier),
            sampling_ms: ms(Phase::Sampling),
            step_ms,
        }
    }
}

/// One step's time by phase, and the whole step's as the engine timed it (from the pass's start
/// to its tokens' events; the parts are inside it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct StepPhases {
    pub projections_ms: f64,
    pub attention_ms: f64,
    pub norms_ms: f64,
    pub classifier_ms: f64,
    pub sampling_ms: f64,
    pub step_ms: f64,
}

impl StepPhases {
    /// The named phases' sum (the step's other work is `step_ms` less this).
    pub fn parts_ms(&self) -> f64 {
        self.projections_ms
            + self.attention_ms
            + self.norms_ms
            + self.classifier_ms
            + self.sampling_ms
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_outermost_operation_counts_and_off_counts_nothing() {
        let clock = PhaseClock::default();
        let spin = |ms: u64| std::thread::sleep(std::time::Duration::from_millis(ms));
        clock.time(Phase::Projections, || spin(5));
        assert_eq!(clock.take(0.0).parts_ms(), 0.0, "off: nothing timed");
        clock.set_on(true);
        clock.time(Phase::Classifier, || {
            spin(5);
            clock.time(Phase::Projections, || spin(5));
        });
        let step = clock.take(12.0);
        assert_eq!(
            step.projections_ms, 0.0,
            "inside the classifier: the classifier's"
        );
        assert!(step.classifier_ms >= 10.0, "{step:?}");
        assert_eq!(clock.take(0.0).classifier_ms, 0.0, "taken: from zero again");
    }

    #[test]
    fn one_decode_step_in_every_is_timed_and_every_prompt_step() {
        let clock = PhaseClock::default();
        assert!(!clock.begin_step(true), "off: no step timed");
        clock.set_every(4);
        clock.set_on(true);
        let timed: Vec<bool> = [true, false, false, false, false, false, true, false]
            .iter()
            .map(|&reading| clock.begin_step(reading))
            .collect();
        assert_eq!(timed, [true, true, false, false, false, true, true, false]);
        assert!(!clock.is_on(), "the last step was not timed");
    }
}
