//! How a load test's users arrive ([`Arrival`]: all at once, Poisson, or gamma gaps from a fixed
//! seed), and the prompts users who were given none take ([`DEFAULT_PROMPTS`]).

use crate::error::{Error, Result};

/// How a load test's users send their requests.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Arrival {
    /// All at once.
    Burst,
    /// A Poisson process of `rate` requests a second (exponential gaps, from a fixed seed, so two
    /// runs see the same pattern).
    Poisson { rate: f64 },
    /// Gaps drawn from a gamma distribution of shape `shape` and mean 1/`rate` (vLLM's
    /// `--burstiness`: below 1 burstier than Poisson, above 1 more even; 1 is Poisson).
    Gamma { rate: f64, shape: f64 },
}

impl Arrival {
    /// When each of `n` requests is made, in ms from the first.
    pub fn times(self, n: usize) -> Vec<f64> {
        match self {
            Arrival::Burst => vec![0.0; n],
            Arrival::Poisson { rate } => {
                let mut uniform = Uniform(0x9E37_79B9_7F4A_7C15);
                let mut t = 0.0;
                (0..n)
                    .map(|i| {
                        if i > 0 {
                            // An exponential gap by inversion.
                            t += -uniform.next().ln() / rate * 1e3;
                        }
                        t
                    })
                    .collect()
            }
            Arrival::Gamma { rate, shape } => {
                let mut uniform = Uniform(0x9E37_79B9_7F4A_7C15);
                let mut t = 0.0;
                (0..n)
                    .map(|i| {
                        if i > 0 {
                            t += uniform.gamma(shape) / (shape * rate) * 1e3;
                        }
                        t
                    })
                    .collect()
            }
        }
    }
}

/// Uniform numbers in (0, 1) from xorshift64* with a fixed seed.
struct Uniform(u64);

impl Uniform {
    fn next(&mut self) -> f64 {
        let s = &mut self.0;
        *s ^= *s >> 12;
        *s ^= *s << 25;
        *s ^= *s >> 27;
        ((s.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }

    /// A gamma variate of `shape` and scale 1 (Marsaglia and Tsang's method; below shape 1, one
    /// of shape + 1 times u^(1/shape)).
    fn gamma(&mut self, shape: f64) -> f64 {
        if shape < 1.0 {
            let boost = self.next().powf(1.0 / shape);
            return self.gamma(shape + 1.0) * boost;
        }
        let d = shape - 1.0 / 3.0;
        let c = 1.0 / (9.0 * d).sqrt();
        loop {
            // A standard normal by Box and Muller.
            let x =
                (-2.0 * self.next().ln()).sqrt() * (2.0 * std::f64::consts::PI * self.next()).cos();
            let v = (1.0 + c * x).powi(3);
            if v > 0.0 && self.next().ln() < 0.5 * x * x + d - d * v + d * v.ln() {
                return d * v;
            }
        }
    }
}

impl std::fmt::Display for Arrival {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Arrival::Burst => write!(f, "burst"),
            Arrival::Poisson { rate } => write!(f, "poisson:{rate}"),
            Arrival::Gamma { rate, shape } => write!(f, "gamma:{rate}:{shape}"),
        }
    }
}

/// The slowest Poisson arrival a load test takes, in requests a second.
pub const MIN_RATE: f64 = 1.0 / 600.0;

impl std::str::FromStr for Arrival {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        let bad = || {
            Error::Unsupported(format!(
                "arrival {s:?}: use burst (all users at once), poisson:RATE (RATE requests a \
                 second on average, e.g. poisson:4) or gamma:RATE:SHAPE (SHAPE from 0.05 to 20: \
                 below 1 burstier, above 1 more even)"
            ))
        };
        let mut parts = s.split(':');
        let kind = parts.next().unwrap_or("");
        let numbers = parts
            .map(|p| p.parse::<f64>().map_err(|_| bad()))
            .collect::<Result<Vec<f64>>>()?;
        let (rate, arrival) = match (kind, numbers.as_slice()) {
            ("burst", []) => return Ok(Arrival::Burst),
            ("poisson", &[rate]) => (rate, Arrival::Poisson { rate }),
            ("gamma", &[rate, shape]) if (0.05..=20.0).contains(&shape) => {
                (rate, Arrival::Gamma { rate, shape })
            }
            _ => return Err(bad()),
        };
        if !(rate.is_finite() && rate > 0.0) {
            return Err(bad());
        }
        // 1e-300 a second is an infinite wait as a duration (a panic), and tiny rates a wait of
        // years: a load test's users come at least once every 1/MIN_RATE s.
        if rate < MIN_RATE {
            return Err(Error::Unsupported(format!(
                "arrival {s:?}: {rate} requests a second would leave users hours apart; use at \
                 least {MIN_RATE} (one every {} minutes on average)",
                1.0 / MIN_RATE / 60.0
            )));
        }
        Ok(arrival)
    }
}

/// Prompts for users who were given none: varied openings, so that users in a load test do not
/// all share one prompt length and one story.
pub const DEFAULT_PROMPTS: [&str; 16] = [
    "Once upon a time",
    "Lily and Ben went to the park with their dog",
    "The little red car",
    "One day, a big bear found a shiny stone in the river",
    "Tom wanted to fly",
    "In a small house by the sea lived an old cat named Max",
    "The sun was hot and the children",
    "Sara had a new doll. She loved it very much, but one day",
    "A bird sat on the tree",
    "Mom said, \"Do not touch the cake!\" But Tim",
    "The frog jumped",
    "Once there was a girl who liked to paint. Every morning she",
    "The boat was small",
    "Ben and his friend found a box under the bed",
    "It was a rainy day",
    "The king had a big castle with many rooms, and in one room",
];

#[cfg(test)]
mod tests {
    use super::*;

    /// Mean and coefficient of variation of the gaps of `n` arrivals.
    fn gaps(arrival: Arrival, n: usize) -> (f64, f64) {
        let t = arrival.times(n);
        let gaps: Vec<f64> = t.windows(2).map(|w| w[1] - w[0]).collect();
        let mean = gaps.iter().sum::<f64>() / gaps.len() as f64;
        let var = gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / gaps.len() as f64;
        (mean, var.sqrt() / mean)
    }

    #[test]
    fn gamma_arrivals_keep_the_rate_and_vary_as_their_shape_says() {
        // At 4 a second the mean gap is 250 ms; a gamma's CV is 1/sqrt(shape), Poisson's 1.
        for (arrival, cv) in [
            ("poisson:4", 1.0),
            ("gamma:4:1", 1.0),
            ("gamma:4:0.25", 2.0),
            ("gamma:4:4", 0.5),
        ] {
            let (mean, got) = gaps(arrival.parse().unwrap(), 20_000);
            assert!(
                (mean / 250.0 - 1.0).abs() < 0.05,
                "{arrival}: mean gap {mean}"
            );
            assert!(
                (got / cv - 1.0).abs() < 0.08,
                "{arrival}: cv {got}, want {cv}"
            );
        }
        for bad in [
            "gamma:4",
            "gamma:4:0",
            "gamma:4:50",
            "gamma:x:1",
            "burst:1",
            "gamma:0:1",
        ] {
            assert!(bad.parse::<Arrival>().is_err(), "{bad}");
        }
        assert_eq!(
            "gamma:2:0.5".parse::<Arrival>().unwrap().to_string(),
            "gamma:2:0.5"
        );
    }
}
