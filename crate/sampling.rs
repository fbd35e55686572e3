//! Picking the next token: greedy (argmax on the device, one id read back), or temperature with
//! optional top-p (nucleus) sampling on the host, driven by llama2.c's xorshift RNG so that a seed
//! gives the same text on every platform.

use burn::prelude::*;
use burn::tensor::ExecutionError;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// How to sample; temperature 0 means greedy.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Sampling {
    pub temperature: f32,
    pub top_p: f32,
    pub seed: u64,
}

impl Default for Sampling {
    fn default() -> Self {
        Self {
            temperature: 0.0,
            top_p: 0.9,
            seed: 42,
        }
    }
}

impl Sampling {
    pub fn validate(&self) -> Result<()> {
        if !(self.temperature >= 0.0 && self.temperature.is_finite()) {
            return Err(Error::Unsupported(format!(
                "temperature {} must be >= 0",
                self.temperature
            )));
        }
        if !(0.0..=1.0).contains(&self.top_p) {
            return Err(Error::Unsupported(format!(
                "top-p {} must be within 0..=1",
                self.top_p
            )));
        }
        Ok(())
    }
}

/// A sampler with its RNG state.
pub struct Sampler {
    settings: Sampling,
    rng_state: u64,
}

impl Sampler {
    pub fn new(settings: Sampling) -> Self {
        // xorshift has a fixed point at 0.
        Self {
            settings,
            rng_state: settings.seed.max(1),
        }
    }

    /// Choose the next id from logits `[1, vocab]`, reading back as little as the method needs.
    pub async fn sample(&mut self, logits: Logits) -> Result<u32> {
        if self.settings.temperature == 0.0 {
            return Ok(logits.argmax().await?.first().copied().unwrap_or(0));
        }
        let logits = logits.into_vec().await?;
        Ok(self.sample_host(&logits))
    }

    /// One pick per row of `logits` `[samplers.len(), vocab]`, row `i` by `samplers[i]`, with one
    /// read-back for the whole batch: only the ids when every sampler is greedy.
    pub async fn sample_rows(samplers: &mut [&mut Sampler], logits: Logits) -> Result<Vec<u32>> {
        if samplers.iter().all(|s| s.settings.temperature == 0.0) {
            return logits.argmax().await;
        }
        let data = logits.into_vec().await?;
        let vocab = data.len() / samplers.len().max(1);
        Ok(samplers
            .iter_mut()
            .zip(data.chunks_exact(vocab))
            .map(|(sampler, row)| {
                if sampler.settings.temperature == 0.0 {
                    argmax(row)
                } else {
                    sampler.sample_host(row)
                }
            })
            .collect())
    }

    /// Temperature and top-p on host logits (pure, so tests can drive it).
    pub fn sample_host(&mut self, logits: &[f32]) -> u32 {
        let probs = softmax(logits, self.settings.temperature);
        let coin = self.random_f32();
        let top_p = self.settings.top_p;
        if top_p <= 0.0 || top_p >= 1.0 {
            return sample_from(&probs.iter().copied().enumerate().collect::<Vec<_>>(), coin);
        }
        // Nucleus: the smallest set of most likely tokens whose mass exceeds top_p.
        let mut ranked: Vec<(usize, f32)> = probs.into_iter().enumerate().collect();
        ranked.sort_by(|a, b| b.1.total_cmp(&a.1));
        let mut mass = 0.0;
        let mut keep = ranked.len();
        for (i, &(_, p)) in ranked.iter().enumerate() {
            mass += p;
            if mass > top_p {
                keep = i + 1;
                break;
            }
        }
        sample_from(&ranked[..keep], coin)
    }

    /// llama2.c's `random_u32` (xorshift*) and `random_f32`.
    fn random_f32(&mut self) -> f32 {
        let s = &mut self.rng_state;
        *s ^= *s >> 12;
        *s ^= *s << 25;
        *s ^= *s >> 27;
        let r = (s.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 32) as u32;
        (r >> 8) as f32 / 16_777_216.0
    }
}

fn softmax(logits: &[f32], temperature: f32) -> Vec<f32> {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let exps: Vec<f32> = logits
        .iter()
        .map(|&l| ((l - max) / temperature).exp())
        .collect();
    let sum: f32 = exps.iter().sum();
    exps.into_iter().map(|e| e / sum).collect()
}

/// Walk the (id, probability) list until the cumulative mass passes `coin` times the total.
fn sample_from(candidates: &[(usize, f32)], coin: f32) -> u32 {
    let total: f32 = candidates.iter().map(|c| c.1).sum();
    let target = coin * total;
    let mut mass = 0.0;
    for &(id, p) in candidates {
        mass += p;
        if target < mass {
            return id as u32;
        }
    }
    candidates.last().map_or(0, |c| c.0 as u32)
}

/// Logits `[rows, vocab]` where the forward pass left them: on the GPU, or on the host (the CPU
/// backend), where a pick needs no round trip through burn. (In the page's worker that round trip,
/// a burn tensor, its argmax and the read-back, took 0.2 to 0.7 ms a token, up to a quarter of a
/// q8 decode step of stories15M.)
pub enum Logits {
    Device(Box<Tensor<2>>),
    /// Row-major, `vocab` values a row.
    Host {
        vocab: usize,
        data: Vec<f32>,
    },
}

impl Logits {
    /// The argmax of each row (the first of equal maxima, as run.c's); on the GPU it is computed
    /// there and only the ids are read back.
    pub async fn argmax(self) -> Result<Vec<u32>> {
        match self {
            Logits::Device(t) => {
                let data = (*t)
                    .argmax(1)
                    .into_data_async()
                    .await
                    .map_err(device_error)?;
                Ok(data.iter::<i64>().map(|id| id as u32).collect())
            }
            Logits::Host { vocab, data, .. } => Ok(data.chunks_exact(vocab).map(argmax).collect()),
        }
    }

    /// Every value, row-major, on the host.
    pub async fn into_vec(self) -> Result<Vec<f32>> {
        match self {
            Logits::Device(t) => {
                let data = (*t).into_data_async().await.map_err(device_error)?;
                Ok(data.iter::<f32>().collect())
            }
            Logits::Host { data, .. } => Ok(data),
        }
    }
}

/// The first index of the largest value, as run.c's `argmax` (a running maximum that only a
/// strictly larger value replaces, so NaNs are passed over, and a NaN first is the answer).
///
/// In two passes: the largest value, kept in 16 lanes that the compiler vectorizes (positions
/// `i mod 16`, each lane a running maximum of the same kind), then the first index holding it.
/// One pass with the index beside the maximum does not vectorize, and at 32,000 logits a row it
/// took 3% of a native q4 decode step at 8 users (profile).
fn argmax(row: &[f32]) -> u32 {
    const LANES: usize = 16;
    let Some(&first) = row.first() else {
        return 0;
    };
    if first.is_nan() {
        return 0;
    }
    let mut lanes = [first; LANES];
    let chunks = row.chunks_exact(LANES);
    let tail = chunks.remainder();
    for chunk in chunks {
        for (top, &v) in lanes.iter_mut().zip(chunk) {
            *top = if v > *top { v } else { *top };
        }
    }
    let top = lanes
        .iter()
        .chain(tail)
        .fold(first, |top, &v| if v > top { v } else { top });
    // `top` is one of the row's values, and no value before its first place is larger.
    row.iter().position(|&v| v == top).unwrap_or(0) as u32
}

fn device_error(e: ExecutionError) -> Error {
    match e {
        // Once lost, every later operation on the device fails the same way.
        ExecutionError::DevicePoisoned { reason } => Error::DeviceLost(root_cause(&reason)),
        other => Error::Device(format!(
            "reading results back from the device failed: {}",
            root_cause(&other.to_string())
        )),
    }
}

/// burn's execution errors nest ("...\nCaused by:\n  ...\nBacktrace: ..."); keep the innermost
/// cause, on one line, as every error message here is.
fn root_cause(message: &str) -> String {
    let message = message.split("Backtrace:").next().unwrap_or(message);
    let cause = message.rsplit("Caused by:").next().unwrap_or(message);
    cause.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sampler(temperature: f32, top_p: f32, seed: u64) -> Sampler {
        Sampler::new(Sampling {
            temperature,
            top_p,
            seed,
        })
    }

    /// run.c's one-pass argmax, which [`argmax`] must equal.
    fn argmax_one_pass(row: &[f32]) -> u32 {
        let (mut best, mut top) = (0, row.first().copied().unwrap_or(0.0));
        for (i, &v) in row.iter().enumerate() {
            if v > top {
                (best, top) = (i, v);
            }
        }
        best as u32
    }

    #[test]
    fn argmax_is_the_first_of_equal_maxima_as_run_c_picks() {
        let specials = [
            f32::NAN,
            0.0,
            -0.0,
            1.0,
            -1.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
        ];
        // The sampler's own xorshift, as a source of small integers.
        let mut rng = sampler(1.0, 0.0, 1);
        let mut next = || (rng.random_f32() * 16_777_216.0) as usize;
        for len in [0, 1, 2, 15, 16, 17, 33, 100, 32000] {
            for _ in 0..50 {
                // Few distinct values, so ties are common; some specials among them.
                let row: Vec<f32> = (0..len)
                    .map(|_| match next() % 10 {
                        0 => specials[next() % specials.len()],
                        _ => (next() % 5) as f32 - 2.0,
                    })
                    .collect();
                assert_eq!(argmax(&row), argmax_one_pass(&row), "{row:?}");
            }
        }
        assert_eq!(argmax(&[f32::NAN, 5.0]), 0);
        assert_eq!(argmax(&[1.0, f32::NAN, 5.0, 5.0]), 2);
        assert_eq!(argmax(&[-0.0, 0.0]), 0);
    }

    #[test]
    fn same_seed_same_choices_other_seed_other_choices() {
        let logits: Vec<f32> = (0..50).map(|i| (i % 7) as f32 * 0.3).collect();
        let run = |seed| {
            let mut s = sampler(1.0, 0.0, seed);
            (0..40).map(|_| s.sample_host(&logits)).collect::<Vec<_>>()
        };
        assert_eq!(run(7), run(7));
        assert_ne!(run(7), run(8));
    }

    #[test]
    fn top_p_never_picks_outside_the_nucleus() {
        // Token 3 holds ~88% of the mass; with top_p 0.5 it is the whole nucleus.
        let logits = [0.0, 0.0, 0.0, 4.0, 0.0];
        let mut s = sampler(1.0, 0.5, 1);
        assert!((0..200).all(|_| s.sample_host(&logits) == 3));
    }

    #[test]
    fn low_temperature_concentrates_on_the_top_logit() {
        let logits = [1.0, 2.0, 1.5];
        let mut s = sampler(0.01, 0.0, 3);
        assert!((0..100).all(|_| s.sample_host(&logits) == 1));
    }

    #[test]
    fn sampling_follows_the_distribution() {
        let logits = [0.0, (3.0f32).ln()]; // probabilities 1/4 and 3/4
        let mut s = sampler(1.0, 0.0, 11);
        let ones = (0..4000).filter(|_| s.sample_host(&logits) == 1).count();
        assert!((2800..3200).contains(&ones), "{ones} of 4000");
    }

    #[test]
    fn a_lost_device_is_its_own_error_and_errors_keep_their_innermost_cause() {
        let lost = device_error(ExecutionError::DevicePoisoned {
            reason: "The device is poisoned\nCaused by:\n  Destroyed: Device was destroyed.\n\
                     Backtrace:\nNo backtrace available"
                .into(),
        });
        assert_eq!(
            lost.to_string(),
            "the GPU device was lost (Destroyed: Device was destroyed.)"
        );
        let other = device_error(ExecutionError::WithContext {
            reason: "buffer map\n failed".into(),
        });
        assert_eq!(
            other,
            Error::Device("reading results back from the device failed: buffer map failed".into())
        );
    }
}
