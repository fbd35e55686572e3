//! Goodput: the requests a second that met their service-level objectives, in vLLM's words
//! (`--goodput ttft:MS tpot:MS e2el:MS` in its benchmark_serving): a request is good when its
//! TTFT, its time per output token (TPOT: (end-to-end latency - TTFT) / (output tokens - 1), 0 for
//! a single token) and its end-to-end latency are each within their objective; goodput is the
//! good requests over the level's wall time. Failed or cancelled requests are never good.

use std::str::FromStr;

use serde::Serialize;

use crate::error::Error;

/// Service-level objectives, in milliseconds; any subset (`ttft=500,tpot=50,e2e=5000`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Slo {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttft_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tpot_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub e2e_ms: Option<f64>,
}

impl FromStr for Slo {
    type Err = Error;

    fn from_str(s: &str) -> Result<Slo, Error> {
        let bad = |why: String| Error::Unsupported(format!("--slo {s:?}: {why}"));
        let mut slo = Slo::default();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (key, value) = part
                .split_once('=')
                .or_else(|| part.split_once(':'))
                .ok_or_else(|| bad(format!("{part:?} is not KEY=MILLISECONDS")))?;
            let ms: f64 = value
                .trim()
                .parse()
                .ok()
                .filter(|v: &f64| v.is_finite() && *v > 0.0 && *v < 1e9)
                .ok_or_else(|| {
                    bad(format!(
                        "{value:?} is not a positive number of milliseconds"
                    ))
                })?;
            let slot = match key.trim() {
                "ttft" => &mut slo.ttft_ms,
                "tpot" => &mut slo.tpot_ms,
                "e2e" | "e2el" => &mut slo.e2e_ms,
                other => return Err(bad(format!("{other:?} is not ttft, tpot or e2e"))),
            };
            *slot = Some(ms);
        }
        if slo == Slo::default() {
            return Err(bad("give at least one of ttft, tpot and e2e".into()));
        }
        Ok(slo)
    }
}

impl std::fmt::Display for Slo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> = [
            ("TTFT", self.ttft_ms),
            ("TPOT", self.tpot_ms),
            ("e2e", self.e2e_ms),
        ]
        .iter()
        .filter_map(|(k, v)| v.map(|v| format!("{k} <= {v} ms")))
        .collect();
        f.write_str(&parts.join(", "))
    }
}

/// One request's record, as goodput reads it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RequestRecord {
    /// Whether it ended well (not failed, not cancelled).
    pub completed: bool,
    pub ttft_ms: Option<f64>,
    pub e2e_ms: Option<f64>,
    pub output_tokens: usize,
}

impl RequestRecord {
    /// vLLM's TPOT: the time after the first token over the tokens after it; 0 for one token.
    pub fn tpot_ms(&self) -> Option<f64> {
        let (ttft, e2e) = (self.ttft_ms?, self.e2e_ms?);
        Some(if self.output_tokens > 1 {
            (e2e - ttft) / (self.output_tokens - 1) as f64
        } else {
            0.0
        })
    }
}

/// A level's goodput at its objectives.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Goodput {
    pub slo: Slo,
    /// Requests that met every objective.
    pub good: usize,
    pub requests: usize,
    /// Good requests a second of the level's wall time.
    pub requests_per_s: Option<f64>,
    /// The share of requests (0 to 1) meeting every objective, and each one alone.
    pub share: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub share_ttft: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub share_tpot: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub share_e2e: Option<f64>,
}

impl Goodput {
    /// Goodput of `records` over `wall_ms`.
    pub fn new(slo: Slo, records: &[RequestRecord], wall_ms: Option<f64>) -> Goodput {
        let within = |value: Option<f64>, limit: f64| value.is_some_and(|v| v <= limit);
        let meets = |r: &RequestRecord, which: usize| {
            r.completed
                && match which {
                    0 => slo.ttft_ms.is_none_or(|l| within(r.ttft_ms, l)),
                    1 => slo.tpot_ms.is_none_or(|l| within(r.tpot_ms(), l)),
                    _ => slo.e2e_ms.is_none_or(|l| within(r.e2e_ms, l)),
                }
        };
        let share = |which: usize| {
            let n = records.iter().filter(|r| meets(r, which)).count();
            n as f64 / records.len().max(1) as f64
        };
        let good = records
            .iter()
            .filter(|r| (0..3).all(|w| meets(r, w)))
            .count();
        Goodput {
            slo,
            good,
            requests: records.len(),
            requests_per_s: wall_ms
                .filter(|&ms| ms > 0.0 && ms.is_finite())
                .map(|ms| good as f64 / ms * 1e3),
            share: good as f64 / records.len().max(1) as f64,
            share_ttft: slo.ttft_ms.map(|_| share(0)),
            share_tpot: slo.tpot_ms.map(|_| share(1)),
            share_e2e: slo.e2e_ms.map(|_| share(2)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(ttft: f64, e2e: f64, tokens: usize) -> RequestRecord {
        RequestRecord {
            completed: true,
            ttft_ms: Some(ttft),
            e2e_ms: Some(e2e),
            output_tokens: tokens,
        }
    }

    #[test]
    fn objectives_parse_in_vllms_keys_and_ours() {
        let slo: Slo = "ttft=500, tpot:50,e2el=5000".parse().unwrap();
        assert_eq!(
            slo,
            Slo {
                ttft_ms: Some(500.0),
                tpot_ms: Some(50.0),
                e2e_ms: Some(5000.0)
            }
        );
        assert_eq!(
            slo.to_string(),
            "TTFT <= 500 ms, TPOT <= 50 ms, e2e <= 5000 ms"
        );
        for bad in ["", "ttft", "ttft=-1", "ttft=inf", "itl=5", "ttft=abc"] {
            let e = bad.parse::<Slo>().unwrap_err().to_string();
            assert!(e.contains("--slo"), "{bad}: {e}");
        }
    }

    #[test]
    fn a_request_is_good_only_when_it_meets_every_objective() {
        // TPOT of the first: (1100 - 100) / 10 = 100 ms; of the second 10 ms.
        let records = [
            record(100.0, 1100.0, 11),
            record(100.0, 200.0, 11),
            record(900.0, 1000.0, 11),
            RequestRecord {
                completed: false,
                ..record(10.0, 20.0, 2)
            },
        ];
        let slo = Slo {
            ttft_ms: Some(500.0),
            tpot_ms: Some(50.0),
            e2e_ms: None,
        };
        let g = Goodput::new(slo, &records, Some(2000.0));
        assert_eq!((g.good, g.requests), (1, 4));
        assert_eq!(g.requests_per_s, Some(0.5));
        assert_eq!(g.share, 0.25);
        assert_eq!(g.share_ttft, Some(0.5));
        assert_eq!(g.share_tpot, Some(0.5));
        assert_eq!(g.share_e2e, None);
        assert_eq!(record(5.0, 9.0, 1).tpot_ms(), Some(0.0));
    }

    /// Each objective decides on its own: beside the two others set so that every request meets
    /// them, a request that misses only this one is not good, and one that meets it is.
    #[test]
    fn each_objective_fails_a_request_beside_trivially_met_others() {
        let met = record(100.0, 200.0, 11); // TTFT 100, TPOT 10, e2e 200
        let loose = 1e9;
        let cases = [
            // (the objective's limit in TTFT, TPOT, e2e order; a request missing only it)
            (
                [Some(500.0), Some(loose), Some(loose)],
                record(900.0, 1000.0, 11),
            ),
            (
                [Some(loose), Some(50.0), Some(loose)],
                record(100.0, 1100.0, 11),
            ),
            (
                [Some(loose), Some(loose), Some(1050.0)],
                record(100.0, 1100.0, 101),
            ),
        ];
        for ([ttft_ms, tpot_ms, e2e_ms], missing) in cases {
            let slo = Slo {
                ttft_ms,
                tpot_ms,
                e2e_ms,
            };
            let g = Goodput::new(slo, &[met, missing], None);
            assert_eq!((g.good, g.requests), (1, 2), "{slo}");
            let shares = [g.share_ttft, g.share_tpot, g.share_e2e];
            let strict = [ttft_ms, tpot_ms, e2e_ms]
                .iter()
                .position(|l| *l != Some(loose))
                .unwrap();
            for (i, share) in shares.iter().enumerate() {
                let expected = if i == strict { 0.5 } else { 1.0 };
                assert_eq!(*share, Some(expected), "{slo}: objective {i}");
            }
        }
    }
}
