//! Speculative decoding's figures, from the verifications a run's events report.

use serde::Serialize;

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
}

impl SpeculationFigures {
    /// From `[verifications, drafted, accepted, draft passes]` counted over a run whose tokens
    /// after the first number `decoded`.
    pub fn new(counts: [usize; 4], decoded: usize) -> SpeculationFigures {
        let [verifications, drafted, accepted, draft_passes] = counts;
        let ratio = |a: usize, b: usize| (b > 0).then(|| a as f64 / b as f64);
        SpeculationFigures {
            verifications,
            drafted,
            accepted,
            acceptance_rate: ratio(accepted, drafted),
            accepted_per_verification: ratio(accepted, verifications),
            passes_per_token: ratio(verifications, decoded),
            draft_passes,
        }
    }
}
