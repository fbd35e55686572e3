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
//! The GPU's work is not timed here: its host calls return before the device has run them.

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

/// Time by [`Phase`], added up while on; shared by the threads that run a model (atomics).
#[derive(Debug, Default)]
pub struct PhaseClock {
    on: AtomicBool,
    /// Timed operations running inside each other now: only the outermost adds its time.
    depth: AtomicU32,
    nanos: [AtomicU64; PHASES],
}

impl PhaseClock {
    pub fn set_on(&self, on: bool) {
        self.on.store(on, Relaxed);
    }

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

    /// The times added since the last take, in milliseconds, as a step of `step_ms`; the clock
    /// starts again from zero.
    pub fn take(&self, step_ms: f64) -> StepPhases {
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
}
