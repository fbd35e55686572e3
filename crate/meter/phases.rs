//! Where a token's time goes: the engine's own timers by phase (`model/phases.rs`), step by step
//! on its token events, averaged here over a run's decode ([`PhaseFigures`]).
//!
//! - The parts (projections, attention, norms and activations, the classifier, sampling) are
//!   timed inside the engine; **the engine's other work** is its timed step less those parts (the
//!   embedding row, the scheduler, detokenizing).
//! - **Between steps** is the meter's own gap between tokens less the engine's step: the time
//!   the step's listener took (the page's messages, a terminal's printing) and the loop around it.
//!   It is measured against the token times every other figure uses, so the parts plus the other
//!   work plus this come to the gap that decode tok/s is made of.
//! - The first token's step is the prefill's pass, kept apart; decode is every step after it.

use serde::Serialize;

use crate::model::phases::StepPhases;

/// Decode tokens a bar of the page's phase chart averages.
pub const PHASE_WINDOW_TOKENS: usize = 16;

/// A step's time by part, in milliseconds (a mean over the steps it stands for).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct PhaseSplit {
    pub projections_ms: f64,
    pub attention_ms: f64,
    pub norms_ms: f64,
    pub classifier_ms: f64,
    pub sampling_ms: f64,
    /// The engine's step less the parts above.
    pub other_ms: f64,
    /// The engine's whole step.
    pub step_ms: f64,
}

impl PhaseSplit {
    /// The mean of `steps`.
    fn mean(steps: &[StepPhases]) -> PhaseSplit {
        let n = steps.len().max(1) as f64;
        let sum = |f: fn(&StepPhases) -> f64| steps.iter().map(f).sum::<f64>() / n;
        let step_ms = sum(|s| s.step_ms);
        let parts = sum(|s| s.parts_ms());
        PhaseSplit {
            projections_ms: sum(|s| s.projections_ms),
            attention_ms: sum(|s| s.attention_ms),
            norms_ms: sum(|s| s.norms_ms),
            classifier_ms: sum(|s| s.classifier_ms),
            sampling_ms: sum(|s| s.sampling_ms),
            other_ms: (step_ms - parts).max(0.0),
            step_ms,
        }
    }

    /// The parts in order, with their names as the page and `bench --profile` say them.
    pub fn parts(&self) -> [(&'static str, f64); 6] {
        [
            ("projections", self.projections_ms),
            ("attention", self.attention_ms),
            ("norms and activations", self.norms_ms),
            ("classifier", self.classifier_ms),
            ("sampling", self.sampling_ms),
            ("the engine's other work", self.other_ms),
        ]
    }
}

/// A run's decode by phase ([`Report::phases`](crate::meter::Report::phases)).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PhaseFigures {
    /// Decode steps the engine timed.
    pub steps: usize,
    /// The mean decode step.
    pub decode: PhaseSplit,
    /// The mean gap between decode tokens, as the meter saw them (the decode span over the tokens
    /// after the first).
    pub gap_ms: Option<f64>,
    /// The gap less the engine's step: between steps, outside the engine.
    pub between_ms: Option<f64>,
    /// The prefill's pass (the first token's step), by the same parts.
    pub prefill: Option<PhaseSplit>,
    /// Each [`PHASE_WINDOW_TOKENS`] decode tokens' mean over their timed steps, in order (the
    /// last may hold fewer; one with no timed step is left out).
    pub windows: Vec<PhaseSplit>,
    /// The figures in a sentence.
    pub sentence: String,
}

impl PhaseFigures {
    /// From each generated token's step (`None` where its step was not timed: a speculative
    /// step's, or the clock was off) and the decode span over the tokens after the first.
    pub fn new(steps: &[Option<StepPhases>], gap_ms: Option<f64>) -> Option<PhaseFigures> {
        let (first, rest) = steps.split_first()?;
        let decode: Vec<StepPhases> = rest.iter().flatten().copied().collect();
        if decode.is_empty() {
            return None;
        }
        let mean = PhaseSplit::mean(&decode);
        let between_ms = gap_ms.map(|gap| gap - mean.step_ms);
        let total = gap_ms.unwrap_or(mean.step_ms).max(mean.step_ms);
        let share = |ms: f64| format!("{:.0}%", 100.0 * ms / total);
        let parts: Vec<String> = mean
            .parts()
            .iter()
            .map(|(name, ms)| format!("{name} {}", share(*ms)))
            .collect();
        let between = between_ms.map_or(String::new(), |ms| {
            format!(
                "; between steps (outside the engine) {}",
                share(ms.max(0.0))
            )
        });
        Some(PhaseFigures {
            steps: decode.len(),
            sentence: format!(
                "A decode step took {:.2} ms in the engine: {}{between}.",
                mean.step_ms,
                parts.join(", ")
            ),
            decode: mean,
            gap_ms,
            between_ms,
            prefill: first
                .as_ref()
                .map(|p| PhaseSplit::mean(std::slice::from_ref(p))),
            // By token: a GPU times one decode step in several (`model/phases.rs`).
            windows: rest
                .chunks(PHASE_WINDOW_TOKENS)
                .filter_map(|window| {
                    let timed: Vec<StepPhases> = window.iter().flatten().copied().collect();
                    (!timed.is_empty()).then(|| PhaseSplit::mean(&timed))
                })
                .collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(projections_ms: f64, step_ms: f64) -> Option<StepPhases> {
        Some(StepPhases {
            projections_ms,
            attention_ms: 1.0,
            sampling_ms: 0.5,
            step_ms,
            ..Default::default()
        })
    }

    #[test]
    fn decode_is_the_steps_after_the_first_and_the_rest_is_measured_against_the_gaps() {
        let mut steps = vec![step(50.0, 60.0)];
        steps.extend((0..20).map(|_| step(6.0, 8.0)));
        let f = PhaseFigures::new(&steps, Some(8.5)).expect("figures");
        assert_eq!(f.steps, 20);
        assert_eq!(f.decode.projections_ms, 6.0);
        assert_eq!(f.decode.other_ms, 0.5, "8 less 6 + 1 + 0.5");
        assert_eq!(f.between_ms, Some(0.5));
        assert_eq!(f.prefill.map(|p| p.projections_ms), Some(50.0));
        assert_eq!(f.windows.len(), 2, "16 and 4");
        assert!(f.sentence.contains("projections 71%"), "{}", f.sentence);
        assert!(PhaseFigures::new(&[step(1.0, 2.0), None], None).is_none());
    }

    #[test]
    fn windows_are_16_tokens_each_over_the_steps_timed_in_them() {
        // A GPU times one decode step in 8: tokens 8, 16, 24 and 32 of 40 after the first.
        let mut steps = vec![step(50.0, 60.0)];
        steps.extend((1..=40).map(|i| {
            if i % 8 == 0 {
                step(i as f64, 50.0)
            } else {
                None
            }
        }));
        let f = PhaseFigures::new(&steps, Some(40.0)).expect("figures");
        assert_eq!(f.steps, 5);
        let columns: Vec<f64> = f.windows.iter().map(|w| w.projections_ms).collect();
        // Tokens 1-16 hold steps 8 and 16, 17-32 hold 24 and 32, 33-40 holds 40.
        assert_eq!(columns, [12.0, 28.0, 40.0]);
    }
}
