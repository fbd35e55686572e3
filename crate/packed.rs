//! Q8_0 and Q4_0 weights regrouped 8 rows at a time, for the products of decode and batched
//! decode: AVX2's (module `avx2`), and in wasm relaxed SIMD's byte products for Q4_0 (`relaxed`)
//! and 16-bit products for Q8_0 and the baseline build's Q4_0 (`simd128`).
//!
//! Row by row (`kernels.rs`), every block is loaded (Q4_0 unpacked), its signs moved, and its
//! products widened to i32, converted and scaled once per activation row: 8 to 9 instructions for
//! 32 products. Here the 8 rows of a group lie interleaved 4 bytes at a time (the layout of
//! llama.cpp's repacked `q4_0_8x8` CPU kernels; this code is our own), so that one 256-bit
//! register holds 4 values of each of 8 rows, four activation bytes broadcast to every lane, and
//! one `maddubs` makes 8 rows' products at once. A block is converted and scaled once for all 8
//! rows.
//! - Q4_0: the nibbles (0..=15) are `maddubs`' unsigned operand as they are. A block's 8 pair sums
//!   of a lane add up in 16 bits (at most 8 * 2 * 15 * 128 = 30720, so they cannot overflow), are
//!   widened once and corrected by `-8 * sum(x)` (the nibbles stand 8 above their values): about
//!   3 instructions for 32 products.
//! - Q8_0: the weights' signs move onto the broadcast activations (`sign`), and each `maddubs`
//!   (up to 2 * 127 * 127 a pair) is widened at once: about 5 instructions for 32 products.
//!
//! Layout of a `[rows, cols]` matrix, `groups = rows / 8` rounded up, `blocks = cols / 32`, and
//! `bytes` = 32 (Q8_0) or 16 (Q4_0) a block of one row:
//! - `scales[(g * blocks + b) * 8 + r]`: row `8 g + r`'s scale of block `b` (0 for the rows that
//!   pad the last group);
//! - `quants[(g * blocks + b) * 8 * bytes + k * 32 + r * 4 + j]`: byte `4 k + j` of that block
//!   (Q8_0: value `4 k + j`; Q4_0, in GGUF's order: values `4 k + j` in the low nibble and
//!   `16 + 4 k + j` in the high one).
//!
//! Every (weight row, activation row) pair is summed block by block in one order whatever the
//! batch, so batched decode equals batch 1.

use crate::kernels::Q8Rows;
use crate::quant::BLOCK;
use crate::weights::Blocks;

/// Rows in a group.
pub const GROUP: usize = 8;

/// A Q8_0 or Q4_0 matrix in groups of 8 interleaved rows (see the module's documentation).
#[derive(Debug, Clone, PartialEq)]
pub struct Packed {
    q4: bool,
    rows: usize,
    cols: usize,
    scales: Vec<f32>,
    quants: Vec<u8>,
}

impl Packed {
    /// Regroup the row-major blocks of a `[rows, cols]` matrix, in their own memory: a group's 8
    /// rows take the same bytes in both layouts, so each group is copied aside (a few KB) and
    /// written back regrouped. Packing a copy held two of the largest matrix while loading (native
    /// peak RSS loading stories15M q8: 141.2 MB against 134.2 unpacked; see README).
    pub fn pack(rows: usize, cols: usize, row_major: Blocks) -> Packed {
        let (q4, mut quants, mut scales) = match row_major {
            Blocks::Q8 { quants, scales } => (false, bytes_of(quants), scales),
            Blocks::Q4 { quants, scales } => (true, quants, scales),
        };
        assert_eq!(cols % BLOCK, 0, "rows of blocks are whole blocks");
        let blocks = cols / BLOCK;
        let bytes = block_bytes(q4);
        assert!(quants.len() == rows * blocks * bytes && scales.len() == rows * blocks);
        let groups = rows.div_ceil(GROUP);
        // Rows that pad the last group: scale 0, and values 0.
        quants.resize(groups * GROUP * blocks * bytes, if q4 { 0x88 } else { 0 });
        scales.resize(groups * GROUP * blocks, 0.0);
        let (group_bytes, group_scales) = (GROUP * blocks * bytes, GROUP * blocks);
        let (mut rows_bytes, mut rows_scales) =
            (vec![0u8; group_bytes], vec![0.0f32; group_scales]);
        for g in 0..groups {
            let quants = &mut quants[g * group_bytes..][..group_bytes];
            let scales = &mut scales[g * group_scales..][..group_scales];
            rows_bytes.copy_from_slice(quants);
            rows_scales.copy_from_slice(scales);
            for lane in 0..GROUP {
                for b in 0..blocks {
                    scales[b * GROUP + lane] = rows_scales[lane * blocks + b];
                    let block = &rows_bytes[(lane * blocks + b) * bytes..][..bytes];
                    for (k, four) in block.chunks_exact(4).enumerate() {
                        quants[b * GROUP * bytes + k * 32 + lane * 4..][..4].copy_from_slice(four);
                    }
                }
            }
        }
        Packed {
            q4,
            rows,
            cols,
            scales,
            quants,
        }
    }

    /// The row-major blocks again, as [`Packed::pack`] took them.
    pub fn blocks(&self) -> Blocks {
        let blocks = self.cols / BLOCK;
        let bytes = block_bytes(self.q4);
        let mut quants = Vec::with_capacity(self.rows * blocks * bytes);
        let mut scales = Vec::with_capacity(self.rows * blocks);
        for r in 0..self.rows {
            let (g, lane) = (r / GROUP, r % GROUP);
            for b in 0..blocks {
                let at = g * blocks + b;
                scales.push(self.scales[at * GROUP + lane]);
                for k in 0..bytes / 4 {
                    quants.extend_from_slice(
                        &self.quants[at * GROUP * bytes + k * 32 + lane * 4..][..4],
                    );
                }
            }
        }
        if self.q4 {
            Blocks::Q4 { quants, scales }
        } else {
            Blocks::Q8 {
                quants: bytemuck::cast_slice(&quants).to_vec(),
                scales,
            }
        }
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Bytes the matrix takes, padding rows included.
    pub fn bytes(&self) -> u64 {
        (self.quants.len() + 4 * self.scales.len()) as u64
    }

    /// Group `g`'s scales and bytes.
    fn group(&self, g: usize) -> (&[f32], &[u8]) {
        let blocks = self.cols / BLOCK;
        let bytes = GROUP * block_bytes(self.q4);
        (
            &self.scales[g * blocks * GROUP..][..blocks * GROUP],
            &self.quants[g * blocks * bytes..][..blocks * bytes],
        )
    }
}

/// Q8_0's values as bytes, in the same allocation.
fn bytes_of(values: Vec<i8>) -> Vec<u8> {
    let mut values = std::mem::ManuallyDrop::new(values);
    let (ptr, len, capacity) = (values.as_mut_ptr(), values.len(), values.capacity());
    // SAFETY: the allocation is handed over whole (the original is never dropped), and i8 and u8
    // have the same size, alignment and valid values.
    unsafe { Vec::from_raw_parts(ptr as *mut u8, len, capacity) }
}

/// Bytes of one row's block: 16 (Q4_0) or 32 (Q8_0).
fn block_bytes(q4: bool) -> usize {
    if q4 { BLOCK / 2 } else { BLOCK }
}

/// Whether the kernels of `isa` read Q4_0 (`q4`) or Q8_0 weights packed: AVX2's both; on AVX-512
/// VNNI machines Q4_0 (the same AVX2 kernel), while Q8_0 keeps the VNNI kernel measured there;
/// in wasm both (`simd128`; Q4_0 in the relaxed SIMD build `relaxed`), and `kernels::matmul`
/// packs any row-major matrix handed to it there. Elsewhere the row-major kernels of `kernels.rs`
/// are the ones measured.
pub fn packs(isa: crate::kernels::Isa, q4: bool) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        use crate::kernels::Isa;
        isa == Isa::Avx2 || (q4 && isa == Isa::Avx512Vnni)
    }
    #[cfg(target_arch = "wasm32")]
    {
        let _ = q4;
        isa == crate::kernels::Isa::Simd128
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "wasm32")))]
    {
        let _ = (isa, q4);
        false
    }
}

/// One activation row as the kernels read it: int8 values, a scale per block, and per block what
/// a block's integer sum starts from: `-8 * sum` of its values for Q4_0 (what the nibbles' offset
/// adds), 0 for Q8_0.
#[derive(Clone, Copy)]
struct Act<'a> {
    quants: &'a [i8],
    scales: &'a [f32],
    offsets: &'a [i32],
}

/// `out[i * rows + r] = dot(weight row r, activation row i)` for `t` int8 activation rows `xq`,
/// with `isa`'s kernel (AVX2, or wasm's; see [`packs`]) and a scalar loop elsewhere.
pub fn matmul(isa: crate::kernels::Isa, w: &Packed, xq: &Q8Rows, t: usize, out: &mut [f32]) {
    let (rows, cols) = (w.rows, w.cols);
    let blocks = cols / BLOCK;
    assert!(xq.quants.len() >= t * cols && xq.scales.len() >= t * blocks);
    assert_eq!(out.len(), t * rows);
    let offsets: Vec<i32> = if w.q4 {
        xq.quants[..t * cols]
            .chunks_exact(BLOCK)
            .map(|block| -8 * block.iter().map(|&v| v as i32).sum::<i32>())
            .collect()
    } else {
        vec![0; t * blocks]
    };
    let acts: Vec<Act> = (0..t)
        .map(|i| Act {
            quants: &xq.quants[i * cols..][..cols],
            scales: &xq.scales[i * blocks..][..blocks],
            offsets: &offsets[i * blocks..][..blocks],
        })
        .collect();
    let mut results = [[0.0f32; GROUP]; TILE];
    let tile = tile_rows(isa, w.q4);
    for g in 0..rows.div_ceil(GROUP) {
        let (scales, quants) = w.group(g);
        let lanes = (rows - g * GROUP).min(GROUP);
        for (i, acts) in acts.chunks(tile).enumerate() {
            let results = &mut results[..acts.len()];
            tile_of(isa, w.q4, scales, quants, acts, results);
            for (j, lane_results) in results.iter().enumerate() {
                let at = (i * tile + j) * rows + g * GROUP;
                if lanes == GROUP {
                    // A copy of constant length, made in registers (a call to `memcpy` for
                    // each group took 2% of a q4 step at 8 users).
                    out[at..at + GROUP].copy_from_slice(lane_results);
                } else {
                    out[at..at + lanes].copy_from_slice(&lane_results[..lanes]);
                }
            }
        }
    }
}

/// The most activation rows one kernel call takes.
const TILE: usize = 4;

/// How many activation rows `isa`'s kernel takes at once: 4 with AVX2's 16 registers of 256
/// bits; 2 in wasm, whose 128-bit kernels hold twice the registers per activation row (two
/// halves of a group). Measured in the page (stories15M, 8 users, 6 rounds interleaved, aggregate
/// tok/s): relaxed SIMD's Q4_0 kernel took 4 at 913 against 909 for 2, so 2; the baseline
/// build's Q4_0 kernel (`simd128`, two vectors of weights a pair of rows) ran out of registers
/// with 2, 479 against 563 with 1, so 1.
fn tile_rows(isa: crate::kernels::Isa, q4: bool) -> usize {
    #[cfg(target_arch = "wasm32")]
    if isa == crate::kernels::Isa::Simd128 {
        return if q4 && !cfg!(target_feature = "relaxed-simd") {
            1
        } else {
            2
        };
    }
    let _ = (isa, q4);
    TILE
}

/// One group of 8 weight rows against up to [`TILE`] activation rows.
fn tile_of(
    isa: crate::kernels::Isa,
    q4: bool,
    scales: &[f32],
    quants: &[u8],
    x: &[Act],
    out: &mut [[f32; GROUP]],
) {
    #[cfg(target_arch = "x86_64")]
    if matches!(
        isa,
        crate::kernels::Isa::Avx2 | crate::kernels::Isa::Avx512Vnni
    ) {
        // SAFETY: both are only produced after detecting AVX2 and FMA.
        unsafe {
            if q4 {
                avx2::tile::<true>(scales, quants, x, out)
            } else {
                avx2::tile::<false>(scales, quants, x, out)
            }
        };
        return;
    }
    #[cfg(all(target_arch = "wasm32", target_feature = "relaxed-simd"))]
    if q4 && isa == crate::kernels::Isa::Simd128 {
        relaxed::q4_tile(scales, quants, x, out);
        return;
    }
    #[cfg(target_arch = "wasm32")]
    if isa == crate::kernels::Isa::Simd128 {
        if q4 {
            simd128::tile::<true>(scales, quants, x, out)
        } else {
            simd128::tile::<false>(scales, quants, x, out)
        }
        return;
    }
    let _ = isa;
    scalar_tile(q4, scales, quants, x, out);
}

/// The blocks of a group (`scales` and `quants` of [`Packed::group`]) and its bytes a block, after
/// checking that the group and every activation row hold them: the kernels' loads are unchecked.
#[cfg_attr(
    not(any(target_arch = "x86_64", target_arch = "wasm32")),
    allow(dead_code)
)]
fn checked_group(q4: bool, scales: &[f32], quants: &[u8], x: &[Act]) -> (usize, usize) {
    let blocks = scales.len() / GROUP;
    let bytes = GROUP * block_bytes(q4);
    assert!(quants.len() >= blocks * bytes);
    assert!(x.iter().all(|x| x.quants.len() >= blocks * BLOCK
        && x.scales.len() >= blocks
        && x.offsets.len() >= blocks));
    (blocks, bytes)
}

/// A wasm kernel's two 4-lane accumulators of a group (rows 0..4, rows 4..8) as its 8 results.
#[cfg(target_arch = "wasm32")]
fn group_lanes([low, high]: [std::arch::wasm32::v128; 2]) -> [f32; GROUP] {
    use std::arch::wasm32::v128_store;
    let mut lanes = [0.0f32; GROUP];
    // SAFETY: `lanes` holds 8 f32.
    unsafe {
        v128_store(lanes.as_mut_ptr() as *mut _, low);
        v128_store(lanes.as_mut_ptr().add(4) as *mut _, high);
    }
    lanes
}

/// The scalar kernel: the same integers and the same scaling as the AVX2 one, lane by lane.
fn scalar_tile(q4: bool, scales: &[f32], quants: &[u8], x: &[Act], out: &mut [[f32; GROUP]]) {
    let bytes = block_bytes(q4);
    for (x, out) in x.iter().zip(out.iter_mut()) {
        let mut acc = [0.0f32; GROUP];
        for (b, (block_scales, block)) in scales
            .chunks_exact(GROUP)
            .zip(quants.chunks_exact(GROUP * bytes))
            .enumerate()
        {
            let xb = &x.quants[b * BLOCK..][..BLOCK];
            for (lane, acc) in acc.iter_mut().enumerate() {
                let mut sum = x.offsets[b];
                for k in 0..bytes / 4 {
                    for j in 0..4 {
                        let byte = block[k * 32 + lane * 4 + j];
                        if q4 {
                            sum += (byte & 0x0f) as i32 * xb[4 * k + j] as i32;
                            sum += (byte >> 4) as i32 * xb[16 + 4 * k + j] as i32;
                        } else {
                            sum += byte as i8 as i32 * xb[4 * k + j] as i32;
                        }
                    }
                }
                let scale = block_scales[lane] * x.scales[b];
                *acc = (sum as f32).mul_add(scale, *acc);
            }
        }
        *out = acc;
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::{Act, GROUP};
    use crate::quant::BLOCK;

    /// `N` activation rows against one group of Q4_0 (`Q4`) or Q8_0 blocks, one 8-lane
    /// accumulator (a lane a weight row) for each.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn dot<const N: usize, const Q4: bool>(
        scales: &[f32],
        quants: &[u8],
        x: [Act; N],
    ) -> [[f32; GROUP]; N] {
        let (blocks, bytes) = super::checked_group(Q4, scales, quants, &x);
        let mask = _mm256_set1_epi8(0x0f);
        let ones = _mm256_set1_epi16(1);
        let mut acc = [_mm256_setzero_ps(); N];
        for b in 0..blocks {
            // Four activation bytes, `4 k..4 k + 4` of block `b`, in every lane.
            let four = |x: &Act, k: usize| {
                // SAFETY: each activation row holds `blocks * 32` values (asserted above).
                _mm256_set1_epi32(unsafe {
                    (x.quants.as_ptr().add(b * BLOCK + 4 * k) as *const i32).read_unaligned()
                })
            };
            let mut ints = [_mm256_setzero_si256(); N];
            for k in 0..bytes / 32 {
                // SAFETY: the group holds `blocks * bytes` bytes (asserted above).
                let v = unsafe {
                    _mm256_loadu_si256(quants.as_ptr().add(b * bytes + k * 32) as *const __m256i)
                };
                if Q4 {
                    // 16-bit sums of the nibbles' products (`ints` widens them below).
                    let lo = _mm256_and_si256(v, mask);
                    let hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), mask);
                    for (sum, x) in ints.iter_mut().zip(&x) {
                        *sum = _mm256_add_epi16(*sum, _mm256_maddubs_epi16(lo, four(x, k)));
                        *sum = _mm256_add_epi16(*sum, _mm256_maddubs_epi16(hi, four(x, k + 4)));
                    }
                } else {
                    let magnitudes = _mm256_sign_epi8(v, v);
                    for (sum, x) in ints.iter_mut().zip(&x) {
                        let signed = _mm256_sign_epi8(four(x, k), v);
                        let pairs = _mm256_maddubs_epi16(magnitudes, signed);
                        *sum = _mm256_add_epi32(*sum, _mm256_madd_epi16(pairs, ones));
                    }
                }
            }
            // SAFETY: the group holds `blocks * 8` scales.
            let w_scales = unsafe { _mm256_loadu_ps(scales.as_ptr().add(b * GROUP)) };
            for ((acc, sum), x) in acc.iter_mut().zip(&ints).zip(&x) {
                let ints = if Q4 {
                    _mm256_add_epi32(
                        _mm256_madd_epi16(*sum, ones),
                        _mm256_set1_epi32(x.offsets[b]),
                    )
                } else {
                    *sum
                };
                let scale = _mm256_mul_ps(w_scales, _mm256_set1_ps(x.scales[b]));
                *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ints), scale, *acc);
            }
        }
        acc.map(|a| {
            let mut lanes = [0.0f32; GROUP];
            // SAFETY: `lanes` holds 8 f32.
            unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), a) };
            lanes
        })
    }

    /// [`dot`] for the number of rows in `x` (1 to 4).
    #[target_feature(enable = "avx2,fma")]
    pub fn tile<const Q4: bool>(
        scales: &[f32],
        quants: &[u8],
        x: &[Act],
        out: &mut [[f32; GROUP]],
    ) {
        match *x {
            [a] => out.copy_from_slice(&dot::<1, Q4>(scales, quants, [a])),
            [a, b] => out.copy_from_slice(&dot::<2, Q4>(scales, quants, [a, b])),
            [a, b, c] => out.copy_from_slice(&dot::<3, Q4>(scales, quants, [a, b, c])),
            [a, b, c, d] => out.copy_from_slice(&dot::<4, Q4>(scales, quants, [a, b, c, d])),
            _ => panic!("a packed tile holds 1 to 4 activation rows"),
        }
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
#[cfg(all(target_arch = "wasm32", target_feature = "relaxed-simd"))]
mod relaxed {
    use std::arch::wasm32::*;

    use super::{Act, GROUP};
    use crate::quant::BLOCK;

    /// `N` activation rows against one group of Q4_0 blocks: per activation row two
    /// accumulators of 4 lanes (a lane a weight row).
    #[inline(always)]
    fn dot<const N: usize>(scales: &[f32], quants: &[u8], x: [Act; N]) -> [[f32; GROUP]; N] {
        let (blocks, bytes) = super::checked_group(true, scales, quants, &x);
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
        acc.map(super::group_lanes)
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
#[cfg(target_arch = "wasm32")]
mod simd128 {
    use std::arch::wasm32::*;

    use super::{Act, GROUP};
    use crate::kernels::simd128::mul_add;
    use crate::quant::BLOCK;

    /// `N` activation rows against one group of Q4_0 (`Q4`) or Q8_0 blocks: per activation row
    /// two accumulators of 4 lanes (a lane a weight row).
    #[inline(always)]
    fn dot<const N: usize, const Q4: bool>(
        scales: &[f32],
        quants: &[u8],
        x: [Act; N],
    ) -> [[f32; GROUP]; N] {
        let (blocks, bytes) = super::checked_group(Q4, scales, quants, &x);
        let mask = u16x8_splat(0x0f);
        let mut acc = [[f32x4_splat(0.0); 2]; N];
        for b in 0..blocks {
            // Values 4k..4k + 4 of block `b`, twice, in 16-bit lanes.
            let four = |x: &Act, k: usize| {
                // SAFETY: each activation row holds `blocks * 32` values (asserted above).
                i16x8_extend_low_i8x16(unsafe {
                    v128_load32_splat(x.quants.as_ptr().add(b * BLOCK + 4 * k) as *const u32)
                })
            };
            for h in 0..2 {
                // Rows 4h, 4h + 1 and 4h + 2, 4h + 3 of the half, two i32 lanes a row.
                let mut sums = [[i32x4_splat(0); 2]; N];
                for k in 0..bytes / 32 {
                    let at = b * bytes + k * 32 + h * 16;
                    // Per pair of rows: values 4k..4k + 4 of each (and Q4_0's 16 + 4k..).
                    // SAFETY: the group holds `blocks * bytes` bytes (asserted above).
                    let w: [[v128; 2]; 2] = std::array::from_fn(|pair| unsafe {
                        let p = quants.as_ptr().add(at + 8 * pair);
                        if Q4 {
                            let v = u16x8_load_extend_u8x8(p);
                            [v128_and(v, mask), u16x8_shr(v, 4)]
                        } else {
                            [i16x8_load_extend_i8x8(p as *const i8), i16x8_splat(0)]
                        }
                    });
                    for (sum, x) in sums.iter_mut().zip(&x) {
                        let xs = four(x, k);
                        if Q4 {
                            let high = four(x, k + 4);
                            for (sum, w) in sum.iter_mut().zip(&w) {
                                let products = i32x4_add(
                                    i32x4_dot_i16x8(w[0], xs),
                                    i32x4_dot_i16x8(w[1], high),
                                );
                                *sum = i32x4_add(*sum, products);
                            }
                        } else {
                            for (sum, w) in sum.iter_mut().zip(&w) {
                                *sum = i32x4_add(*sum, i32x4_dot_i16x8(w[0], xs));
                            }
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
                    let ints = if Q4 {
                        i32x4_add(ints, i32x4_splat(x.offsets[b]))
                    } else {
                        ints
                    };
                    let scale = f32x4_mul(w_scales, f32x4_splat(x.scales[b]));
                    acc[h] = mul_add(acc[h], f32x4_convert_i32x4(ints), scale);
                }
            }
        }
        acc.map(super::group_lanes)
    }

    /// [`dot`] for the number of rows in `x` (1 or 2).
    pub fn tile<const Q4: bool>(
        scales: &[f32],
        quants: &[u8],
        x: &[Act],
        out: &mut [[f32; GROUP]],
    ) {
        match *x {
            [a] => out.copy_from_slice(&dot::<1, Q4>(scales, quants, [a])),
            [a, b] => out.copy_from_slice(&dot::<2, Q4>(scales, quants, [a, b])),
            _ => panic!("a packed tile in wasm holds 1 or 2 activation rows"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::{Isa, check_values, quantize_rows_q8};
    use crate::quant::HostMatrix;

    /// Q4_0 (`q4`) or Q8_0 blocks of pseudo-random weights, row-major.
    fn blocks(q4: bool, rows: usize, cols: usize) -> Blocks {
        let w = check_values(rows * cols, 11);
        match if q4 {
            HostMatrix::q4(&w)
        } else {
            HostMatrix::q8(&w)
        } {
            HostMatrix::Blocks(blocks) => blocks,
            _ => unreachable!("q4 and q8 make blocks"),
        }
    }

    #[test]
    fn packing_keeps_every_block() {
        for q4 in [true, false] {
            for rows in [1, 7, 8, 9, 67] {
                let row_major = blocks(q4, rows, 96);
                let packed = Packed::pack(rows, 96, row_major.clone());
                assert_eq!(packed.blocks(), row_major, "q4 {q4}, {rows} rows");
            }
        }
    }

    /// Every instruction set's packed kernel against the row-major scalar kernel, and each
    /// activation row of a batch against the row alone.
    #[test]
    fn packed_products_match_the_row_major_ones() {
        let (rows, cols, t) = (67, 288, 6);
        let x = check_values(t * cols, 5);
        let mut xq = Q8Rows::default();
        quantize_rows_q8(&x, cols, &mut xq);
        for q4 in [true, false] {
            let row_major = blocks(q4, rows, cols);
            let packed = Packed::pack(rows, cols, row_major.clone());
            let mut expected = vec![0.0; t * rows];
            let row_major = HostMatrix::Blocks(row_major);
            crate::kernels::matmul(
                Isa::Scalar,
                row_major.rows(),
                rows,
                cols,
                &x,
                &xq,
                t,
                &mut expected,
            );
            let top = expected.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            for isa in Isa::available() {
                let mut got = vec![f32::NAN; t * rows];
                matmul(isa, &packed, &xq, t, &mut got);
                for (a, b) in got.iter().zip(&expected) {
                    assert!((a - b).abs() <= 1e-5 * top, "{isa:?} q4 {q4}: {a} vs {b}");
                }
                for i in 0..t {
                    let mut one = Q8Rows::default();
                    quantize_rows_q8(&x[i * cols..(i + 1) * cols], cols, &mut one);
                    let mut alone = vec![f32::NAN; rows];
                    matmul(isa, &packed, &one, 1, &mut alone);
                    assert_eq!(
                        alone,
                        got[i * rows..(i + 1) * rows],
                        "{isa:?} q4 {q4} row {i}"
                    );
                }
            }
        }
    }
}
