//! The ceiling of a load level's step: its matrix products alone (the module's definitions).

use serde::Serialize;

use crate::decode::ProductPasses;
use crate::meter::stats::percentiles;

/// The ceiling of a decode step's products (see the module's definitions): `passes` timings of
/// the products of `rows` rows alone, their median, and the rates that median gives.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Products {
    pub rows: usize,
    pub passes: usize,
    /// The median pass, in ms.
    pub ms_p50: f64,
    /// Weight bytes one pass reads (each matrix once, whatever `rows`).
    pub weight_bytes: u64,
    /// Multiply-adds of one pass: `rows` times every matrix's rows times its columns.
    pub macs: u64,
    /// `rows` tokens per median pass: the step's tok/s if nothing but the products cost time.
    pub tps: f64,
    /// Weight bytes over the median pass, in GB/s.
    pub gb_per_s: f64,
    /// Multiply-adds over the median pass, in billions a second.
    pub gmac_per_s: f64,
}

impl Products {
    /// The ceiling from an engine's timed passes ([`crate::decode::Engine::products_alone`]).
    pub fn from_passes(p: &ProductPasses) -> Option<Products> {
        Products::new(p.rows, &p.times_ms, p.bytes, p.macs)
    }

    /// The ceiling from timed passes (`times_ms`, each the whole products of `rows` rows);
    /// `None` without a positive, finite median.
    pub fn new(rows: usize, times_ms: &[f64], weight_bytes: u64, macs: u64) -> Option<Self> {
        let ms = percentiles(times_ms)?.p50;
        (ms > 0.0 && ms.is_finite()).then(|| Products {
            rows,
            passes: times_ms.len(),
            ms_p50: ms,
            weight_bytes,
            macs,
            tps: rows as f64 / ms * 1e3,
            gb_per_s: weight_bytes as f64 / ms / 1e6,
            gmac_per_s: macs as f64 / ms / 1e6,
        })
    }
}
