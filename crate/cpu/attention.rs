//! Attention's inner loops: a query's scores over a head's cached keys, and the weighted sum of
//! its values, per instruction set.

#[cfg(target_arch = "x86_64")]
use crate::cpu::avx2;
use crate::cpu::isa::Isa;
use crate::cpu::scalar;
#[cfg(target_arch = "wasm32")]
use crate::cpu::simd128;

/// The dot product of two f32 slices, with the best instruction set.
pub fn dot(isa: Isa, a: &[f32], b: &[f32]) -> f32 {
    match isa {
        Isa::Scalar => scalar::dot_f32(a, b),
        #[cfg(target_arch = "x86_64")]
        // SAFETY: both are only produced after detecting AVX2 and FMA.
        Isa::Avx2 | Isa::Avx512Vnni => unsafe { avx2::dot_f32(a, b) },
        #[cfg(target_arch = "wasm32")]
        Isa::Simd128 => simd128::dot_f32(a, b),
    }
}

/// One query's attention scores over a head's cached keys: `scores[j] = dot(query, key j) *
/// scale`, key `j` being `keys[j * stride..][..query.len()]`. One call for all positions, so the
/// dot products inline into one loop: called once per position, their call and dispatch took
/// more time than their arithmetic at a head size of 48 (attention was a fifth of a q8 decode
/// step at 8 users natively, in a profile).
pub fn attention_scores(
    isa: Isa,
    query: &[f32],
    keys: &[f32],
    stride: usize,
    scale: f32,
    scores: &mut [f32],
) {
    let hs = query.len();
    assert!(scores.is_empty() || keys.len() >= (scores.len() - 1) * stride + hs);
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: both are only produced after detecting AVX2 and FMA.
        Isa::Avx2 | Isa::Avx512Vnni => unsafe {
            avx2::attention_scores(query, keys, stride, scale, scores)
        },
        _ => {
            for (j, s) in scores.iter_mut().enumerate() {
                *s = dot(isa, query, &keys[j * stride..][..hs]) * scale;
            }
        }
    }
}

/// The attention's output for one query: `out = sum_j p[j] * value j`, value `j` being
/// `values[j * stride..][..out.len()]`, each lane summed in position order (as a chain of
/// `y += p * x` would), kept in registers across the positions.
pub fn weighted_sum(isa: Isa, p: &[f32], values: &[f32], stride: usize, out: &mut [f32]) {
    let hs = out.len();
    assert!(p.is_empty() || values.len() >= (p.len() - 1) * stride + hs);
    out.fill(0.0);
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: both are only produced after detecting AVX2 and FMA.
        Isa::Avx2 | Isa::Avx512Vnni => unsafe { avx2::weighted_sum(p, values, stride, out) },
        #[cfg(target_arch = "wasm32")]
        Isa::Simd128 => simd128::weighted_sum(p, values, stride, out),
        Isa::Scalar => scalar::weighted_sum_from(0, p, values, stride, out),
    }
}

/// The positions of keys attention takes a block at a time ([`Running::add`]). A block's keys
/// and values (32 positions of a 64-wide head: 16 KB) stay in L1 while every query of a prompt
/// that sees them takes them, where a query walking all its keys read them from L2 once a query.
/// Measured against that (this project's 2-core AMD EPYC, SmolLM2 Q8_0, 1 thread, prefill tok/s,
/// rounds interleaved): a 530-token prompt 478 / 486 / 482 -> 503 / 488 / 519, a 1,981-token one
/// 217 / 219 -> 244 / 238 (the scores' own kernel, `avx2.rs`, then took it to 329 / 338).
pub const KEY_BLOCK: usize = 32;

/// One query's attention with its keys taken a block at a time (the softmax online, as
/// FlashAttention's): the largest score so far, the sum of `exp(score - largest)`, and, in the
/// caller's output row, the values weighted by those exponentials. A query's arithmetic depends
/// only on its own keys, taken in blocks of [`KEY_BLOCK`] positions counted from position 0, so it
/// is the same bits in a prompt (queries in any groups, on any thread) and alone in decode.
#[derive(Clone, Copy, Debug)]
pub struct Running {
    max: f32,
    sum: f32,
    started: bool,
}

impl Default for Running {
    fn default() -> Self {
        Running {
            max: f32::NEG_INFINITY,
            sum: 0.0,
            started: false,
        }
    }
}

/// A head's cached keys and values: position `j`'s row at `j * stride` of each.
#[derive(Clone, Copy)]
pub struct HeadCache<'a> {
    pub keys: &'a [f32],
    pub values: &'a [f32],
    pub stride: usize,
}

impl Running {
    /// Takes the keys and values at `positions` (within one block) into the query's attention;
    /// `out` holds the weighted sum so far, `part` is room for one row.
    #[allow(clippy::too_many_arguments)]
    pub fn add(
        &mut self,
        isa: Isa,
        query: &[f32],
        head: HeadCache,
        positions: std::ops::Range<usize>,
        scale: f32,
        out: &mut [f32],
        part: &mut [f32],
    ) {
        let mut all_scores = [0.0f32; KEY_BLOCK];
        let scores = &mut all_scores[..positions.len()];
        let at = positions.start * head.stride;
        attention_scores(isa, query, &head.keys[at..], head.stride, scale, scores);
        let (max, sum) = exponentials(isa, &mut all_scores, positions.len(), self.max);
        let scores = &all_scores[..positions.len()];
        weighted_sum(isa, scores, &head.values[at..], head.stride, part);
        // What the earlier blocks' exponentials become against the new largest score (before
        // the first block: 0, and `out` starts at 0, so it becomes this block's sum exactly).
        let rescale = if self.started {
            (self.max - max).exp()
        } else {
            out.fill(0.0);
            0.0
        };
        for (o, p) in out.iter_mut().zip(part.iter()) {
            *o = *o * rescale + p;
        }
        self.sum = self.sum * rescale + sum;
        self.max = max;
        self.started = true;
    }

    /// The attention's output: the weighted sum over the sum of the weights.
    pub fn finish(&self, out: &mut [f32]) {
        let inv = 1.0 / self.sum;
        for o in out.iter_mut() {
            *o *= inv;
        }
    }
}

/// The largest of the first `n` scores of `x` and `max`, then `exp(score - largest)` of each in
/// place and their sum. AVX2: 8 lanes at a time for all three (the other lanes of `x` padded out),
/// where one score after another took a chain of dependent additions a block; elsewhere one by one.
fn exponentials(isa: Isa, x: &mut [f32; KEY_BLOCK], n: usize, max: f32) -> (f32, f32) {
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: both are only produced after detecting AVX2 and FMA.
        Isa::Avx2 | Isa::Avx512Vnni => unsafe { avx2::exponentials(x, n, max) },
        _ => {
            let max = x[..n].iter().copied().fold(max, f32::max);
            for v in &mut x[..n] {
                *v = (*v - max).exp();
            }
            (max, x[..n].iter().sum())
        }
    }
}
