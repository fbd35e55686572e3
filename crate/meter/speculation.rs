//! Speculative decoding's figures, from the verifications a run's events report.

use serde::Serialize;

use crate::meter::stats::percentiles;

/// Speculative decoding's own figures. Decode tok/s stays output tokens over time: rejected
/// drafts cost time and add nothing.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SpeculationFigures {
    /// The model's forward passes after the prefill: one a verification.
    pub verifications: usize,
    /// Drafts proposed and drafts the model kept.
    pub drafted: usize,
    pub accepted: usize,
    /// Kept over proposed.
    pub acceptance_rate: Option<f64>,
    /// Drafts kept per verification (each verification adds the model's own token too).
    pub accepted_per_verification: Option<f64>,
    /// The model's passes per decoded token (tokens after the first): 1 without speculation.
    pub passes_per_token: Option<f64>,
    /// A draft model's forward passes (0 for prompt lookup).
    pub draft_passes: usize,
    /// What a step cost by how many drafts it verified, fewest drafts first: the other side of
    /// the drafts kept (a step of 1 draft that costs 1.5 steps without pays only when most drafts
    /// are kept).
    pub step_costs: Vec<StepCost>,
    /// `step_costs` in one line: "step time, median: no draft 10.1 ms (3 steps), 1 draft 15.7
    /// ms = 1.55 plain (28)".
    pub steps_summary: String,
}

/// The steps of a run that verified `drafts` drafts.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepCost {
    pub drafts: usize,
    pub steps: usize,
    /// The median step's time (drafting and verifying).
    pub median_ms: f64,
    /// Over the median step without drafts (`None` when the run had none).
    pub vs_plain: Option<f64>,
}

/// One verification as a `verify` event reports it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Verification {
    pub drafted: usize,
    pub accepted: usize,
    pub draft_passes: usize,
    pub step_ms: f64,
}

impl SpeculationFigures {
    /// From a run's verifications, its tokens after the first numbering `decoded`.
    pub fn new(verified: &[Verification], decoded: usize) -> SpeculationFigures {
        let sum = |count: fn(&Verification) -> usize| verified.iter().map(count).sum::<usize>();
        let (verifications, drafted) = (verified.len(), sum(|v| v.drafted));
        let (accepted, draft_passes) = (sum(|v| v.accepted), sum(|v| v.draft_passes));
        let ratio = |a: usize, b: usize| (b > 0).then(|| a as f64 / b as f64);
        let steps: Vec<(usize, f64)> = verified.iter().map(|v| (v.drafted, v.step_ms)).collect();
        let step_costs = step_costs(&steps);
        SpeculationFigures {
            verifications,
            drafted,
            accepted,
            acceptance_rate: ratio(accepted, drafted),
            accepted_per_verification: ratio(accepted, verifications),
            passes_per_token: ratio(verifications, decoded),
            draft_passes,
            steps_summary: steps_summary(&step_costs),
            step_costs,
        }
    }
}

/// The median time of the steps of each draft length.
fn step_costs(steps: &[(usize, f64)]) -> Vec<StepCost> {
    let mut lengths: Vec<usize> = steps.iter().map(|&(d, _)| d).collect();
    lengths.sort_unstable();
    lengths.dedup();
    // Nearest-rank medians (the lower middle of an even count), as the meter's other figures.
    let median = |d: usize| {
        let times: Vec<f64> = steps.iter().filter(|s| s.0 == d).map(|s| s.1).collect();
        let p50 = percentiles(&times).map_or(f64::NAN, |p| p.p50);
        (times.len(), p50)
    };
    let plain = lengths.first().filter(|&&d| d == 0).map(|_| median(0).1);
    lengths
        .into_iter()
        .map(|drafts| {
            let (steps, median_ms) = median(drafts);
            StepCost {
                drafts,
                steps,
                median_ms,
                vs_plain: plain.filter(|&p| p > 0.0).map(|p| median_ms / p),
            }
        })
        .collect()
}

fn steps_summary(costs: &[StepCost]) -> String {
    let parts: Vec<String> = costs
        .iter()
        .map(|c| {
            let what = match c.drafts {
                0 => "no draft".to_string(),
                1 => "1 draft".to_string(),
                d => format!("{d} drafts"),
            };
            let versus = match c.vs_plain {
                Some(x) if c.drafts > 0 => format!(" = {x:.2} plain"),
                _ => String::new(),
            };
            let steps = if c.steps == 1 { "step" } else { "steps" };
            format!("{what} {:.1} ms{versus} ({} {steps})", c.median_ms, c.steps)
        })
        .collect();
    if parts.is_empty() {
        String::new()
    } else {
        format!("step time, median: {}", parts.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Verifications of `(drafted, step ms)`, each keeping its first draft.
    fn verifications(steps: &[(usize, f64)]) -> Vec<Verification> {
        let verification = |&(drafted, step_ms): &(usize, f64)| Verification {
            drafted,
            accepted: drafted.min(1),
            draft_passes: 0,
            step_ms,
        };
        steps.iter().map(verification).collect()
    }

    #[test]
    fn step_costs_are_medians_by_draft_length_against_the_plain_steps() {
        let steps = [
            (0, 10.0),
            (1, 15.0),
            (1, 16.0),
            (0, 12.0),
            (1, 30.0),
            (2, 23.0),
        ];
        let f = SpeculationFigures::new(&verifications(&steps), 9);
        // The counts, from the verifications.
        assert_eq!((f.verifications, f.drafted, f.accepted), (6, 5, 4));
        assert_eq!(f.acceptance_rate, Some(0.8));
        let cost = |drafts, steps, median_ms, vs_plain| StepCost {
            drafts,
            steps,
            median_ms,
            vs_plain,
        };
        assert_eq!(
            f.step_costs,
            vec![
                cost(0, 2, 10.0, Some(1.0)),
                cost(1, 3, 16.0, Some(1.6)),
                cost(2, 1, 23.0, Some(2.3)),
            ]
        );
        assert_eq!(
            f.steps_summary,
            "step time, median: no draft 10.0 ms (2 steps), 1 draft 16.0 ms = 1.60 plain (3 steps), \
             2 drafts 23.0 ms = 2.30 plain (1 step)"
        );
        // Without a plain step there is nothing to compare with.
        let f = SpeculationFigures::new(&verifications(&[(3, 20.0)]), 4);
        assert_eq!(f.step_costs, vec![cost(3, 1, 20.0, None)]);
        assert_eq!(
            f.steps_summary,
            "step time, median: 3 drafts 20.0 ms (1 step)"
        );
        assert_eq!(SpeculationFigures::new(&[], 0).steps_summary, "");
    }
}
