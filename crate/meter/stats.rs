//! Nearest-rank percentiles, the one way the meter summarises a distribution (inter-token gaps,
//! repeated runs, a speculative run's step times).

use serde::Serialize;

/// Nearest-rank percentiles of a distribution (the gaps between tokens, in ms).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Percentiles {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
}

/// Nearest-rank percentiles: the value at rank ceil(p * N).
pub fn percentiles(values: &[f64]) -> Option<Percentiles> {
    if values.is_empty() {
        return None;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let at =
        |p: f64| sorted[((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1];
    Some(Percentiles {
        p50: at(0.50),
        p90: at(0.90),
        p99: at(0.99),
        max: *sorted.last().unwrap(),
    })
}
