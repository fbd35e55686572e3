//! The room: what the users of one server feel now, for a projector (`tokenometer serve`'s
//! `/room`). Times are milliseconds on the server's clock.
//!
//! - **Users**: requests being generated plus those waiting for a place in the batch.
//! - **Aggregate tok/s**: every user's tokens in the last [`ROOM_WINDOW_MS`], over that window
//!   (or over the time since the server's first token, when that is shorter): what the server
//!   produces for the room.
//! - **Per-user tok/s**: each running user's live decode rate (the meter's live window: the last
//!   second or 16 tokens); the median (p50) and the slowest (min) across them: what each phone
//!   sees.
//! - **TTFT p99**: nearest rank over the last [`ROOM_TTFTS`] requests' first tokens, queueing
//!   included: what a newcomer waits.

use std::collections::VecDeque;

use serde::Serialize;

use crate::meter::stats::percentiles;

/// The aggregate's window.
pub const ROOM_WINDOW_MS: f64 = 2000.0;
/// How many recent first tokens TTFT p99 is taken over.
pub const ROOM_TTFTS: usize = 64;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RoomFigures {
    pub users: usize,
    pub running: usize,
    pub waiting: usize,
    pub aggregate_tps: f64,
    pub per_user_tps_p50: Option<f64>,
    pub per_user_tps_min: Option<f64>,
    pub ttft_p99_ms: Option<f64>,
    /// Requests answered since the server started.
    pub served: u64,
    pub window_ms: f64,
}

/// What the room's figures are made from.
#[derive(Debug, Default)]
pub struct Room {
    /// When each token of the last window was generated.
    tokens: VecDeque<f64>,
    first_token_ms: Option<f64>,
    ttfts: VecDeque<f64>,
    served: u64,
}

impl Room {
    /// `count` tokens generated at `now_ms`.
    pub fn tokens(&mut self, count: usize, now_ms: f64) {
        self.first_token_ms.get_or_insert(now_ms);
        self.tokens.extend(std::iter::repeat_n(now_ms, count));
        self.forget(now_ms);
    }

    /// A request's first token came `ttft_ms` after it was made.
    pub fn first_token(&mut self, ttft_ms: f64) {
        if self.ttfts.len() == ROOM_TTFTS {
            self.ttfts.pop_front();
        }
        self.ttfts.push_back(ttft_ms);
    }

    /// A request was answered.
    pub fn served(&mut self) {
        self.served += 1;
    }

    fn forget(&mut self, now_ms: f64) {
        while self
            .tokens
            .front()
            .is_some_and(|&t| t <= now_ms - ROOM_WINDOW_MS)
        {
            self.tokens.pop_front();
        }
    }

    /// The figures at `now_ms`, with `running` and `waiting` requests and the running ones'
    /// live decode rates (`None` for one with too few tokens yet).
    pub fn figures(
        &mut self,
        now_ms: f64,
        running: usize,
        waiting: usize,
        live_rates: &[Option<f64>],
    ) -> RoomFigures {
        self.forget(now_ms);
        let window = self
            .first_token_ms
            .map_or(ROOM_WINDOW_MS, |t| (now_ms - t).clamp(1.0, ROOM_WINDOW_MS));
        let rates: Vec<f64> = live_rates.iter().flatten().copied().collect();
        let per_user = percentiles(&rates);
        let ttfts: Vec<f64> = self.ttfts.iter().copied().collect();
        RoomFigures {
            users: running + waiting,
            running,
            waiting,
            aggregate_tps: self.tokens.len() as f64 / window * 1e3,
            per_user_tps_p50: per_user.map(|p| p.p50),
            per_user_tps_min: rates.iter().copied().reduce(f64::min),
            ttft_p99_ms: percentiles(&ttfts).map(|p| p.p99),
            served: self.served,
            window_ms: window,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_aggregate_counts_the_window_and_users_their_own_rates() {
        let mut room = Room::default();
        // 3 users, 10 tokens each over 1 s from t = 1000: 30 tokens in 1 s of tokens so far.
        for i in 0..10 {
            room.tokens(3, 1000.0 + 100.0 * i as f64);
        }
        let f = room.figures(2000.0, 3, 2, &[Some(10.0), Some(8.0), None]);
        assert_eq!((f.users, f.running, f.waiting), (5, 3, 2));
        assert!((f.aggregate_tps - 30.0).abs() < 1e-9, "{f:?}");
        assert_eq!(
            (f.per_user_tps_p50, f.per_user_tps_min),
            (Some(8.0), Some(8.0))
        );
        // 3 s later the window has passed: nothing is being produced.
        assert_eq!(room.figures(5000.0, 0, 0, &[]).aggregate_tps, 0.0);
        for t in 1..=100 {
            room.first_token(t as f64);
        }
        assert_eq!(room.figures(5000.0, 0, 0, &[]).ttft_p99_ms, Some(100.0));
    }
}
