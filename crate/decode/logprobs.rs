//! A generated token's log probability, its rank and the likeliest tokens at its step, read from
//! the step's logits on the host (what `logprobs` in serve's answers, `generate --logprobs` and
//! the page's token inspector show).

use serde::Serialize;

use crate::decode::lanes::{LANES, exp_by};

/// A generated token's log probability and the likeliest tokens at its step, as OpenAI's
/// `logprobs` report them: natural logs of the softmax of the step's logits divided by the
/// sampler's temperature (1 for greedy), before top-p cuts the tail.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TokenLogprobs {
    pub logprob: f32,
    /// The chosen token's rank among the whole vocabulary (1: the likeliest).
    pub rank: usize,
    /// The chosen token's bytes (part of a character, for a byte token; none for a special).
    pub bytes: Vec<u8>,
    /// The likeliest tokens, likeliest first (as many as asked).
    pub top: Vec<Alternative>,
}

/// One of the likeliest tokens at a step.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Alternative {
    pub id: u32,
    pub logprob: f32,
    pub bytes: Vec<u8>,
}

/// The most alternatives a token's [`TokenLogprobs`] lists (OpenAI's `top_logprobs` limit).
pub const MAX_TOP_LOGPROBS: usize = 20;

/// `id`'s log probability in `row` at `temperature` (0: greedy, read at 1), its rank, and the
/// `top` likeliest ids ([`TokenLogprobs`]; their bytes are the tokenizer's to fill in).
///
/// The page's token inspector keeps these for every generated token, so they cost a few passes
/// over the row that the compiler vectorizes, not a sort: the likeliest by a pass that looks
/// inside a block of logits only where the block's largest beats the last one kept, the sum of
/// the softmax's exponentials by [`exp_by`] in lanes (added up in f64), the rank by counting. At
/// 49,152 logits this is about a tenth of what a sort and f64 exponentials cost (`sample_bench`,
/// docs/measurements.md); the log probabilities agree with f64 arithmetic to about 1e-6.
/// Natively the passes run in AVX2's wider lanes with fused multiply-adds where the processor has
/// them (the sum's exponentials then round once a multiply-add: they differ from the sampler's in
/// the last place, which a sum of thousands does not show).
pub fn logprobs(row: &[f32], temperature: f32, id: u32, top: usize) -> TokenLogprobs {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
        #[target_feature(enable = "avx2,fma")]
        fn wide(row: &[f32], temperature: f32, id: u32, top: usize) -> TokenLogprobs {
            logprobs_by(row, temperature, id, top, f32::mul_add)
        }
        // SAFETY: the processor has AVX2 and FMA, checked just above.
        return unsafe { wide(row, temperature, id, top) };
    }
    logprobs_by(row, temperature, id, top, |a, b, c| a * b + c)
}

/// [`logprobs`], its exponentials' multiply-adds made by `madd` ([`exp_by`]).
#[inline(always)]
fn logprobs_by(
    row: &[f32],
    temperature: f32,
    id: u32,
    top: usize,
    madd: impl Fn(f32, f32, f32) -> f32 + Copy,
) -> TokenLogprobs {
    let t = if temperature > 0.0 { temperature } else { 1.0 };
    let likeliest = likeliest(row, top.max(1));
    let max = likeliest.first().map_or(f32::NEG_INFINITY, |&(_, l)| l);
    let log_sum = exp_sum(row, max, t, madd).ln();
    let logprob = |l: f32| ((l as f64 - max as f64) / t as f64 - log_sum) as f32;
    let chosen = row[id as usize];
    // Ties rank by id, as the argmax picks the first of equals.
    let rank =
        1 + count_above(row, chosen) + row[..id as usize].iter().filter(|&&l| l == chosen).count();
    TokenLogprobs {
        logprob: logprob(chosen),
        rank,
        bytes: Vec::new(),
        top: likeliest
            .into_iter()
            .take(top)
            .map(|(id, l)| Alternative {
                id,
                logprob: logprob(l),
                bytes: Vec::new(),
            })
            .collect(),
    }
}

/// The `n` largest logits of `row` with their ids, largest first, ties by id (as a stable sort
/// of the whole row would give them). A block of [`BLOCK`] logits is looked into only where its
/// largest (found in lanes) beats the last one kept, which after the first few blocks is rare.
#[inline(always)]
fn likeliest(row: &[f32], n: usize) -> Vec<(u32, f32)> {
    const BLOCK: usize = 64;
    let n = n.min(row.len());
    let mut kept: Vec<(u32, f32)> = Vec::with_capacity(n + 1);
    let offer = |kept: &mut Vec<(u32, f32)>, id: usize, l: f32| {
        // Later ids go after equal logits already kept; a NaN is never kept.
        if l.is_nan() || kept.len() == n && l <= kept[n - 1].1 {
            return;
        }
        let at = kept.partition_point(|&(_, k)| k >= l);
        kept.insert(at, (id as u32, l));
        kept.truncate(n);
    };
    let blocks = row.chunks_exact(BLOCK);
    let rest = row.len() - blocks.remainder().len();
    for (b, block) in blocks.enumerate() {
        if kept.len() == n {
            let mut lanes = [f32::NEG_INFINITY; LANES];
            for chunk in block.chunks_exact(LANES) {
                for (lane, &l) in lanes.iter_mut().zip(chunk) {
                    *lane = if l > *lane { l } else { *lane };
                }
            }
            let largest = lanes
                .iter()
                .fold(f32::NEG_INFINITY, |m, &l| if l > m { l } else { m });
            if largest <= kept[n - 1].1 {
                continue;
            }
        }
        for (i, &l) in block.iter().enumerate() {
            offer(&mut kept, b * BLOCK + i, l);
        }
    }
    for (i, &l) in row[rest..].iter().enumerate() {
        offer(&mut kept, rest + i, l);
    }
    kept
}

/// The sum of `exp((l - max) / t)` over `row`, in lanes of [`exp_by`], added up in f64.
#[inline(always)]
fn exp_sum(row: &[f32], max: f32, t: f32, madd: impl Fn(f32, f32, f32) -> f32 + Copy) -> f64 {
    let mut lanes = [0.0f32; 2 * LANES];
    let chunks = row.chunks_exact(2 * LANES);
    let rest = chunks.remainder();
    let scale = 1.0 / t;
    for chunk in chunks {
        for (lane, &l) in lanes.iter_mut().zip(chunk) {
            *lane += exp_by((l - max) * scale, madd);
        }
    }
    let tail: f64 = rest
        .iter()
        .map(|&l| exp_by((l - max) * scale, madd) as f64)
        .sum();
    lanes.iter().map(|&l| l as f64).sum::<f64>() + tail
}

/// How many of `row` are larger than `value`, counted in lanes.
#[inline(always)]
fn count_above(row: &[f32], value: f32) -> usize {
    let mut lanes = [0u32; LANES];
    let chunks = row.chunks_exact(LANES);
    let rest = chunks.remainder();
    for chunk in chunks {
        for (lane, &l) in lanes.iter_mut().zip(chunk) {
            *lane += u32::from(l > value);
        }
    }
    lanes.iter().map(|&c| c as usize).sum::<usize>() + rest.iter().filter(|&&l| l > value).count()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// The definition, slowly: f64 exponentials over the row, every id sorted by logit.
    fn logprobs_by_sorting(row: &[f32], t: f32, id: u32, top: usize) -> (f64, usize, Vec<u32>) {
        let t = if t > 0.0 { t as f64 } else { 1.0 };
        let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
        let log_sum = row
            .iter()
            .map(|&l| ((l as f64 - max) / t).exp())
            .sum::<f64>()
            .ln();
        let mut order: Vec<u32> = (0..row.len() as u32).collect();
        order.sort_by(|a, b| row[*b as usize].total_cmp(&row[*a as usize]));
        let rank = 1 + order.iter().position(|&i| i == id).unwrap();
        order.truncate(top);
        ((row[id as usize] as f64 - max) / t - log_sum, rank, order)
    }

    #[test]
    fn logprobs_match_their_definition_ties_and_tails_included() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        for (len, t, top) in [
            (1, 0.0, 5),
            (7, 1.0, 20),
            (50, 0.0, 5),
            (49_157, 0.7, 5),
            (1000, 2.0, 0),
        ] {
            // Logits on a coarse grid, so many are equal: ties rank by id.
            let row: Vec<f32> = (0..len)
                .map(|_| rng.random_range(0..=40) as f32 * 0.25 - 5.0)
                .collect();
            for id in [0, len / 3, len - 1] {
                let got = logprobs(&row, t, id as u32, top);
                let (logprob, rank, ids) = logprobs_by_sorting(&row, t, id as u32, top);
                assert!(
                    (got.logprob as f64 - logprob).abs() < 1e-5,
                    "{len}: {got:?} {logprob}"
                );
                assert_eq!(got.rank, rank, "{len} {id}");
                assert_eq!(
                    got.top.iter().map(|a| a.id).collect::<Vec<_>>(),
                    ids,
                    "{len}"
                );
                for a in &got.top {
                    let (want, ..) = logprobs_by_sorting(&row, t, a.id, 0);
                    assert!((a.logprob as f64 - want).abs() < 1e-5);
                }
            }
        }
    }
}
