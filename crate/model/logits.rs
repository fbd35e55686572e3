//! Logits where the forward pass left them, and how a pick reads them back.

use std::future::Future;
use std::pin::Pin;

use crate::error::Result;

/// A read-back under way (a GPU's: natively it waits on the device, in a browser on WebGPU's
/// promise).
pub type ReadBack<T> = Pin<Box<dyn Future<Output = Result<T>>>>;

/// Logits a backend left on its device (`gpu/`), read back only as far as a pick needs.
pub trait DeviceLogits: std::any::Any {
    /// How many rows.
    fn rows(&self) -> usize;
    /// These rows followed by `next`'s, which the same forward call made after them.
    fn then(self: Box<Self>, next: Box<dyn DeviceLogits>) -> Box<dyn DeviceLogits>;
    /// The argmax of each row, computed on the device: only the ids come back.
    fn argmax(self: Box<Self>) -> ReadBack<Vec<u32>>;
    /// Every value, row-major.
    fn into_vec(self: Box<Self>) -> ReadBack<Vec<f32>>;
}

/// Logits `[rows, vocab]` where the forward pass left them: on the GPU, or on the host (the CPU
/// backend), where a pick needs no round trip.
pub enum Logits {
    Device(Box<dyn DeviceLogits>),
    /// Row-major, `vocab` values a row.
    Host {
        vocab: usize,
        data: Vec<f32>,
    },
}

impl Logits {
    /// Parts one forward call made (its chunks'), as one: their rows one after another.
    pub fn cat(parts: Vec<Logits>) -> Logits {
        let mut parts = parts.into_iter();
        let Some(mut all) = parts.next() else {
            return Logits::Host {
                vocab: 0,
                data: Vec::new(),
            };
        };
        for part in parts {
            all = match (all, part) {
                (Logits::Device(a), Logits::Device(b)) => Logits::Device(a.then(b)),
                (Logits::Host { vocab, mut data }, Logits::Host { data: more, .. }) => {
                    data.extend(more);
                    Logits::Host { vocab, data }
                }
                _ => unreachable!("one forward call's logits are all on one backend"),
            };
        }
        all
    }

    /// The argmax of each row (the first of equal maxima, as run.c's); on the GPU it is computed
    /// there and only the ids are read back.
    pub async fn argmax(self) -> Result<Vec<u32>> {
        match self {
            Logits::Device(d) => d.argmax().await,
            Logits::Host { vocab, data, .. } => Ok(data.chunks_exact(vocab).map(argmax).collect()),
        }
    }

    /// Every value, row-major, on the host.
    pub async fn into_vec(self) -> Result<Vec<f32>> {
        match self {
            Logits::Device(d) => d.into_vec().await,
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
pub(crate) fn argmax(row: &[f32]) -> u32 {
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

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

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
        let mut rng = rand::rngs::SmallRng::seed_from_u64(1);
        let mut next = || rng.random_range(0..1usize << 24);
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
}
