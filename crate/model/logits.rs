//! Logits where the forward pass left them, and how a pick reads them back.

#[cfg(feature = "gpu")]
use burn::{prelude::*, tensor::ExecutionError};

#[cfg(feature = "gpu")]
use crate::error::Error;
use crate::error::Result;

/// Logits `[rows, vocab]` where the forward pass left them: on the GPU, or on the host (the CPU
/// backend), where a pick needs no round trip through burn. (In the page's worker that round trip,
/// a burn tensor, its argmax and the read-back, took 0.2 to 0.7 ms a token, up to a quarter of a
/// q8 decode step of stories15M.)
pub enum Logits {
    #[cfg(feature = "gpu")]
    Device(Box<Tensor<2>>),
    /// Row-major, `vocab` values a row.
    Host { vocab: usize, data: Vec<f32> },
}

impl Logits {
    /// The argmax of each row (the first of equal maxima, as run.c's); on the GPU it is computed
    /// there and only the ids are read back.
    pub async fn argmax(self) -> Result<Vec<u32>> {
        match self {
            #[cfg(feature = "gpu")]
            Logits::Device(t) => {
                let data = (*t)
                    .argmax(1)
                    .into_data_async()
                    .await
                    .map_err(device_error)?;
                // The backend's integer type (i32 on wgpu), read as it is: burn's converting
                // iterator links a cast for every element type, 2 kB of the page's wasm.
                let ids = match data.as_slice::<i32>() {
                    Ok(ids) => Ok(ids.iter().map(|&id| id as u32).collect()),
                    Err(_) => data
                        .as_slice::<i64>()
                        .map(|ids| ids.iter().map(|&id| id as u32).collect()),
                };
                ids.map_err(|e| {
                    Error::Device(format!("reading the picked tokens back failed: {e:?}"))
                })
            }
            Logits::Host { vocab, data, .. } => Ok(data.chunks_exact(vocab).map(argmax).collect()),
        }
    }

    /// Every value, row-major, on the host.
    pub async fn into_vec(self) -> Result<Vec<f32>> {
        match self {
            #[cfg(feature = "gpu")]
            Logits::Device(t) => {
                let data = (*t).into_data_async().await.map_err(device_error)?;
                data.try_into_vec::<f32>()
                    .map_err(|e| Error::Device(format!("reading the logits back failed: {e:?}")))
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

#[cfg(feature = "gpu")]
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
#[cfg(feature = "gpu")]
fn root_cause(message: &str) -> String {
    let message = message.split("Backtrace:").next().unwrap_or(message);
    let cause = message.rsplit("Caused by:").next().unwrap_or(message);
    cause.split_whitespace().collect::<Vec<_>>().join(" ")
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

    #[cfg(feature = "gpu")]
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
