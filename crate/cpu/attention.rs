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
