//! The cold start as a waterfall: from opening the page to its first token, each part with its own
//! start and end as the page and its worker marked them (the page, the wait for Run, reading the
//! model's header, the download, the engine's compile where the download did not hide it,
//! loading, warm-up, the bandwidth probe), then the run's own parts from the meter's events
//! (queue, tokenizing, the prefill, the first token to its event). Parts marked `parallel` ran beside the others
//! (the engine compiles while the model downloads) and are drawn but not added. What the parts do
//! not cover is said too ("between the parts"), so their sum and it make the page's figure.

use serde::{Deserialize, Serialize};

/// One part of the cold start, in milliseconds since the page was opened.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ColdPart {
    pub name: String,
    pub start_ms: f64,
    pub end_ms: f64,
    /// Bytes it moved (a download), where it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    /// A word on it ("from this browser's cache").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// It ran beside the other parts: drawn, not added.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub parallel: bool,
}

impl ColdPart {
    pub fn ms(&self) -> f64 {
        (self.end_ms - self.start_ms).max(0.0)
    }
}

/// The waterfall ([`Report::cold_start`](crate::meter::Report::cold_start)).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ColdStart {
    /// In order of their start.
    pub parts: Vec<ColdPart>,
    /// From opening the page to the first token: the page's figure.
    pub total_ms: f64,
    /// The parts that are not parallel, added.
    pub parts_ms: f64,
    /// The total less the parts: what no part covers (messages between the page and its worker,
    /// the page's own work between steps).
    pub between_ms: f64,
}

impl ColdStart {
    /// The page's parts (ms since opening it) and the run's: it was requested `request_ms` after
    /// the page opened, waited `queued_ms`, tokenized in `tokenize_ms`, read its prompt in
    /// `prefill_ms` and its first token came `ttft_ms` after the request.
    pub fn new(
        mut parts: Vec<ColdPart>,
        request_ms: f64,
        (queued_ms, tokenize_ms, prefill_ms, ttft_ms): (f64, f64, f64, f64),
    ) -> ColdStart {
        let mut at = request_ms;
        for (name, ms) in [
            ("waiting in the engine's queue", queued_ms),
            ("tokenizing the prompt", tokenize_ms),
            ("the prefill", prefill_ms),
            (
                "the first token, to its event",
                ttft_ms - queued_ms - tokenize_ms - prefill_ms,
            ),
        ] {
            parts.push(ColdPart {
                name: name.into(),
                start_ms: at,
                end_ms: at + ms.max(0.0),
                bytes: None,
                note: None,
                parallel: false,
            });
            at += ms.max(0.0);
        }
        parts.retain(|p| p.end_ms.is_finite() && p.start_ms.is_finite());
        parts.sort_by(|a, b| a.start_ms.total_cmp(&b.start_ms));
        let total_ms = request_ms + ttft_ms;
        let parts_ms = parts.iter().filter(|p| !p.parallel).map(ColdPart::ms).sum();
        ColdStart {
            parts,
            total_ms,
            parts_ms,
            between_ms: total_ms - parts_ms,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_run_follows_the_page_and_parallel_parts_are_not_added() {
        let part = |name: &str, start_ms: f64, end_ms: f64, parallel: bool| ColdPart {
            name: name.into(),
            start_ms,
            end_ms,
            bytes: None,
            note: None,
            parallel,
        };
        let page = vec![
            part("the page", 0.0, 100.0, false),
            part("the engine's download and compile", 50.0, 400.0, true),
            part("the model's download", 110.0, 900.0, false),
        ];
        let c = ColdStart::new(page, 1000.0, (2.0, 1.0, 40.0, 45.0));
        assert_eq!(c.total_ms, 1045.0);
        assert_eq!(c.parts_ms, 100.0 + 790.0 + 45.0);
        assert_eq!(c.between_ms, 1045.0 - 935.0);
        let first_pick = c.parts.last().unwrap();
        assert_eq!((first_pick.start_ms, first_pick.ms()), (1043.0, 2.0));
    }
}
