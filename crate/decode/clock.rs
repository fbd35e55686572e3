//! Where a scheduler's times come from: the machine's clock, or one a test moves pass by pass.

use web_time::Instant;

use crate::decode::engine::ms_since;

/// Where a scheduler's times come from.
#[derive(Debug, Clone, Copy)]
pub enum Clock {
    /// The machine's, from when the scheduler was made.
    Real(Instant),
    /// A clock a test controls: it stands still but for the forward passes, each of which moves
    /// it `pass_ms` plus `row_ms` a row, so what the drafter measures is what the test says and
    /// not what a loaded debug build happens to take.
    Passes {
        now_ms: f64,
        pass_ms: f64,
        row_ms: f64,
    },
}

impl Clock {
    pub(crate) fn now_ms(&self) -> f64 {
        match self {
            Clock::Real(start) => ms_since(*start),
            Clock::Passes { now_ms, .. } => *now_ms,
        }
    }

    /// A forward pass over `rows` rows has run.
    pub(crate) fn passed(&mut self, rows: usize) {
        if let Clock::Passes {
            now_ms,
            pass_ms,
            row_ms,
        } = self
        {
            *now_ms += *pass_ms + *row_ms * rows as f64;
        }
    }
}
