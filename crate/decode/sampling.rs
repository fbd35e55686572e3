//! Picking the next token: greedy (argmax on the device, one id read back), or temperature with
//! optional top-p (nucleus) sampling on the host, driven by llama2.c's xorshift RNG so that a seed
//! gives the same text on every platform.

use serde::{Deserialize, Serialize};

use crate::decode::lanes::{LANES, exp, sum};
use crate::decode::logprobs::{MAX_TOP_LOGPROBS, TokenLogprobs, logprobs};
use crate::error::{Error, Result};
use crate::model::logits::{Logits, argmax};

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
    /// Settings checked: a temperature of at least 0 and a top-p within 0..=1.
    pub fn checked(temperature: f32, top_p: f32, seed: u64) -> Result<Sampling> {
        let sampling = Sampling {
            temperature,
            top_p,
            seed,
        };
        sampling.validate()?;
        Ok(sampling)
    }

    /// The settings as a conditions line says them: `greedy`, or `T=0.8 top-p=0.9` (and
    /// `seed=7` when `seed`).
    pub fn describe(&self, seed: bool) -> String {
        match (self.temperature == 0.0, seed) {
            (true, _) => "greedy".to_string(),
            (false, false) => format!("T={} top-p={}", self.temperature, self.top_p),
            (false, true) => format!(
                "T={} top-p={} seed={}",
                self.temperature, self.top_p, self.seed
            ),
        }
    }

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
    /// Log probabilities for each pick, with this many alternatives.
    logprobs: Option<usize>,
}

impl Sampler {
    pub fn new(settings: Sampling) -> Self {
        // xorshift has a fixed point at 0.
        Self {
            settings,
            rng_state: settings.seed.max(1),
            logprobs: None,
        }
    }

    /// Report each pick's log probability and `top` alternatives ([`TokenLogprobs`]).
    pub fn with_logprobs(mut self, top: Option<usize>) -> Self {
        self.logprobs = top.map(|n| n.min(MAX_TOP_LOGPROBS));
        self
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
    /// read-back for the whole batch: only the ids when every sampler is greedy. A row without a
    /// sampler (a prompt's chunk before its last) is not picked from, so no randomness is used on
    /// it; its place holds 0 (or its argmax, when the read-back is the ids).
    pub async fn sample_rows(
        samplers: &mut [Option<&mut Sampler>],
        logits: Logits,
    ) -> Result<Vec<u32>> {
        let picks = Self::pick_rows(samplers, logits).await?;
        Ok(picks.into_iter().map(|(id, _)| id).collect())
    }

    /// [`sample_rows`](Self::sample_rows), with each pick's log probabilities where its sampler
    /// asks for them ([`with_logprobs`](Self::with_logprobs)). When every row is greedy and none
    /// asks, only the picked ids leave the device.
    pub async fn pick_rows(
        samplers: &mut [Option<&mut Sampler>],
        logits: Logits,
    ) -> Result<Vec<(u32, Option<Box<TokenLogprobs>>)>> {
        if samplers
            .iter()
            .all(|s| s.as_ref().is_none_or(|s| !s.reads_logits()))
        {
            let ids = logits.argmax().await?;
            return Ok(ids.into_iter().map(|id| (id, None)).collect());
        }
        let data = logits.into_vec().await?;
        let vocab = data.len() / samplers.len().max(1);
        Ok(samplers
            .iter_mut()
            .zip(data.chunks_exact(vocab))
            .map(|(sampler, row)| match sampler {
                Some(s) => {
                    let temperature = s.settings.temperature;
                    let id = if temperature > 0.0 {
                        s.sample_host(row)
                    } else {
                        argmax(row)
                    };
                    (id, s.logprobs_of(row, id))
                }
                None => (0, None),
            })
            .collect())
    }

    /// Temperature and top-p on host logits (pure, so tests can drive it).
    pub fn sample_host(&mut self, logits: &[f32]) -> u32 {
        let weights = exponentials(logits, self.settings.temperature);
        let coin = self.random_f32();
        let top_p = self.settings.top_p;
        if top_p <= 0.0 || top_p >= 1.0 {
            return sample_weighted(&weights, coin);
        }
        sample_from(&nucleus(&normalized(weights), top_p), coin)
    }

    /// `id`'s log probabilities in `row` at this sampler's temperature, where it asks for them.
    pub fn logprobs_of(&self, row: &[f32], id: u32) -> Option<Box<TokenLogprobs>> {
        let temperature = self.settings.temperature;
        self.logprobs
            .map(|top| Box::new(logprobs(row, temperature, id, top)))
    }

    /// Whether its picks need each step's whole logits on the host: it samples, or it reports
    /// log probabilities ([`with_logprobs`](Self::with_logprobs)); otherwise the argmax is enough.
    pub fn reads_logits(&self) -> bool {
        self.settings.temperature > 0.0 || self.logprobs.is_some()
    }

    /// Whether this sampler picks the argmax (temperature 0).
    pub fn is_greedy(&self) -> bool {
        self.settings.temperature == 0.0
    }

    /// The distribution a pick draws from, in id order: the softmax at the temperature, and with
    /// top-p only the nucleus (the smallest set of most likely ids whose mass exceeds top-p),
    /// renormalized. For speculative decoding's rejection rule, which needs the probabilities
    /// themselves (temperature above 0).
    pub fn distribution(&self, logits: &[f32]) -> Vec<f32> {
        let mut probs = softmax(logits, self.settings.temperature);
        let top_p = self.settings.top_p;
        if top_p > 0.0 && top_p < 1.0 {
            let mut kept = vec![0.0; probs.len()];
            let nucleus = nucleus(&probs, top_p);
            let total: f32 = nucleus.iter().map(|&(_, p)| p).sum();
            for (id, p) in nucleus {
                kept[id] = p / total;
            }
            probs = kept;
        }
        probs
    }

    /// Draw an id from `probs` (weights in id order; they need not sum to 1).
    pub fn pick(&mut self, probs: &[f32]) -> u32 {
        let coin = self.random_f32();
        sample_weighted(probs, coin)
    }

    /// A uniform draw in `[0, 1)` from this sampler's stream.
    pub fn coin(&mut self) -> f32 {
        self.random_f32()
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
    normalized(exponentials(logits, temperature))
}

/// `exp((logit - largest) / temperature)` of every logit ([`exp`]): the softmax before it is
/// divided by its sum.
fn exponentials(logits: &[f32], temperature: f32) -> Vec<f32> {
    let mut lanes = [f32::NEG_INFINITY; LANES];
    let chunks = logits.chunks_exact(LANES);
    let rest = chunks.remainder();
    for chunk in chunks {
        for (lane, &l) in lanes.iter_mut().zip(chunk) {
            *lane = lane.max(l);
        }
    }
    let max = rest
        .iter()
        .chain(&lanes)
        .copied()
        .fold(f32::NEG_INFINITY, f32::max);
    logits
        .iter()
        .map(|&l| exp((l - max) / temperature))
        .collect()
}

/// `weights` divided by their sum.
fn normalized(mut weights: Vec<f32>) -> Vec<f32> {
    let sum = sum(&weights);
    for w in &mut weights {
        *w /= sum;
    }
    weights
}

/// Draw an id from `weights` (in id order; they need not sum to 1): the first id at which the
/// running sum passes `coin` times the total. The sums go a block of 64 ids at a time ([`sum`]),
/// then id by id within the block the draw lands in.
fn sample_weighted(weights: &[f32], coin: f32) -> u32 {
    const BLOCK: usize = 64;
    let target = coin * sum(weights);
    let mut mass = 0.0;
    for (b, block) in weights.chunks(BLOCK).enumerate() {
        let block_mass = sum(block);
        if target < mass + block_mass {
            let mut running = mass;
            for (i, &w) in block.iter().enumerate() {
                running += w;
                if target < running {
                    return (b * BLOCK + i) as u32;
                }
            }
            // The block's sum in lanes passed the target and its running sum, rounded otherwise,
            // did not: its last id that has any weight.
            let last = block
                .iter()
                .rposition(|&w| w > 0.0)
                .unwrap_or(block.len() - 1);
            return (b * BLOCK + last) as u32;
        }
        mass += block_mass;
    }
    // Rounding, or weights that are not numbers: the last id.
    weights.len().saturating_sub(1) as u32
}

/// Nucleus (top-p): the smallest set of most likely ids whose mass exceeds `top_p`, most likely
/// first (ties in id order). Only the most likely ids are sorted: the first 64, then 4 times as
/// many until their mass passes `top_p`, which gives the list a stable sort of the whole
/// vocabulary gives, summed in the same order. Measured (this project's Intel Xeon, 2026-11-28,
/// 49,152 made-up logits, T=1, top-p 0.95, `Sampler::sample_host`, 3 interleaved rounds): 2.6 /
/// 2.8 / 2.9 ms a pick with the whole vocabulary sorted, 0.42 / 0.38 / 0.37 ms with this, the same
/// picks. 2.7 ms is about what 8 users' whole decode step spends on SmolLM2's weights.
fn nucleus(probs: &[f32], top_p: f32) -> Vec<(usize, f32)> {
    let mut ranked: Vec<(usize, f32)> = probs.iter().copied().enumerate().collect();
    let order = |a: &(usize, f32), b: &(usize, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
    let mut k = ranked.len().min(64);
    loop {
        if k < ranked.len() {
            ranked.select_nth_unstable_by(k - 1, order);
        }
        ranked[..k].sort_unstable_by(order);
        let mut mass = 0.0;
        for (i, &(_, p)) in ranked[..k].iter().enumerate() {
            mass += p;
            if mass > top_p {
                ranked.truncate(i + 1);
                return ranked;
            }
        }
        if k == ranked.len() {
            return ranked;
        }
        k = ranked.len().min(4 * k);
    }
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

    /// The nucleus sorts only the most likely ids, yet is the list a stable sort of the whole
    /// vocabulary gives: the same ids in the same order (ties in id order), cut at the same place,
    /// for nuclei of a few ids, of more than the first 64 and 256 sorted, and of the whole list.
    #[test]
    fn the_nucleus_is_the_whole_sorts_prefix() {
        let reference = |probs: &[f32], top_p: f32| {
            let mut ranked: Vec<(usize, f32)> = probs.iter().copied().enumerate().collect();
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
            ranked.truncate(keep);
            ranked
        };
        let mut state = 7u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 40) as f32 / (1u64 << 24) as f32
        };
        for (vocab, spread, levels) in [
            (50, 4.0, 0),
            (5000, 12.0, 0),
            (5000, 0.5, 0),
            (3000, 1.0, 7),
        ] {
            let logits: Vec<f32> = (0..vocab)
                .map(|_| {
                    let x = next() * spread;
                    // A few levels only: many ties.
                    if levels > 0 {
                        (x * levels as f32).floor()
                    } else {
                        x
                    }
                })
                .collect();
            let probs = softmax(&logits, 1.0);
            for top_p in [0.1, 0.5, 0.9, 0.95, 0.999, 0.999_999_9] {
                let expected = reference(&probs, top_p);
                assert_eq!(
                    nucleus(&probs, top_p),
                    expected,
                    "{vocab} ids, top-p {top_p}"
                );
            }
        }
    }

    /// The sampler's own `exp` against libm's, over what it is given (`x <= 0`) and a little
    /// above: within 2 units in the last place, and exactly 1 at 0.
    #[test]
    fn exp_is_within_two_units_of_libms() {
        assert_eq!(exp(0.0), 1.0);
        assert!(exp(f32::NAN).is_nan());
        assert!(exp(f32::NEG_INFINITY) >= 0.0 && exp(f32::NEG_INFINITY) < 1e-37);
        let mut worst = 0;
        for i in 0..=200_000 {
            let x = -87.0 + i as f32 * (97.0 / 200_000.0);
            let (ours, libm) = (exp(x), x.exp());
            let ulps = (ours.to_bits() as i64 - libm.to_bits() as i64).unsigned_abs();
            worst = worst.max(ulps);
            assert!(
                ulps <= 2,
                "exp({x}) = {ours}, libm {libm}: {ulps} units apart"
            );
        }
        assert!(worst >= 1, "no difference at all: is `exp` libm's?");
    }

    /// A pick walks blocks of ids by their sums: it lands where a running sum id by id lands
    /// (coins away from a boundary), never on an id of weight 0, and on the last id for a coin
    /// just under 1.
    #[test]
    fn weighted_picks_land_where_a_running_sum_does() {
        let weights: Vec<f32> = (0..1000)
            .map(|i| {
                if i % 3 == 0 {
                    0.0
                } else {
                    (i % 17) as f32 + 0.5
                }
            })
            .collect();
        let total: f64 = weights.iter().map(|&w| w as f64).sum();
        let mut state = 3u64;
        for _ in 0..2000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let coin = (state >> 40) as f32 / (1u64 << 24) as f32;
            let id = sample_weighted(&weights, coin) as usize;
            assert!(weights[id] > 0.0, "coin {coin} picked id {id} of weight 0");
            let (before, after): (f64, f64) = (
                weights[..id].iter().map(|&w| w as f64).sum(),
                weights[..=id].iter().map(|&w| w as f64).sum(),
            );
            let target = coin as f64 * total;
            assert!(
                before <= target * (1.0 + 1e-5) && target < after * (1.0 + 1e-5),
                "coin {coin}: id {id} covers {before}..{after}, the target is {target}"
            );
        }
        assert_eq!(sample_weighted(&weights, 0.999_999_9), 998);
        assert_eq!(sample_weighted(&[0.0, 2.0, 0.0], 0.0), 1);
    }

    #[test]
    fn sampling_follows_the_distribution() {
        let logits = [0.0, (3.0f32).ln()]; // probabilities 1/4 and 3/4
        let mut s = sampler(1.0, 0.0, 11);
        let ones = (0..4000).filter(|_| s.sample_host(&logits) == 1).count();
        assert!((2800..3200).contains(&ones), "{ones} of 4000");
    }
}
