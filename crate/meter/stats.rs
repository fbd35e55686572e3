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

/// `count` events over `ms` milliseconds, per second; `None` when the span is empty.
pub fn rate(count: usize, ms: f64) -> Option<f64> {
    (ms > 0.0 && ms.is_finite()).then(|| count as f64 / ms * 1e3)
}

/// Aggregate decode tok/s of a batch: every sequence's tokens after its first, over the span from
/// the earliest first token to the latest last token.
pub fn aggregate_decode_tps(streams: &[&[f64]]) -> Option<f64> {
    let live: Vec<&&[f64]> = streams.iter().filter(|s| !s.is_empty()).collect();
    let tokens: usize = live.iter().map(|s| s.len() - 1).sum();
    let start = live.iter().map(|s| s[0]).fold(f64::INFINITY, f64::min);
    let end = live
        .iter()
        .map(|s| s[s.len() - 1])
        .fold(f64::NEG_INFINITY, f64::max);
    if tokens == 0 {
        return None;
    }
    rate(tokens, end - start)
}

/// A handful of repeated measurements of one figure: how many, the median (nearest rank, as
/// [`percentiles`] counts: the lower middle of an even count), the least and the most.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Spread {
    pub n: usize,
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

/// One run's figure over another's, as the page's lanes compare them (`1.50x` the decode tok/s):
/// `None` where either is undefined, not finite, or the other's is 0.
pub fn versus(figure: Option<f64>, other: Option<f64>) -> Option<f64> {
    let (a, b) = (figure?, other?);
    (a.is_finite() && b.is_finite() && b != 0.0).then(|| a / b)
}

/// The spread of `values`, ignoring any that are not finite (a figure a run did not have);
/// `None` when none is.
pub fn spread(values: &[f64]) -> Option<Spread> {
    let finite: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    let p = percentiles(&finite)?;
    Some(Spread {
        n: finite.len(),
        median: p.p50,
        min: finite.iter().copied().fold(f64::INFINITY, f64::min),
        max: p.max,
    })
}

#[cfg(test)]
mod versus_tests {
    use super::versus;

    #[test]
    fn a_figure_over_another_is_undefined_where_either_is() {
        assert_eq!(versus(Some(3.0), Some(2.0)), Some(1.5));
        assert_eq!(versus(None, Some(2.0)), None);
        assert_eq!(versus(Some(3.0), Some(0.0)), None);
        assert_eq!(versus(Some(f64::INFINITY), Some(2.0)), None);
    }
}
