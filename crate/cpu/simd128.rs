//! SIMD128 kernels for WebAssembly (and relaxed SIMD's fused multiply-add in the page's second
//! build): f32 grids, activation quantization and attention. Block kernels are in `packed/`.

use std::arch::wasm32::*;

use crate::cpu::tile::{Q8Rows, grid_len};
use crate::formats::BLOCK;

#[inline(always)]
fn hsum(v: v128) -> f32 {
    f32x4_extract_lane::<0>(v)
        + f32x4_extract_lane::<1>(v)
        + f32x4_extract_lane::<2>(v)
        + f32x4_extract_lane::<3>(v)
}

/// `acc + a * b`: baseline SIMD128 has no fused multiply-add, so a multiply and an add; the
/// page's second build (`make pkg`: `pkg/relaxed/`, built with `-C
/// target-feature=+relaxed-simd`, for browsers that run it) uses relaxed SIMD's
/// `f32x4.relaxed_madd`, one `vfmadd` on an x86 with FMA. Fused, a product is not rounded
/// before it is added, so that build's f32 results differ from the baseline's by rounding;
/// within a build every kernel still sums each pair in one order.
///
/// Measured in the page (Chromium 156, synthetic stories15M f32, 128 tokens a user, 3 rounds
/// interleaved, aggregate tok/s), fused against not: 917 against 766-769 at 8 users (the f32
/// grid is bound by arithmetic there), 465 against 400-435 at 1 user (bound by memory).
#[inline(always)]
pub(crate) fn mul_add(acc: v128, a: v128, b: v128) -> v128 {
    #[cfg(target_feature = "relaxed-simd")]
    return f32x4_relaxed_madd(a, b, acc);
    #[cfg(not(target_feature = "relaxed-simd"))]
    f32x4_add(acc, f32x4_mul(a, b))
}

#[inline(always)]
pub fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let mut acc = [f32x4_splat(0.0); 4];
    let mut i = 0;
    // SAFETY: every load is within 0..n of both slices (unaligned loads are allowed).
    unsafe {
        while i + 16 <= n {
            for (k, acc) in acc.iter_mut().enumerate() {
                let x = v128_load(pa.add(i + 4 * k) as *const v128);
                let y = v128_load(pb.add(i + 4 * k) as *const v128);
                *acc = mul_add(*acc, x, y);
            }
            i += 16;
        }
        while i + 4 <= n {
            let x = v128_load(pa.add(i) as *const v128);
            let y = v128_load(pb.add(i) as *const v128);
            acc[0] = mul_add(acc[0], x, y);
            i += 4;
        }
    }
    let v = f32x4_add(f32x4_add(acc[0], acc[1]), f32x4_add(acc[2], acc[3]));
    let mut sum = hsum(v);
    while i < n {
        sum += a[i] * b[i];
        i += 1;
    }
    sum
}

/// [`crate::cpu::quantize::quantize_rows_q8_with`], 32 values (a block) at a time.
pub fn quantize_q8(x: &[f32], out: &mut Q8Rows) {
    for block in x.chunks_exact(BLOCK) {
        // SAFETY: the block holds 32 values.
        let v: [v128; 8] =
            std::array::from_fn(|k| unsafe { v128_load(block.as_ptr().add(4 * k) as *const v128) });
        // `pmax` keeps the first operand when the second is NaN, as `f32::max` does.
        let m = v
            .iter()
            .fold(f32x4_splat(0.0), |m, v| f32x4_pmax(m, f32x4_abs(*v)));
        let amax = f32x4_extract_lane::<0>(m)
            .max(f32x4_extract_lane::<1>(m))
            .max(f32x4_extract_lane::<2>(m).max(f32x4_extract_lane::<3>(m)));
        let inv = f32x4_splat(crate::cpu::tile::inverse(amax));
        out.scales
            .push(crate::cpu::tile::activation_scale(amax / 127.0));
        // To the nearest, ties to even (as the scalar one); NaN converts to 0 as there.
        let ints = v.map(|v| i32x4_trunc_sat_f32x4(f32x4_nearest(f32x4_mul(v, inv))));
        let words: [v128; 4] =
            std::array::from_fn(|k| i16x8_narrow_i32x4(ints[2 * k], ints[2 * k + 1]));
        let bytes = [
            i8x16_narrow_i16x8(words[0], words[1]),
            i8x16_narrow_i16x8(words[2], words[3]),
        ];
        let at = out.quants.len();
        out.quants.resize(at + BLOCK, 0);
        for (k, b) in bytes.iter().enumerate() {
            // SAFETY: the 32 bytes just made room for.
            unsafe { v128_store(out.quants.as_mut_ptr().add(at + 16 * k) as *mut v128, *b) };
        }
    }
}

/// [`crate::cpu::attention::weighted_sum`]: 16 lanes of the output at a time held in 4 registers over all
/// positions, then 4, then one; each lane gets the scalar loop's multiply and add in the same
/// order.
pub fn weighted_sum(p: &[f32], values: &[f32], stride: usize, out: &mut [f32]) {
    let hs = out.len();
    let pv = values.as_ptr();
    let mut i = 0;
    // SAFETY: every load is within value j's `hs` lanes (asserted by the caller), every
    // store within `out`.
    unsafe {
        while i + 16 <= hs {
            let mut acc = [f32x4_splat(0.0); 4];
            for (j, &p) in p.iter().enumerate() {
                let a = f32x4_splat(p);
                for (k, acc) in acc.iter_mut().enumerate() {
                    let v = v128_load(pv.add(j * stride + i + 4 * k) as *const v128);
                    *acc = mul_add(*acc, a, v);
                }
            }
            for (k, acc) in acc.iter().enumerate() {
                v128_store(out.as_mut_ptr().add(i + 4 * k) as *mut v128, *acc);
            }
            i += 16;
        }
        while i + 4 <= hs {
            let mut acc = f32x4_splat(0.0);
            for (j, &p) in p.iter().enumerate() {
                let v = v128_load(pv.add(j * stride + i) as *const v128);
                acc = mul_add(acc, f32x4_splat(p), v);
            }
            v128_store(out.as_mut_ptr().add(i) as *mut v128, acc);
            i += 4;
        }
    }
    crate::cpu::scalar::weighted_sum_from(i, p, values, stride, out);
}

/// `M` f32 weight rows against `N` activation rows, `out[k][j] = w[k] . x[j]`, with one
/// 4-lane accumulator a pair: each 4-wide piece of a weight row is loaded once for all `N`
/// activation rows and each piece of an activation row once for all `M` weight rows, and
/// every pair is summed in one order (4 lanes at a time from the start, the lanes left to
/// right, then the tail), whatever `M` and `N`. Baseline SIMD128 has no fused multiply-add,
/// so a product is a multiply and an add.
///
/// Measured in the page (Chromium 156, synthetic stories15M f32, 128 tokens, aggregate tok/s,
/// 2-3 rounds interleaved, against the 4-accumulator row kernel this replaced): at batch 1,
/// 4 rows at a time 431-456 against 367-376 (3 rows 411, 2 rows 388); at 8 users, (2, 4)
/// 820-839 against 679 ((3, 3) 797, (4, 2) 747, (2, 3) 735, (1, 4) 659, (4, 4) 618). The
/// loop is deliberately not unrolled: unrolled 4 times in the source, LLVM loaded every
/// piece first and V8 spilled the accumulators to the stack (8 users: 712-734).
#[inline(always)]
fn dot_f32_grid<const M: usize, const N: usize>(w: &[&[f32]; M], x: &[&[f32]; N]) -> [[f32; N]; M] {
    let n = grid_len(w, x);
    let mut acc = [[f32x4_splat(0.0); N]; M];
    let mut i = 0;
    // SAFETY: every load is within 0..n of each weight row and each activation row.
    unsafe {
        let step = |acc: &mut [[v128; N]; M], i: usize| {
            let wv: [v128; M] =
                std::array::from_fn(|k| v128_load(w[k].as_ptr().add(i) as *const v128));
            for (j, x) in x.iter().enumerate() {
                let xv = v128_load(x.as_ptr().add(i) as *const v128);
                for (acc, wv) in acc.iter_mut().zip(&wv) {
                    acc[j] = mul_add(acc[j], *wv, xv);
                }
            }
        };
        while i + 4 <= n {
            step(&mut acc, i);
            i += 4;
        }
    }
    // Loops rather than `from_fn`: LLVM kept `from_fn` behind a call, with the accumulators
    // stored to the stack for it and read back. A `perf` profile of the page's worker (8
    // users, f32) had 6.6% of its samples in that call, gone with the loops; the page's
    // aggregate tok/s moved within noise (7 rounds, both orders: 506 -> 555, 616 -> 607).
    let mut sums = [[0.0; N]; M];
    for k in 0..M {
        for j in 0..N {
            let mut sum = hsum(acc[k][j]);
            for l in i..n {
                sum += w[k][l] * x[j][l];
            }
            sums[k][j] = sum;
        }
    }
    sums
}

/// Every row of `w` against every row of `x`, `out[k * x.len() + j]`: up to 4 weight rows
/// against one activation row, or up to 2 against up to 4 (see [`dot_f32_grid`]).
#[inline(always)]
pub fn f32_grid(w: &[&[f32]], x: &[&[f32]], out: &mut [f32]) {
    f32_grid_shapes!(dot_f32_grid, w, x, out)
}
