//! f32 arithmetic over many values that the compiler vectorizes and that gives the same bits on
//! every platform: a sum in lanes and an exponential from additions and multiplications alone
//! (the sampler's, so that a seed gives the same picks everywhere, and the log probabilities').

/// The lanes [`sum`] keeps apart.
pub(crate) const LANES: usize = 8;

/// The sum of `x`, value `i` into lane `i % 8` in order and the lanes added in a fixed tree: the
/// same bits on every platform (f32 additions in an order the code fixes), and one chain of
/// additions, each waiting on the last, only an eighth as long.
pub(crate) fn sum(x: &[f32]) -> f32 {
    let mut lanes = [0.0f32; LANES];
    let chunks = x.chunks_exact(LANES);
    let rest = chunks.remainder();
    for chunk in chunks {
        for (lane, &v) in lanes.iter_mut().zip(chunk) {
            *lane += v;
        }
    }
    for (lane, &v) in lanes.iter_mut().zip(rest) {
        *lane += v;
    }
    ((lanes[0] + lanes[4]) + (lanes[1] + lanes[5]))
        + ((lanes[2] + lanes[6]) + (lanes[3] + lanes[7]))
}

/// `exp(x)` from f32 additions, multiplications and bit operations alone, so that a seed gives
/// the same picks on every platform (libm's `expf` differs between them) and a compiler can run
/// several at once: Cephes' `expf` (`x = n ln 2 + r`, `exp(r)` by a degree-6 polynomial, `2^n` made
/// in the exponent bits, `n` rounded by adding 1.5 * 2^23), as `cpu/avx2.rs`'s `exp8` without its
/// fused multiply-adds. `x` is held within -87.3..=88.3, so `2^n` stays a normal number (below, the
/// smallest normal; above, about 2e38, not infinity); NaN stays NaN. Within 2 units in the last
/// place of `f32::exp` there (`exp_is_within_two_units_of_libms`). Measured (this project's Intel
/// Xeon, 2026-11-28, 49,152 made-up logits, T=1, `Sampler::sample_host`, 3 interleaved rounds):
/// libm's `expf`, one call a logit, was half of a pick and the sums' one chain of additions most of
/// the rest; with this and [`sum`], top-p 1 took 0.39 / 0.31 / 0.31 ms a pick before and 0.11 /
/// 0.11 / 0.11 after, top-p 0.95 (after the nucleus's own change) 0.42 / 0.38 / 0.37 and 0.27 /
/// 0.27 / 0.26. At 8 users each step makes 8 picks.
#[inline(always)]
pub(crate) fn exp(x: f32) -> f32 {
    exp_by(x, |a, b, c| a * b + c)
}

/// [`exp`] with its multiply-adds made by `madd(a, b, c)` (`a * b + c`): unfused (two roundings)
/// in [`exp`], where a seed's picks must be the same everywhere; fused where a sum of many is all
/// that is wanted and the processor fuses them (`logprobs.rs`).
#[inline(always)]
pub(crate) fn exp_by(x: f32, madd: impl Fn(f32, f32, f32) -> f32) -> f32 {
    const ROUND: f32 = 12_582_912.0;
    // No branch for NaN, so that the compiler vectorizes a loop of these: a NaN passes through
    // the clamp and every operation after it as NaN.
    let x = x.clamp(-87.336_54, 88.3);
    let t = madd(x, std::f32::consts::LOG2_E, ROUND);
    let n = t - ROUND;
    let r = madd(n, 2.121_944_4e-4, madd(n, -0.693_359_4, x));
    let p = [
        1.398_199_9e-3,
        8.333_452e-3,
        4.166_579_6e-2,
        0.166_666_65,
        0.5,
    ]
    .into_iter()
    .fold(1.987_569_1e-4, |p, c| madd(p, r, c));
    let y = madd(p * r, r, r) + 1.0;
    let n = t.to_bits() as i32 - ROUND.to_bits() as i32;
    y * f32::from_bits(((n + 127) << 23) as u32)
}
