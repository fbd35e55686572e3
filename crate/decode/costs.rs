//! What a forward pass costs on this engine, learned from the passes it ran: a fixed part (the
//! weights read once a pass, the dispatches, the host's work) and a part for each row (a token's
//! arithmetic), fitted by least squares over the recent passes. The scheduler asks it whether one
//! more prompt belongs in a pass: reading prompts together saves each of them a pass's fixed
//! part, and costs every prompt already in the pass the newcomer's arithmetic
//! ([`PassCosts::worth_joining`]).

/// Each pass's weight in the fit shrinks by this much a pass (about the last 50 count).
const DECAY: f64 = 0.98;

/// A running least-squares fit of a pass's milliseconds against its rows.
#[derive(Debug, Clone, Default)]
pub struct PassCosts {
    n: f64,
    x: f64,
    y: f64,
    xx: f64,
    xy: f64,
}

impl PassCosts {
    /// A pass over `rows` rows took `ms`.
    pub fn observe(&mut self, rows: usize, ms: f64) {
        if rows == 0 || !ms.is_finite() || ms < 0.0 {
            return;
        }
        let x = rows as f64;
        for s in [
            &mut self.n,
            &mut self.x,
            &mut self.y,
            &mut self.xx,
            &mut self.xy,
        ] {
            *s *= DECAY;
        }
        self.n += 1.0;
        self.x += x;
        self.y += ms;
        self.xx += x * x;
        self.xy += x * ms;
    }

    /// The fixed milliseconds of a pass and the milliseconds a row, once passes of different
    /// sizes have been seen (a decode step and a prompt's, say) and the fit makes sense.
    pub fn fit(&self) -> Option<(f64, f64)> {
        let spread = self.n * self.xx - self.x * self.x;
        // Rows must vary: passes of one size say nothing of what a row costs.
        if self.n < 3.0 || spread <= 1.0 * self.n * self.n {
            return None;
        }
        let per_row = (self.n * self.xy - self.x * self.y) / spread;
        let fixed = (self.y - per_row * self.x) / self.n;
        (per_row > 0.0 && fixed.is_finite()).then_some((fixed.max(0.0), per_row))
    }

    /// Whether a prompt chunk of `rows` rows should join a pass that already reads `prompts`
    /// prompts: it would delay each of them by its arithmetic (`prompts x rows x per row`), and
    /// save itself a pass's fixed part by not waiting for the next. Without a fit, it joins (the
    /// token budget alone decides).
    pub fn worth_joining(&self, prompts: usize, rows: usize) -> bool {
        match self.fit() {
            Some((fixed, per_row)) => (prompts * rows) as f64 * per_row < fixed,
            None => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fit_finds_the_fixed_part_and_the_part_a_row() {
        let mut costs = PassCosts::default();
        assert_eq!(costs.fit(), None);
        for rows in [1, 40, 2, 80, 1, 3, 120] {
            costs.observe(rows, 6.0 + 0.35 * rows as f64);
        }
        let (fixed, per_row) = costs.fit().unwrap();
        assert!(
            (fixed - 6.0).abs() < 1e-6 && (per_row - 0.35).abs() < 1e-9,
            "{fixed} {per_row}"
        );
        // A 40-token prompt costs 14 ms of arithmetic, more than a pass's 6: one a pass.
        assert!(!costs.worth_joining(1, 40));
        // Weights-bound passes (a GPU, a tiny prompt): prompts share them.
        let mut costs = PassCosts::default();
        for rows in [1, 40, 2, 80, 1, 3] {
            costs.observe(rows, 20.0 + 0.01 * rows as f64);
        }
        assert!(costs.worth_joining(3, 40));
        // Passes of one size: no fit, and the budget alone decides.
        let mut costs = PassCosts::default();
        for _ in 0..10 {
            costs.observe(1, 5.0);
        }
        assert_eq!(costs.fit(), None);
        assert!(costs.worth_joining(7, 100));
    }
}
