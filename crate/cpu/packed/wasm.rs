//! The packed kernels in wasm, per format ([`PackedWasm`]): relaxed SIMD's byte products for Q4_0
//! in the page's second build (`relaxed`), and 16-bit products (`simd128`) for Q8_0 in both builds
//! and Q4_0 in the baseline one.

use std::arch::wasm32::*;

use crate::cpu::packed::group::{Act, GROUP};
use crate::formats::{BLOCK, Q4_0, Q5_0Run, Q6KRun, Q8_0, RunFormat};

/// A format's packed kernel in wasm, and how many activation rows it takes at once.
pub(crate) trait PackedWasm: RunFormat {
    /// Activation rows a call: 2 in wasm, whose 128-bit kernels hold twice the registers per
    /// activation row (two halves of a group). Measured in the page (stories15M, 8 users, 6
    /// rounds interleaved, aggregate tok/s): relaxed SIMD's Q4_0 kernel took 4 at 913 against
    /// 909 for 2, so 2; the baseline build's Q4_0 kernel (`simd128`, two vectors of weights a
    /// pair of rows) ran out of registers with 2, 479 against 563 with 1, so 1.
    const TILE_ROWS: usize;

    /// One group against up to `TILE_ROWS` activation rows.
    fn tile(scales: &[f32], quants: &[u8], x: &[Act], out: &mut [[f32; GROUP]]);
}

impl PackedWasm for Q4_0 {
    const TILE_ROWS: usize = if cfg!(target_feature = "relaxed-simd") {
        2
    } else {
        1
    };

    fn tile(scales: &[f32], quants: &[u8], x: &[Act], out: &mut [[f32; GROUP]]) {
        #[cfg(target_feature = "relaxed-simd")]
        relaxed::q4_tile(scales, quants, x, out);
        #[cfg(not(target_feature = "relaxed-simd"))]
        simd128::tile::<Q4_0>(scales, quants, x, out);
    }
}

impl PackedWasm for Q8_0 {
    const TILE_ROWS: usize = 2;

    fn tile(scales: &[f32], quants: &[u8], x: &[Act], out: &mut [[f32; GROUP]]) {
        simd128::tile::<Q8_0>(scales, quants, x, out);
    }
}

impl PackedWasm for Q5_0Run {
    const TILE_ROWS: usize = 2;

    fn tile(scales: &[f32], quants: &[u8], x: &[Act], out: &mut [[f32; GROUP]]) {
        #[cfg(target_feature = "relaxed-simd")]
        relaxed::q5_tile(scales, quants, x, out);
        #[cfg(not(target_feature = "relaxed-simd"))]
        simd128::tile::<Q5_0Run>(scales, quants, x, out);
    }
}

impl PackedWasm for Q6KRun {
    const TILE_ROWS: usize = 2;

    fn tile(scales: &[f32], quants: &[u8], x: &[Act], out: &mut [[f32; GROUP]]) {
        simd128::tile::<Q6KRun>(scales, quants, x, out);
    }
}

/// The packed Q4_0 kernel in wasm with relaxed SIMD (the page's second build, for browsers that
/// run it). A 128-bit register holds 4 bytes of each of 4 rows, so a group is two halves (rows
/// 0..4 and 4..8). `i16x8.relaxed_dot_i8x16_i7x16_s` (x86's `pmaddubsw`) multiplies the broadcast
/// activation bytes by the nibbles (0..=15: the 7-bit operand as they lie, where its result is
/// the same on every machine) and adds neighbours, so one instruction makes 16 products of 4
/// rows. A block's pair sums add up in 16 bits (at most 8 * 2 * 15 * 127, as in AVX2's), are
/// widened once and corrected by `-8 * sum(x)`; a block is converted and scaled once for 4 rows,
/// and no row needs a horizontal sum at the end.
///
/// Measured in the page (Chromium 156, this project's 2-core AMD EPYC, synthetic stories15M
/// q4, 128 tokens a user, 5 rounds interleaved, medians of aggregate tok/s): 477 -> 827 at 1
/// user, 531 -> 1006 at 8 users, against the row-major kernel it replaced (the same byte
/// products a row at a time, since removed).
///
/// Q8_0 with byte products the same way (the weights' signs moved onto the activations by
/// `x ^ m - m`, then `i32x4.relaxed_dot_i8x16_i7x16_add_s` with the magnitudes) was no faster
/// than its row-major kernel (8 rounds: 390 against 391 tok/s at 1 user, 465 against 479 at 8);
/// its packed kernel multiplies 16-bit lanes instead (`simd128`).
#[cfg(target_feature = "relaxed-simd")]
mod relaxed {
    use std::arch::wasm32::*;

    use crate::cpu::packed::group::{Act, GROUP, checked_group, group_lanes};
    use crate::formats::{BLOCK, Q4_0, Q5_0Run};

    /// `N` activation rows against one group of Q4_0 blocks: per activation row two
    /// accumulators of 4 lanes (a lane a weight row).
    #[inline(always)]
    fn dot<const N: usize>(scales: &[f32], quants: &[u8], x: [Act; N]) -> [[f32; GROUP]; N] {
        let (blocks, bytes) = checked_group::<Q4_0, _>(scales, quants, &x);
        let mask = u8x16_splat(0x0f);
        let mut acc = [[f32x4_splat(0.0); 2]; N];
        for b in 0..blocks {
            // Four activation bytes, `4 k..4 k + 4` of block `b`, in every lane.
            let four = |x: &Act, k: usize| {
                // SAFETY: each activation row holds `blocks * 32` values (asserted above).
                unsafe { v128_load32_splat(x.quants.as_ptr().add(b * BLOCK + 4 * k) as *const u32) }
            };
            // 16-bit sums of the nibbles' products, rows 0..4 and 4..8.
            let mut sums = [[i16x8_splat(0); 2]; N];
            for k in 0..4 {
                for h in 0..2 {
                    // SAFETY: the group holds `blocks * bytes` bytes (asserted above).
                    let v = unsafe {
                        v128_load(quants.as_ptr().add(b * bytes + k * 32 + h * 16) as *const v128)
                    };
                    let lo = v128_and(v, mask);
                    let hi = v128_and(u16x8_shr(v, 4), mask);
                    for (sum, x) in sums.iter_mut().zip(&x) {
                        let pairs = i16x8_add(
                            i16x8_relaxed_dot_i8x16_i7x16(four(x, k), lo),
                            i16x8_relaxed_dot_i8x16_i7x16(four(x, k + 4), hi),
                        );
                        sum[h] = i16x8_add(sum[h], pairs);
                    }
                }
            }
            for ((acc, sum), x) in acc.iter_mut().zip(&sums).zip(&x) {
                for h in 0..2 {
                    let ints = i32x4_add(
                        i32x4_extadd_pairwise_i16x8(sum[h]),
                        i32x4_splat(x.offsets[b]),
                    );
                    // SAFETY: the group holds `blocks * 8` scales.
                    let w_scales =
                        unsafe { v128_load(scales.as_ptr().add(b * GROUP + 4 * h) as *const v128) };
                    let scale = f32x4_mul(w_scales, f32x4_splat(x.scales[b]));
                    acc[h] = f32x4_relaxed_madd(f32x4_convert_i32x4(ints), scale, acc[h]);
                }
            }
        }
        acc.map(group_lanes)
    }

    /// `N` activation rows against one group of Q5_0 blocks, as [`dot`] multiplies Q4_0's
    /// nibbles: a half-chunk's 16 bytes become its codes (0..=31, 7 bits as the relaxed dot
    /// takes them) with the fifth bits of chunk 4 shifted in (`formats/q5_0.rs`), and the pair
    /// sums of two chunks (at most 4 * 2 * 31 * 127) are widened before they could pass 16 bits.
    #[inline(always)]
    fn dot5<const N: usize>(scales: &[f32], quants: &[u8], x: [Act; N]) -> [[f32; GROUP]; N] {
        let (blocks, bytes) = checked_group::<Q5_0Run, _>(scales, quants, &x);
        let (mask, bit) = (u8x16_splat(0x0f), u8x16_splat(0x10));
        let mut acc = [[f32x4_splat(0.0); 2]; N];
        for b in 0..blocks {
            let four = |x: &Act, k: usize| {
                // SAFETY: each activation row holds `blocks * 32` values (asserted above).
                unsafe { v128_load32_splat(x.quants.as_ptr().add(b * BLOCK + 4 * k) as *const u32) }
            };
            // SAFETY: the group holds `blocks * bytes` bytes (asserted above).
            let load = |at: usize| unsafe {
                v128_load(quants.as_ptr().add(b * bytes + at) as *const v128)
            };
            let mut ints = [[i32x4_splat(0); 2]; N];
            for h in 0..2 {
                let fifth = load(4 * 32 + h * 16);
                for pair in 0..2 {
                    let mut sums = [i16x8_splat(0); N];
                    for k in 2 * pair..2 * pair + 2 {
                        let v = load(k * 32 + h * 16);
                        // 16-bit shifts (x86 has no byte shifts): bit 4 of each byte still comes
                        // from the same byte, and the masks drop what crosses.
                        let f = u16x8_shr(fifth, 2 * k as u32);
                        let lo = v128_or(v128_and(v, mask), v128_and(i16x8_shl(f, 4), bit));
                        let hi = v128_or(
                            v128_and(u16x8_shr(v, 4), mask),
                            v128_and(i16x8_shl(f, 3), bit),
                        );
                        for (sum, x) in sums.iter_mut().zip(&x) {
                            let pairs = i16x8_add(
                                i16x8_relaxed_dot_i8x16_i7x16(four(x, k), lo),
                                i16x8_relaxed_dot_i8x16_i7x16(four(x, k + 4), hi),
                            );
                            *sum = i16x8_add(*sum, pairs);
                        }
                    }
                    for (ints, sum) in ints.iter_mut().zip(&sums) {
                        ints[h] = i32x4_add(ints[h], i32x4_extadd_pairwise_i16x8(*sum));
                    }
                }
            }
            for ((acc, ints), x) in acc.iter_mut().zip(&ints).zip(&x) {
                for h in 0..2 {
                    let ints = i32x4_add(ints[h], i32x4_splat(x.offsets[b]));
                    // SAFETY: the group holds `blocks * 8` scales.
                    let w_scales =
                        unsafe { v128_load(scales.as_ptr().add(b * GROUP + 4 * h) as *const v128) };
                    let scale = f32x4_mul(w_scales, f32x4_splat(x.scales[b]));
                    acc[h] = f32x4_relaxed_madd(f32x4_convert_i32x4(ints), scale, acc[h]);
                }
            }
        }
        acc.map(group_lanes)
    }

    /// [`dot5`] for the number of rows in `x` (1 or 2).
    pub fn q5_tile(scales: &[f32], quants: &[u8], x: &[Act], out: &mut [[f32; GROUP]]) {
        match *x {
            [a] => out.copy_from_slice(&dot5::<1>(scales, quants, [a])),
            [a, b] => out.copy_from_slice(&dot5::<2>(scales, quants, [a, b])),
            _ => panic!("a packed tile in wasm holds 1 or 2 activation rows"),
        }
    }

    /// [`dot`] for the number of rows in `x` (1 or 2).
    pub fn q4_tile(scales: &[f32], quants: &[u8], x: &[Act], out: &mut [[f32; GROUP]]) {
        match *x {
            [a] => out.copy_from_slice(&dot::<1>(scales, quants, [a])),
            [a, b] => out.copy_from_slice(&dot::<2>(scales, quants, [a, b])),
            _ => panic!("a packed tile in wasm holds 1 or 2 activation rows"),
        }
    }
}

/// A format's share of the 16-bit kernel (`simd128`): its weights of a pair of rows as 16-bit
/// lanes, the activations they meet, and their products.
pub(crate) trait Pairs16: RunFormat {
    /// Chunk `k`'s bytes `p..p + 8` (4 of each of 2 rows) as 16-bit lanes: by default signed
    /// bytes (Q8_0's), sign-extended.
    ///
    /// # Safety
    /// `p` points to 8 readable bytes of chunk `k` of a group's block, which is whole.
    #[inline(always)]
    unsafe fn pair(p: *const u8, _k: usize) -> [v128; 2] {
        // SAFETY: the caller's.
        [
            unsafe { i16x8_load_extend_i8x8(p as *const i8) },
            i16x8_splat(0),
        ]
    }

    /// Whether a chunk's bytes hold two values each (nibbles, Q4_0's and Q5_0's): [`pair`]
    /// gives values `4k..4k + 4` and `16 + 4k..` apart, and each meets its own activations.
    ///
    /// [`pair`]: Self::pair
    const HALVES: bool = false;

    /// The activations chunk `k` of block `b` meets, widened and repeated: values `4k..4k + 4`,
    /// and `16 + 4k..` where the chunk holds [`HALVES`](Self::HALVES).
    ///
    /// # Safety
    /// `x` holds block `b` whole.
    #[inline(always)]
    unsafe fn activations(x: &Act, b: usize, k: usize) -> [v128; 2] {
        // SAFETY: the caller's.
        unsafe {
            [
                four(x, b, k),
                if Self::HALVES {
                    four(x, b, k + 4)
                } else {
                    i16x8_splat(0)
                },
            ]
        }
    }

    /// The products of a pair of rows with the activations, two i32 lanes a row.
    #[inline(always)]
    fn products(w: &[v128; 2], xs: &[v128; 2]) -> v128 {
        let products = i32x4_dot_i16x8(w[0], xs[0]);
        if Self::HALVES {
            i32x4_add(products, i32x4_dot_i16x8(w[1], xs[1]))
        } else {
            products
        }
    }

    /// The chunks of 32 bytes that hold a block's codes (a chunk after them holds the rows'
    /// half scales).
    const CHUNKS: usize;

    /// Whether a block's two halves have scales of their own: then each pair of rows' 16-bit
    /// weights of chunk `k` are multiplied by [`half_scales`](Self::half_scales)`[k / 4]`.
    const HALF_SCALES: bool = false;

    /// A half-group's scales (rows `4 h..4 h + 4`, whose 16 bytes of the scales' chunk `p`
    /// points to) as 16-bit lanes for each pair of rows: `[half][pair]`.
    ///
    /// # Safety
    /// `p` points to 16 readable bytes.
    unsafe fn half_scales(_p: *const u8) -> [[v128; 2]; 2] {
        [[i16x8_splat(1); 2]; 2]
    }
}

/// Values 4k..4k + 4 of block `b`, twice, in 16-bit lanes.
///
/// # Safety
/// `x` holds block `b` whole.
#[inline(always)]
unsafe fn four(x: &Act, b: usize, k: usize) -> v128 {
    // SAFETY: the caller's.
    i16x8_extend_low_i8x16(unsafe {
        v128_load32_splat(x.quants.as_ptr().add(b * BLOCK + 4 * k) as *const u32)
    })
}

/// Q4_0's nibbles split by a mask and a shift into values `4k..4k + 4` and `16 + 4k..`.
impl Pairs16 for Q4_0 {
    const CHUNKS: usize = 4;
    const HALVES: bool = true;

    #[inline(always)]
    unsafe fn pair(p: *const u8, _k: usize) -> [v128; 2] {
        // SAFETY: the caller's.
        let v = unsafe { u16x8_load_extend_u8x8(p) };
        [v128_and(v, u16x8_splat(0x0f)), u16x8_shr(v, 4)]
    }
}

/// Q5_0: Q4_0's nibbles, each with its fifth bit from chunk 4 (the same rows' bytes 32 * (4 - k)
/// further on), shifted right by `2 k` so that bit 0 is the low nibble's and bit 1 the high one's
/// (`formats/q5_0.rs`); codes 0..=31, and `-16 * sum(x)` after.
impl Pairs16 for Q5_0Run {
    const CHUNKS: usize = 4;
    const HALVES: bool = true;

    #[inline(always)]
    unsafe fn pair(p: *const u8, k: usize) -> [v128; 2] {
        // SAFETY: the caller's: the block is whole, so its chunk 4 is too.
        let (v, high) = unsafe {
            (
                u16x8_load_extend_u8x8(p),
                u16x8_load_extend_u8x8(p.add((4 - k) * 32)),
            )
        };
        let high = u16x8_shr(high, 2 * k as u32);
        let bit = u16x8_splat(0x10);
        [
            v128_or(
                v128_and(v, u16x8_splat(0x0f)),
                v128_and(u16x8_shl(high, 4), bit),
            ),
            v128_or(u16x8_shr(v, 4), v128_and(u16x8_shl(high, 3), bit)),
        ]
    }
}

/// Q8_0's bytes sign-extended.
impl Pairs16 for Q8_0 {
    const CHUNKS: usize = 8;
}

/// Q6_K: the codes sign-extended as Q8_0's, each multiplied by its half's scale in 16 bits
/// (`|(q - 32) * scale|` is at most 32 * 128), so a block's sum stays exact in i32.
impl Pairs16 for Q6KRun {
    const CHUNKS: usize = 8;
    const HALF_SCALES: bool = true;

    /// Row `r`'s scales are its bytes `4 r` and `4 r + 1`: each spread over the row's four
    /// 16-bit lanes of a pair (bytes 0..8 of a shuffle), sign-extended.
    #[inline(always)]
    unsafe fn half_scales(p: *const u8) -> [[v128; 2]; 2] {
        // SAFETY: the caller's.
        let v = unsafe { v128_load(p as *const v128) };
        [
            [
                i16x8_extend_low_i8x16(i8x16_shuffle::<
                    0,
                    0,
                    0,
                    0,
                    4,
                    4,
                    4,
                    4,
                    0,
                    0,
                    0,
                    0,
                    0,
                    0,
                    0,
                    0,
                >(v, v)),
                i16x8_extend_low_i8x16(i8x16_shuffle::<
                    8,
                    8,
                    8,
                    8,
                    12,
                    12,
                    12,
                    12,
                    0,
                    0,
                    0,
                    0,
                    0,
                    0,
                    0,
                    0,
                >(v, v)),
            ],
            [
                i16x8_extend_low_i8x16(i8x16_shuffle::<
                    1,
                    1,
                    1,
                    1,
                    5,
                    5,
                    5,
                    5,
                    0,
                    0,
                    0,
                    0,
                    0,
                    0,
                    0,
                    0,
                >(v, v)),
                i16x8_extend_low_i8x16(i8x16_shuffle::<
                    9,
                    9,
                    9,
                    9,
                    13,
                    13,
                    13,
                    13,
                    0,
                    0,
                    0,
                    0,
                    0,
                    0,
                    0,
                    0,
                >(v, v)),
            ],
        ]
    }
}

/// The packed kernels in wasm that multiply 16-bit lanes, which SIMD128 has in both builds: Q8_0
/// (both builds) and Q4_0 (the baseline build; the relaxed one has `relaxed`). Each half-group
/// chunk's 16 bytes (4 bytes of 4 rows) load as two vectors of 16-bit lanes (rows 0 and 1, rows 2
/// and 3; x86's `pmovsxbw` / `pmovzxbw` from memory; Q4_0's nibbles split by a mask and a shift
/// into values `4k..4k + 4` and `16 + 4k..`). The chunk's 4 activation values are widened and
/// repeated once, and `i32x4.dot_i16x8_s` (x86's `pmaddwd`) makes 8 products of 2 rows with no
/// horizontal sum later: at the end of a block, neighbouring lanes are added once for 4 rows
/// (Q4_0's `-8 * sum(x)` added), converted and scaled once for 4 rows.
///
/// Measured in the page (Chromium 156, this project's 2-core AMD EPYC, synthetic stories15M,
/// 128 tokens a user, 6 rounds interleaved, medians of aggregate tok/s at 1 / 8 users), against
/// the row-major kernels they replaced (the same 16-bit products a row at a time, since removed):
/// - q8, relaxed SIMD build: 375 / 515 -> 537 / 664; baseline build: 395 / 520 -> 531 / 664.
/// - q4, baseline build: 313 / 432 -> 542 / 563.
/// - q4 in the relaxed SIMD build with this kernel instead of `relaxed`'s: 557 / 525 against
///   699 / 802, so that build keeps `relaxed`.
mod simd128 {
    use std::arch::wasm32::*;

    use crate::cpu::packed::group::{Act, GROUP, checked_group, group_lanes};
    use crate::cpu::packed::wasm::Pairs16;
    use crate::cpu::simd128::mul_add;

    /// `N` activation rows against one group of `F` blocks: per activation row two accumulators
    /// of 4 lanes (a lane a weight row).
    #[inline(always)]
    fn dot<const N: usize, F: Pairs16>(
        scales: &[f32],
        quants: &[u8],
        x: [Act; N],
    ) -> [[f32; GROUP]; N] {
        let (blocks, bytes) = checked_group::<F, _>(scales, quants, &x);
        let mut acc = [[f32x4_splat(0.0); 2]; N];
        for b in 0..blocks {
            for h in 0..2 {
                // Rows 4h, 4h + 1 and 4h + 2, 4h + 3 of the half, two i32 lanes a row.
                let mut sums = [[i32x4_splat(0); 2]; N];
                let half_scales = if F::HALF_SCALES {
                    // SAFETY: the group holds `blocks * bytes` bytes (asserted above).
                    unsafe {
                        F::half_scales(quants.as_ptr().add(b * bytes + F::CHUNKS * 32 + h * 16))
                    }
                } else {
                    [[i16x8_splat(1); 2]; 2]
                };
                for k in 0..F::CHUNKS {
                    let at = b * bytes + k * 32 + h * 16;
                    // SAFETY: the group holds `blocks * bytes` bytes, and each activation row
                    // `blocks * 32` values (asserted above).
                    let mut w: [[v128; 2]; 2] = std::array::from_fn(|pair| unsafe {
                        F::pair(quants.as_ptr().add(at + 8 * pair), k)
                    });
                    if F::HALF_SCALES {
                        for (w, scale) in w.iter_mut().zip(&half_scales[2 * k / F::CHUNKS]) {
                            w[0] = i16x8_mul(w[0], *scale);
                        }
                    }
                    for (sum, x) in sums.iter_mut().zip(&x) {
                        // SAFETY: as above.
                        let xs = unsafe { F::activations(x, b, k) };
                        for (sum, w) in sum.iter_mut().zip(&w) {
                            *sum = i32x4_add(*sum, F::products(w, &xs));
                        }
                    }
                }
                // SAFETY: the group holds `blocks * 8` scales.
                let w_scales =
                    unsafe { v128_load(scales.as_ptr().add(b * GROUP + 4 * h) as *const v128) };
                for ((acc, sum), x) in acc.iter_mut().zip(&sums).zip(&x) {
                    let ints = i32x4_add(
                        i32x4_shuffle::<0, 2, 4, 6>(sum[0], sum[1]),
                        i32x4_shuffle::<1, 3, 5, 7>(sum[0], sum[1]),
                    );
                    // The codes' bias taken back (Q4_0's `-8 * sum(x)`).
                    let ints = if F::BIAS != 0 {
                        i32x4_add(ints, i32x4_splat(x.offsets[b]))
                    } else {
                        ints
                    };
                    let scale = f32x4_mul(w_scales, f32x4_splat(x.scales[b]));
                    acc[h] = mul_add(acc[h], f32x4_convert_i32x4(ints), scale);
                }
            }
        }
        acc.map(group_lanes)
    }

    /// [`dot`] for the number of rows in `x` (1 or 2).
    pub fn tile<F: Pairs16>(scales: &[f32], quants: &[u8], x: &[Act], out: &mut [[f32; GROUP]]) {
        match *x {
            [a] => out.copy_from_slice(&dot::<1, F>(scales, quants, [a])),
            [a, b] => out.copy_from_slice(&dot::<2, F>(scales, quants, [a, b])),
            _ => panic!("a packed tile in wasm holds 1 or 2 activation rows"),
        }
    }
}
