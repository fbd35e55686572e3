//! The memory-bandwidth ceiling of decode: a token reads every weight once, and the keys and
//! values of every earlier position, so a machine that reads memory at B bytes a second cannot
//! decode faster than B over those bytes. Measured bandwidth in, a ceiling and this run's share of
//! it out: the figure that says why a quantization is faster (fewer bytes a token, a higher
//! ceiling) and how far a run is from what the memory allows.

use serde::Serialize;

/// A run's decode against the bandwidth this machine's memory gave.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BandwidthCeiling {
    /// Bytes a second read, measured apart from the run (the engine's threads reading a buffer
    /// far larger than the caches), in GB/s.
    pub read_gb_per_s: f64,
    /// Weights read a decode token, as held.
    pub weight_bytes: u64,
    /// Keys and values read a decode token at the run's mean depth.
    pub kv_bytes: u64,
    /// The ceiling: read bandwidth over the bytes a token reads.
    pub tps: f64,
    /// The run's decode tok/s over the ceiling (0 to 1, more where caches hold the weights).
    pub share: Option<f64>,
    /// Sequences a step decodes together (1 but in a load level): they read the weights once
    /// between them, so a token reads `weight_bytes / batch` of them, and the ceiling is the
    /// aggregate's.
    pub batch: usize,
    /// All of it in one sentence ([`BandwidthCeiling::said`]).
    pub sentence: String,
}

impl BandwidthCeiling {
    /// The ceiling of a run of `prompt_tokens` and `output_tokens` whose decode reads
    /// `weight_bytes` and `kv_bytes_per_position` for each earlier position a token (at the run's
    /// mean depth: the prompt and half the output), at `read_gb_per_s`; `decode_tps` the run's.
    pub fn new(
        read_gb_per_s: f64,
        weight_bytes: u64,
        kv_bytes_per_position: u64,
        tokens: (usize, usize),
        decode_tps: Option<f64>,
    ) -> BandwidthCeiling {
        let one = (read_gb_per_s, weight_bytes, kv_bytes_per_position);
        BandwidthCeiling::batched(one, tokens, 1, decode_tps)
    }

    /// The aggregate ceiling of steps of `batch` sequences, each of `prompt_tokens` and
    /// `output_tokens` (a load level's means): a step reads the weights once for all of them and
    /// each one's keys and values, so a token reads `weights / batch + its keys and values`;
    /// `aggregate_tps` the level's decode (every sequence's tokens after its first).
    pub fn batched(
        (read_gb_per_s, weight_bytes, kv_bytes_per_position): (f64, u64, u64),
        (prompt_tokens, output_tokens): (usize, usize),
        batch: usize,
        aggregate_tps: Option<f64>,
    ) -> BandwidthCeiling {
        let batch = batch.max(1);
        let mean_depth = prompt_tokens as f64 + output_tokens as f64 / 2.0;
        let kv_bytes = (kv_bytes_per_position as f64 * mean_depth) as u64;
        let bytes = (weight_bytes as f64 / batch as f64 + kv_bytes as f64).max(1.0);
        let tps = read_gb_per_s * 1e9 / bytes;
        let mut ceiling = BandwidthCeiling {
            read_gb_per_s,
            weight_bytes,
            kv_bytes,
            tps,
            share: aggregate_tps.filter(|_| tps > 0.0).map(|d| d / tps),
            batch,
            sentence: String::new(),
        };
        ceiling.sentence = ceiling.said();
        ceiling
    }

    /// One sentence: "reading 143.0 MB a token (weights 142.6 MB, keys and values 0.4 MB) at
    /// 21.4 GB/s allows 150 tok/s; this run makes 120: 80% of it, so memory is what holds it
    /// back".
    /// In a batch: "a step of 4 sequences reads the weights (111.6 MB) once for all of them and
    /// each one's keys and values (0.5 MB): 28.4 MB a token at 21.0 GB/s allows 739 tok/s in
    /// all; this level decodes 240: ...".
    pub fn said(&self) -> String {
        let mb = |b: u64| b as f64 / 1e6;
        let mut s = if self.batch > 1 {
            format!(
                "a step of {} sequences reads the weights ({:.1} MB) once for all of them and each \
                 one's keys and values ({:.1} MB): {:.1} MB a token at {:.1} GB/s allows {:.0} \
                 tok/s in all",
                self.batch,
                mb(self.weight_bytes),
                mb(self.kv_bytes),
                mb(self.weight_bytes) / self.batch as f64 + mb(self.kv_bytes),
                self.read_gb_per_s,
                self.tps
            )
        } else {
            format!(
                "reading {:.1} MB a token (weights {:.1} MB, keys and values {:.1} MB) at {:.1} \
                 GB/s allows {:.0} tok/s",
                mb(self.weight_bytes + self.kv_bytes),
                mb(self.weight_bytes),
                mb(self.kv_bytes),
                self.read_gb_per_s,
                self.tps
            )
        };
        let run = if self.batch > 1 {
            "level decodes"
        } else {
            "run makes"
        };
        if let Some(share) = self.share {
            s.push_str(&format!(
                "; this {run} {:.0}: {:.0}% of it, so {}",
                share * self.tps,
                share * 100.0,
                BandwidthCeiling::bound(share)
            ));
        }
        s
    }

    /// Which bound holds a run at `share` of the ceiling, in words.
    fn bound(share: f64) -> &'static str {
        if share > 1.05 {
            "caches held part of what a token reads (or the bandwidth was measured at a busier moment than the run)"
        } else if share >= 0.75 {
            "memory is what holds it back: fewer bytes a token (a smaller quantization) is what would go faster"
        } else {
            "memory is not all that holds it back: the arithmetic, waiting (threads for each other, a GPU's dispatches for their turn) and the host's work between steps take the rest"
        }
    }
}

/// A GPU run's decode against what its dispatches cost: every dispatch costs some microseconds
/// of recording, submitting and running whatever its size, so a step of D dispatches at c us each
/// cannot take less than D x c, and decode cannot pass 1 / (D x c) tokens a second.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DispatchFloor {
    /// Dispatches a decode token took (the run's, counted).
    pub dispatches_per_token: f64,
    /// What one more dispatch cost, measured apart (an empty kernel's, end to end), in us.
    pub dispatch_us: f64,
    /// The most tok/s those dispatches allow.
    pub tps: f64,
    /// The run's decode tok/s over it.
    pub share: Option<f64>,
    pub sentence: String,
}

impl DispatchFloor {
    pub fn new(dispatches_per_token: f64, dispatch_us: f64, decode_tps: Option<f64>) -> Self {
        let floor_us = dispatches_per_token * dispatch_us;
        let tps = if floor_us > 0.0 {
            1e6 / floor_us
        } else {
            f64::INFINITY
        };
        let share = decode_tps
            .filter(|_| tps.is_finite() && tps > 0.0)
            .map(|d| d / tps);
        let mut sentence = format!(
            "a token takes {dispatches_per_token:.0} dispatches at {dispatch_us:.1} us each \
             (an empty kernel's, measured apart), which allows {tps:.0} tok/s"
        );
        if let Some(share) = share {
            sentence.push_str(&format!(
                "; this run makes {:.0}: {:.0}% of it",
                share * tps,
                share * 100.0
            ));
        }
        DispatchFloor {
            dispatches_per_token,
            dispatch_us,
            tps,
            share,
            sentence,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_reads_the_weights_once_for_all_its_sequences() {
        // 100 MB of weights, 1 kB of keys and values a position, 100 positions deep on average.
        let one = (20.0, 100_000_000, 1_000);
        let alone = BandwidthCeiling::batched(one, (50, 100), 1, Some(100.0));
        let four = BandwidthCeiling::batched(one, (50, 100), 4, Some(300.0));
        assert_eq!(alone.kv_bytes, 100_000);
        assert!((alone.tps - 20e9 / 100_100_000.0).abs() < 1e-9);
        assert!(
            (four.tps - 20e9 / 25_100_000.0).abs() < 1e-9,
            "{}",
            four.tps
        );
        assert!((four.share.unwrap() - 300.0 / four.tps).abs() < 1e-12);
        assert_eq!(
            alone,
            BandwidthCeiling::new(20.0, 100_000_000, 1_000, (50, 100), Some(100.0))
        );
        assert!(
            alone.sentence.starts_with("reading 100.1 MB a token"),
            "{}",
            alone.sentence
        );
        assert!(
            four.sentence.starts_with(
                "a step of 4 sequences reads the weights (100.0 MB) once for all of them and each \
                 one's keys and values (0.1 MB): 25.1 MB a token at 20.0 GB/s allows 797 tok/s in \
                 all; this level decodes 300: 38% of it"
            ),
            "{}",
            four.sentence
        );
    }
}
